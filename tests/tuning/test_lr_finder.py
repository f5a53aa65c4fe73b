"""`tracktrain.tuning.lr_find`: the sweep's learning rates, the losses it records, its suggestion on a problem whose
answer is known, its plot, and that it leaves the module, optimizer, Trainer and disk as they were."""

from __future__ import annotations

import ast
import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import tracktrain.tuning
from tracktrain import LoopModule, Trainer
from tracktrain.loggers import Logger
from tracktrain.tuning import LRFinderResult, lr_find

from ..trainer._tasks import GAN, Classifier, make_loader, quiet


class RecordingSGD(torch.optim.SGD):
    """SGD that notes the learning rate each step really used."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.step_lrs: list[float] = []

    def step(self, closure=None):
        self.step_lrs.append(self.param_groups[0]["lr"])
        return super().step(closure)


class RecordingClassifier(Classifier):
    """A Classifier that keeps each train_step's loss and its optimizer (to read the learning rates it stepped with)."""

    def __init__(self) -> None:
        super().__init__()
        self.step_losses: list[float] = []
        self.optimizer: RecordingSGD | None = None

    def train_step(self, batch, batch_idx):
        loss = super().train_step(batch, batch_idx)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        self.optimizer = RecordingSGD(self.parameters(), lr=self.lr)
        return self.optimizer


class Quadratic(LoopModule):
    """loss = ||w||² (the batch is ignored). A gradient step multiplies w by (1 - 2·lr): the loss falls for lr < 1
    and grows without bound for lr > 1, the divergence the sweep must stop at."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))
        self.lr = 1e-3

    def train_step(self, batch, batch_idx):
        return (self.w**2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class CachedAdam(Classifier):
    """Returns the same Adam from every configure_optimizers: its state (moments, step counts) lives between fits."""

    def __init__(self) -> None:
        super().__init__()
        self.optimizer = torch.optim.Adam(self.parameters(), lr=0.01)

    def configure_optimizers(self):
        return self.optimizer


def trainer_for(tmp_path, **kwargs) -> Trainer:
    return Trainer(**quiet(tmp_path, loggers=False, max_epochs=1, **kwargs))


def test_exponential_sweep_runs_from_min_lr_to_max_lr(tmp_path):
    module = RecordingClassifier()
    result = lr_find(trainer_for(tmp_path), module, make_loader(), min_lr=1e-5, max_lr=1e-1, num_training=12,
                     early_stop_threshold=None)  # fmt: skip
    assert len(result.lrs) == 12 and result.diverged_at is None
    assert result.lrs[0] == pytest.approx(1e-5) and result.lrs[-1] == pytest.approx(1e-1)
    ratios = [b / a for a, b in zip(result.lrs, result.lrs[1:])]
    assert ratios == pytest.approx([10 ** (4 / 11)] * 11)  # a constant factor: exponential
    assert module.optimizer is not None and module.optimizer.step_lrs == result.lrs  # what each step really used


def test_linear_sweep_has_equal_steps(tmp_path):
    result = lr_find(trainer_for(tmp_path), Classifier(), make_loader(), min_lr=0.01, max_lr=0.1, num_training=10,
                     mode="linear", early_stop_threshold=None)  # fmt: skip
    assert result.lrs == pytest.approx([0.01 + 0.01 * i for i in range(10)])


def test_recorded_loss_is_each_steps_loss(tmp_path):
    module = RecordingClassifier()
    result = lr_find(trainer_for(tmp_path), module, make_loader(), num_training=10, beta=0.0,
                     early_stop_threshold=None)  # fmt: skip
    assert result.raw_losses == pytest.approx(module.step_losses, abs=0, rel=1e-6)
    assert result.losses == result.raw_losses  # beta=0: no smoothing


def test_recorded_loss_is_the_accumulation_windows_mean(tmp_path):
    module = RecordingClassifier()
    trainer = trainer_for(tmp_path, accumulate_grad_batches=2)
    result = lr_find(trainer, module, make_loader(), num_training=6, beta=0.0, early_stop_threshold=None)
    pairs = [sum(module.step_losses[i : i + 2]) / 2 for i in range(0, 12, 2)]
    assert len(module.step_losses) == 12 and result.raw_losses == pytest.approx(pairs, rel=1e-6)
    assert module.optimizer is not None and len(module.optimizer.step_lrs) == 6  # one LR per optimizer step


def test_smoothed_loss_is_the_bias_corrected_moving_average(tmp_path):
    result = lr_find(trainer_for(tmp_path), Classifier(), make_loader(), num_training=8, beta=0.5,
                     early_stop_threshold=None)  # fmt: skip
    average = 0.0
    for i, (raw, smoothed) in enumerate(zip(result.raw_losses, result.losses)):
        average = 0.5 * average + 0.5 * raw
        assert smoothed == pytest.approx(average / (1 - 0.5 ** (i + 1)))


def test_divergence_stops_the_sweep_and_the_suggestion_is_in_the_descent(tmp_path):
    result = lr_find(trainer_for(tmp_path), Quadratic(), make_loader(), min_lr=1e-3, max_lr=100.0, num_training=60)
    # lr > 1 makes |1 - 2·lr| > 1: the loss can only start growing past lr = 1, and the sweep must stop there
    assert result.diverged_at is not None and result.diverged_at > 1.0
    assert len(result.lrs) < 60 and result.lrs[-1] == result.diverged_at
    assert result.losses[-1] > 4.0 * min(result.losses[:-1])
    suggestion = result.suggestion()
    assert suggestion < 1.0 < result.diverged_at
    at = result.lrs.index(suggestion)
    assert result.losses[at + 1] < result.losses[at - 1]  # the loss is falling there
    assert at < result.losses.index(min(result.losses))  # before the lowest loss


def test_suggestion_is_the_steepest_descent_of_a_known_curve():
    lrs = [10.0 ** (e / 4) for e in range(-16, 1)]  # 1e-4 .. 1
    # a smoothed loss falling fastest (against log lr) at lr = 1e-2, then rising
    losses = [1.0 - math.tanh(2 * (math.log10(lr) + 2)) for lr in lrs[:14]] + [0.1, 1.0, 5.0]
    result = LRFinderResult(lrs, losses, losses, "exponential", diverged_at=1.0)
    assert result.suggestion(skip_begin=1) == pytest.approx(1e-2)
    # past the lowest loss a noisy spike falls back steeply: that is the divergence, not a descent to suggest
    spiky = LRFinderResult(lrs, losses[:15] + [9.0, 1.0], losses, "exponential", diverged_at=1.0)
    assert spiky.suggestion(skip_begin=1, skip_end=0) == pytest.approx(1e-2)
    with pytest.raises(
        ValueError,
        match=r"recorded 17 steps; the suggestion \(skipping 16 at the start and 1 at the end\) needs at least 3",
    ):
        result.suggestion(skip_begin=16)


def test_plot_is_a_figure_and_save_plot_writes_a_png(tmp_path):
    from matplotlib.figure import Figure

    result = lr_find(trainer_for(tmp_path), Quadratic(), make_loader(), min_lr=1e-3, max_lr=100.0, num_training=60)
    figure = result.plot()
    assert isinstance(figure, Figure) and figure.axes[0].get_xscale() == "log"
    path = result.save_plot(tmp_path / "sweep.png")
    with open(path, "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    from PIL import Image  # matplotlib's own dependency: the file is a whole, readable image

    with Image.open(path) as image:
        image.verify()


def _imports_at_import_time(node: ast.AST) -> list[str]:
    """The modules a module's code imports when it is imported: not those inside functions or `if TYPE_CHECKING:`."""
    names: list[str] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
            continue
        if isinstance(child, ast.Import):
            names += [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom):
            names.append(child.module or "")
        names += _imports_at_import_time(child)
    return names


