"""Everyday Lightning code, with only the renames our API makes (`LoopModule`, `train_step`, `eval_step`), runs on
the real Trainer with Lightning's meaning (issue 35) — and nothing a user writes is silently ignored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tracktrain import Callback, LoopModule
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.distributed.collectives import spawn

from ._tasks import Classifier, make_loader


def quiet_trainer(root, **options):
    from tracktrain import Trainer

    options = {"enable_progress_bar": False, "enable_checkpointing": False, "loggers": False, **options}
    return Trainer(default_root_dir=root, **options)


# ------------------------------------------------------------------------------------------- trainer.should_stop
class StopAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step
        self.seen: list[bool] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            self.seen.append(trainer.should_stop)
            trainer.should_stop = True
            self.seen.append(trainer.should_stop)


def test_should_stop_set_by_a_callback_stops_the_fit_after_that_step(tmp_path):
    stopper = StopAtStep(3)
    trainer = quiet_trainer(tmp_path, max_epochs=5, callbacks=[stopper])
    trainer.fit(Classifier(), make_loader())  # 8 steps per epoch: 40 without the stop
    assert trainer.global_step == 3
    assert stopper.seen == [False, True]  # reading it gives the current request


class StopsItself(Classifier):
    def train_step(self, batch, batch_idx):
        if self.global_step == 2:
            self.trainer.should_stop = True
        return super().train_step(batch, batch_idx)


def test_should_stop_set_by_the_module_stops_the_fit(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=5)
    trainer.fit(StopsItself(), make_loader())
    assert trainer.global_step == 3  # the step that asked is finished


# under DDP: tests/trainer/test_ddp.py::test_a_stop_asked_on_one_rank_stops_every_rank_at_the_same_step sets it on
# one rank and both stop at the same step


# ------------------------------------------------------------------------------------------- configure_callbacks
class Recorder(Callback):
    def __init__(self, name: str) -> None:
        self.name = name
        self.epochs = 0

    def on_train_epoch_end(self, trainer, module):
        self.epochs += 1


class WithCallbacks(Classifier):
    def __init__(self, checkpoint_dir) -> None:
        super().__init__()
        self.checkpoint_dir = checkpoint_dir

    def configure_callbacks(self):
        return [ModelCheckpoint(dirpath=self.checkpoint_dir), Recorder("module's")]


def test_configure_callbacks_adds_the_modules_callbacks_replacing_those_of_the_same_type(tmp_path):
    given, kept = Recorder("trainer's"), StopAtStep(100)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[given, kept], enable_checkpointing=True)
    trainer.fit(WithCallbacks(tmp_path / "module_checkpoints"), make_loader())
    recorders = [callback for callback in trainer.callbacks if isinstance(callback, Recorder)]
    assert [recorder.name for recorder in recorders] == ["module's"]  # replaced, and it ran
    assert recorders[0].epochs == 2 and given.epochs == 0 and kept in trainer.callbacks
    checkpoints = [callback for callback in trainer.callbacks if isinstance(callback, ModelCheckpoint)]
    assert len(checkpoints) == 1 and trainer.callbacks[-1] is checkpoints[0]  # the Trainer's default replaced; last
    assert os.listdir(tmp_path / "module_checkpoints")  # the module's checkpoint callback saved
    assert not (tmp_path / "checkpoints").exists()


def test_configure_callbacks_returning_something_else_is_an_error(tmp_path):
    class Wrong(Classifier):
        def configure_callbacks(self):
            return [print]

    with pytest.raises(TypeError, match=r"configure_callbacks\(\) returned <built-in function print>.*Callback"):
        quiet_trainer(tmp_path, max_epochs=1).fit(Wrong(), make_loader())


# ------------------------------------------------------------------------------- nothing set on the Trainer is lost
@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("max_epochz", "Did you mean max_epochs"),  # a typo
        ("check_val_every_n_epoch", r"Trainer\(check_val_every_n_epoch=\.\.\.\).*trainer\.val_every_n_epochs"),
        ("enable_progress_bar", r"Trainer\(enable_progress_bar=\.\.\.\)"),  # read when the Trainer is built only
        ("global_step", "read-only"),
    ],
)
def test_setting_an_attribute_the_trainer_does_not_read_is_an_error_naming_what_to_use(tmp_path, name, names):
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(AttributeError, match=names):
        setattr(trainer, name, 3)
    assert name not in vars(trainer)


def test_the_trainers_own_settings_and_a_subclass_declared_attribute_can_be_set(tmp_path):
    from tracktrain import Trainer

    class MyTrainer(Trainer):
        own_attributes = frozenset({"notes"})

    trainer = MyTrainer(enable_progress_bar=False, enable_checkpointing=False, loggers=False, default_root_dir=tmp_path)
    trainer.max_epochs, trainer.notes = 1, "kept"
    trainer.fit(Classifier(), make_loader())  # a fit's own assignments (Session, RunCheckpoints) are all declared
    assert (trainer.global_step, trainer.notes) == (8, "kept")
    with pytest.raises(AttributeError, match="max_epochz"):
        trainer.max_epochz = 3


# --------------------------------------------------------------------------------------- save_hyperparameters
class WithHparams(Classifier):
    def __init__(self, lr: float = 0.1, width: int = 4, note: str = "x", **extra) -> None:
        super().__init__(lr)
        self.save_hyperparameters(ignore="note")


def test_save_hyperparameters_captures_the_init_arguments_as_hparams(tmp_path):
    module = WithHparams(0.5, width=3, momentum=0.9)
    assert module.hparams == {"lr": 0.5, "width": 3, "momentum": 0.9}  # **kwargs spread, `note` ignored
    assert module.hparams.lr == 0.5 and module.hparams["width"] == 3
    module.hparams.width = 5  # writable, as Lightning's AttributeDict
    assert module.hparams == {"lr": 0.5, "width": 5, "momentum": 0.9}
    with pytest.raises(AttributeError, match=r"No hyperparameter 'depth'.*\['lr', 'momentum', 'width'\]"):
        _ = module.hparams.depth

    class Named(Classifier):
        def __init__(self, lr: float = 0.1, width: int = 4) -> None:
            super().__init__(lr)
            self.save_hyperparameters("width")

    assert Named(0.2, 7).hparams == {"width": 7}
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(module, make_loader(n=16))
    assert trainer.settings["module"] == {"lr": 0.5, "width": 5, "momentum": 0.9}  # saved, logged, compared


def test_save_hyperparameters_outside_init_or_with_unknown_names_is_an_error():
    module = Classifier()
    with pytest.raises(RuntimeError, match=r"call it there"):
        module.save_hyperparameters()

    class Misnamed(Classifier):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__(lr)
            self.save_hyperparameters("learning_rate")

    with pytest.raises(ValueError, match=r"\['learning_rate'\] are not arguments.*\['lr'\]"):
        Misnamed()


# --------------------------------------------------------------------------------------- load_from_checkpoint
class Net(LoopModule):
    """Blocks in a ModuleList (sharded one by one under FSDP), its sizes and learning rate saved as hparams."""

    def __init__(self, width: int = 8, depth: int = 2, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Linear(4, width)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])
        self.head = nn.Linear(width, 2)
        self.dropout = nn.Dropout(0.5)  # eval mode after loading: predictions are deterministic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.dropout(x))

    def train_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


PROBE = torch.linspace(-2, 2, 24).reshape(6, 4)


def _outputs(module: nn.Module) -> list:
    module.eval()
    with torch.no_grad():
        return module(PROBE).tolist()


def _fit_net(dirpath: str, strategy: str = "auto") -> tuple[Net, str]:
    checkpoint = ModelCheckpoint(dirpath=dirpath)
    trainer = quiet_trainer(dirpath, max_epochs=1, strategy=strategy, callbacks=[checkpoint], seed=3)
    module = Net(width=6, depth=3)
    trainer.fit(module, make_loader(n=32))
    return module, checkpoint.best_model_path  # the latest one, without a monitor


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_fitted_module_loads_back_from_its_full_checkpoint_and_predicts_the_same(tmp_path, where):
    root = str(tmp_path / "ckpt") if where == "local" else f"memory://{tmp_path.name}/ckpt"
    trained, path = _fit_net(root)
    loaded = Net.load_from_checkpoint(path)
    assert loaded.hparams == {"width": 6, "depth": 3, "lr": 0.05} and len(loaded.blocks) == 3  # rebuilt from them
    assert not loaded.training
    assert _outputs(loaded) == _outputs(trained)
    generic = LoopModule.load_from_checkpoint(path, map_location="cpu", lr=0.5)  # the class the checkpoint records
    assert type(generic) is Net and generic.hparams.lr == 0.5 and _outputs(generic) == _outputs(trained)
    with pytest.raises(TypeError, match=r"Could not rebuild Net.*unexpected keyword argument 'heads'.*name=value"):
        Net.load_from_checkpoint(path, heads=2)
    with pytest.raises(RuntimeError, match="size mismatch|shape"):
        Net.load_from_checkpoint(path, width=5)  # the weights are checked before anything loads


def test_load_from_checkpoint_from_s3(tmp_path, s3_bucket):
    trained, path = _fit_net(f"{s3_bucket}/runs/ckpt")
    assert path.startswith("s3://")
    assert _outputs(Net.load_from_checkpoint(path)) == _outputs(trained)


def _fit_net_sharded(out: str, dirpath: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    module, path = _fit_net(dirpath, strategy="fsdp")
    trained = Net(width=6, depth=3)  # the trained weights, gathered with torch's own API (not the strategy's)
    trained.load_state_dict(get_model_state_dict(module, options=StateDictOptions(full_state_dict=True)))
    outputs = _outputs(trained)
    if dist.get_rank() == 0:
        Path(out, "sharded.json").write_text(json.dumps({"path": path, "outputs": outputs}))


def _load_sharded(tmp_path, dirpath: str) -> None:
    spawn(_fit_net_sharded, 2, args=(str(tmp_path), dirpath))
    saved = json.loads((tmp_path / "sharded.json").read_text())
    assert saved["path"].endswith(".dcp")  # FSDP's default: a sharded checkpoint, each rank's shards
    loaded = Net.load_from_checkpoint(saved["path"])  # read whole into this one process
    assert loaded.hparams.depth == 3
    assert _outputs(loaded) == saved["outputs"]


@pytest.mark.distributed
def test_a_module_fitted_with_fsdp_on_2_ranks_loads_back_from_its_sharded_checkpoint(tmp_path):
    _load_sharded(tmp_path, str(tmp_path / "ckpt"))


@pytest.mark.slow  # ranks writing to S3: 20 s
@pytest.mark.distributed
def test_a_sharded_checkpoint_on_s3_loads_back(tmp_path, s3_bucket):
    _load_sharded(tmp_path, f"{s3_bucket}/runs/sharded")


# ------------------------------------------------------------------- self.device, estimated_stepping_batches, ...
class OneCycle(Classifier):
    """OneCycleLR sized by the Trainer, stepped by hand with manual_backward: the Lightning habits of one module."""

    automatic_optimization = False

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        self.total_steps = self.trainer.estimated_stepping_batches
        return [optimizer], [torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=self.total_steps)]

    def train_step(self, batch, batch_idx):
        x, y = batch
        assert x.device == self.device == torch.device("cpu")
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(F.cross_entropy(self(x), y))
        optimizer.step()
        self.lr_schedulers().step()  # OneCycleLR raises on a step past total_steps


@pytest.mark.parametrize(
    ("options", "total"),
    [
        ({"max_epochs": 3}, 24),  # 8 batches a epoch
        ({"max_epochs": 3, "limit_train_batches": 5}, 15),
        ({"max_epochs": 2, "max_steps": 11}, 11),  # max_steps when fewer
        ({"max_epochs": None, "max_steps": 9}, 9),
    ],
)
def test_estimated_stepping_batches_sizes_onecycle_in_configure_optimizers(tmp_path, options, total):
    module = OneCycle()
    trainer = quiet_trainer(tmp_path, **options)
    trainer.fit(module, make_loader())
    assert module.total_steps == total == trainer.global_step  # every step taken, none past the schedule


def test_estimated_stepping_batches_counts_accumulation_windows_and_needs_a_fit(tmp_path):
    class Sized(Classifier):
        def configure_optimizers(self):
            self.total_steps = self.trainer.estimated_stepping_batches
            return super().configure_optimizers()

    module, trainer = Sized(), quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=3)
    trainer.fit(module, make_loader())
    assert module.total_steps == 6 == trainer.global_step  # 8 batches: windows of 3, 3 and 2 each epoch
    with pytest.raises(RuntimeError, match="once fit"):
        _ = trainer.estimated_stepping_batches


def test_ranks_print_and_seed_everything(tmp_path, capsys):
    import tracktrain

    module = Classifier()
    assert (module.global_rank, module.local_rank, module.device) == (0, 0, torch.device("cpu"))
    module.print("only on rank 0", 1)
    assert capsys.readouterr().out == "only on rank 0 1\n"
    assert quiet_trainer(tmp_path).is_global_zero
    assert tracktrain.seed_everything(7) == 7
    drawn = torch.rand(3)
    tracktrain.seed_everything(7)
    assert torch.equal(torch.rand(3), drawn)
    with pytest.raises(ValueError, match=r"seed_everything\(seed=...\).*got -1"):
        tracktrain.seed_everything(-1)


# ----------------------------------------------------------------------- Lightning's names we do not take: refused
def test_a_module_with_lightnings_step_names_only_is_refused_with_ours(tmp_path):
    class Ported(LoopModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(TypeError, match=r"Ported defines training_step\(\).*Rename it to train_step"):
        quiet_trainer(tmp_path, max_epochs=1).fit(Ported(), make_loader())

    class PortedValidation(Ported):
        def train_step(self, batch, batch_idx):
            return self.training_step(batch, batch_idx)

        def validation_step(self, batch, batch_idx):
            pass

    with pytest.raises(TypeError, match=r"validation_step\(\).*Rename it to eval_step"):
        quiet_trainer(tmp_path, max_epochs=1).fit(PortedValidation(), make_loader())


def test_a_helper_named_like_our_step_beside_lightnings_step_is_refused_naming_both(tmp_path):
    """Lightning's imagenet example: `validation_step` calls its own `eval_step(batch, batch_idx, prefix)`. Left
    unrenamed, tracktrain would call the helper as the step (a raw TypeError for `prefix`); the error names both. A
    module that keeps Lightning's name as an alias of ours (runs under both frameworks) is not refused."""

    class Helper(LoopModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def train_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def eval_step(self, batch, batch_idx, prefix):
            self.log(f"{prefix}_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

        def validation_step(self, batch, batch_idx):
            return self.eval_step(batch, batch_idx, "val")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    message = r"defines validation_step\(\) and its own eval_step\(self, batch, batch_idx, prefix\).*shared_eval_step"
    with pytest.raises(TypeError, match=message):
        quiet_trainer(tmp_path, max_epochs=1).fit(Helper(), make_loader(), make_loader(n=8))

    class Alias(Helper):
        def eval_step(self, batch, batch_idx):
            return super().eval_step(batch, batch_idx, "val")

        validation_step = eval_step

    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(Alias(), make_loader(), make_loader(n=8))
    assert "val_loss" in trainer.callback_metrics