def test_matplotlib_is_imported_only_when_plotting():
    # read from the source (quick): in this process other tests have imported matplotlib already
    files = sorted(Path(tracktrain.tuning.__file__).parent.glob("*.py"))
    assert len(files) >= 4
    for path in files:
        imported = _imports_at_import_time(ast.parse(path.read_text()))
        assert not [name for name in imported if name.split(".")[0] == "matplotlib"], path


def test_module_optimizer_and_generators_come_back_bit_for_bit(tmp_path):
    trainer = trainer_for(tmp_path)
    module = CachedAdam()
    trainer.fit(module, make_loader())  # Adam now has moments and step counts
    weights = copy.deepcopy(module.state_dict())
    optimizer_state = copy.deepcopy(module.optimizer.state_dict())
    rng = torch.get_rng_state()
    module.eval()

    lr_find(trainer, module, make_loader(shuffle=True), num_training=20, max_lr=100.0)

    assert module.state_dict().keys() == weights.keys()
    assert all(torch.equal(module.state_dict()[k], v) for k, v in weights.items())
    after = module.optimizer.state_dict()
    assert after["param_groups"] == optimizer_state["param_groups"]  # the lr too
    for key, state in optimizer_state["state"].items():
        assert all(torch.equal(after["state"][key][name], value) for name, value in state.items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert not module.training  # its mode as it was
    assert module.trainer is trainer and trainer.global_step == 8  # still the Trainer it was, its step count as it was


def test_a_fit_after_lr_find_equals_one_without(tmp_path):
    def fitted(with_lr_find: bool) -> dict[str, torch.Tensor]:
        # seeded: without a seed each fit draws its data order from torch's generator, which lr_find moved on
        trainer = Trainer(**quiet(tmp_path, loggers=False, max_epochs=2, seed=3))
        module = Classifier(lr=0.05)
        loader = make_loader(shuffle=True)
        if with_lr_find:
            lr_find(trainer, module, loader, num_training=20, max_lr=10.0)
        trainer.fit(module, loader)
        return module.state_dict()

    without, after = fitted(False), fitted(True)
    assert all(torch.equal(after[key], value) for key, value in without.items())


def test_leaves_no_checkpoints_or_logs(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, enable_progress_bar=False, max_epochs=1)  # checkpoints and CSV logs
    result = lr_find(trainer, Classifier(), make_loader(), num_training=10)
    assert list(tmp_path.iterdir()) == []  # the CSVLogger keeps no files: no run is opened for the plot
    assert result.plot_path is None


class RecordingLogger(Logger):
    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self._run_id: str | None = None

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def start(self, root_dir: str) -> None:
        self._run_id = self._run_id or "run-1"
        self.calls.append(("start",))

    def log_hyperparams(self, params) -> None:
        self.calls.append(("params",))

    def log_metrics(self, metrics, step: int) -> None:
        self.calls.append(("metrics", dict(metrics), step))

    def log_artifact(self, local_path: str, artifact_path: str | None = None, step: int | None = None) -> None:
        with open(local_path, "rb") as file:
            self.calls.append(("artifact", file.read(8), artifact_path, step))

    def finalize(self, status: str) -> None:
        self.calls.append(("finalize", status))


def test_the_plot_is_logged_to_the_trainers_loggers(tmp_path):
    logger = RecordingLogger()
    trainer = Trainer(**quiet(tmp_path, loggers=[logger], max_epochs=1))
    result = lr_find(trainer, Classifier(), make_loader(), num_training=10)
    # the run is opened for the plot alone (no sweep metrics, no params) and ended
    assert logger.calls == [("start",), ("artifact", b"\x89PNG\r\n\x1a\n", "lr_find", 0), ("finalize", "FINISHED")]
    assert result.plot_path is not None
    trainer.fit(Classifier(), make_loader())  # the next fit continues the same run
    assert logger.run_id == "run-1" and logger.calls[3] == ("start",)


def test_update_attr_sets_the_suggestion_on_the_module(tmp_path):
    module = Quadratic()
    result = lr_find(trainer_for(tmp_path), module, make_loader(), min_lr=1e-3, max_lr=100.0, num_training=60,
                     update_attr=True)  # fmt: skip
    assert module.lr == result.suggestion()


def test_update_attr_without_an_lr_attribute_is_refused(tmp_path):
    module = Quadratic()
    del module.lr
    with pytest.raises(AttributeError, match=r"module.lr or module.learning_rate, but Quadratic has neither"):
        lr_find(trainer_for(tmp_path), module, make_loader(), update_attr=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_lr": 0}, r"min_lr=\.\.\.\) must be a finite number > 0, got 0"),
        ({"max_lr": float("inf")}, r"max_lr=\.\.\.\) must be a finite number > 0, got inf"),
        ({"min_lr": 1.0, "max_lr": 0.1}, r"min_lr must be below max_lr"),
        ({"num_training": 1}, r"num_training=\.\.\.\) must be an integer >= 2 \(optimizer steps\), got 1"),
        ({"mode": "cosine"}, r"mode=\.\.\.\) must be 'exponential' or 'linear', got 'cosine'"),
        ({"early_stop_threshold": 0.5}, r"early_stop_threshold=\.\.\.\) must be a number > 1 .* got 0.5"),
        ({"beta": 1.0}, r"beta=\.\.\.\) must be a number in \[0, 1\), got 1.0"),
    ],
)
def test_bad_arguments_are_refused_by_name(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        lr_find(trainer_for(tmp_path), Classifier(), make_loader(), **kwargs)


def test_bad_trainer_module_and_manual_optimization_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"lr_find\(trainer=\.\.\.\) needs a tracktrain.Trainer, got str"):
        lr_find("trainer", Classifier(), make_loader())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"lr_find\(module=\.\.\.\) needs a LoopModule .* got Linear"):
        lr_find(trainer_for(tmp_path), nn.Linear(4, 2), make_loader())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lr_find needs automatic optimization .* GAN steps its optimizers itself"):
        lr_find(trainer_for(tmp_path), GAN(), make_loader())


class WithPlateau(Classifier):
    """An LR scheduler that monitors a validation value: a sweep without validation steps the optimizer alone."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}


def test_the_sweep_leaves_the_modules_lr_schedulers_out_and_gives_them_back(tmp_path):
    module = WithPlateau()
    result = lr_find(
        Trainer(**quiet(tmp_path, loggers=False, max_epochs=3)), module, make_loader(n=64), num_training=12
    )
    assert len(result.lrs) == 12  # more than the 8 batches of an epoch: its end stepped no scheduler
    assert "lr_scheduler" in module.configure_optimizers()  # the module's own again
    assert "configure_optimizers" not in vars(module)
