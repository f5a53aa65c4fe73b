"""`Trainer(strategy=PipelineStrategy(...))` with real gloo processes: a `PipelineModule`'s stages on 2 ranks train
what one process trains (the same parameters, losses and metrics, gradient clipping over every stage's norm); each
rank keeps only its stages; checkpoints are sharded by stage, resume bit for bit after a SIGKILL, read back whole in
one process, and a single-process checkpoint loads into the pipeline."""

from __future__ import annotations

import os
import signal
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.distributed.collectives import spawn
from tracktrain.engine.pipeline import split_stages
from tracktrain.trainer import PipelineModule
from tracktrain.trainer.strategies import PipelineStrategy
from tracktrain.trainer.strategies.pipeline import RemovedStage, check_stages

from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import make_loader

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

TWO_STAGES = ["hidden"]
FOUR_STAGES = ["act", "hidden", "act2"]


class Stacked(PipelineModule):
    def __init__(self, split_points: list[str] = TWO_STAGES) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.split_points = split_points
        layers = [("embed", nn.Linear(4, 16)), ("act", nn.Tanh()), ("hidden", nn.Linear(16, 16)), ("act2", nn.Tanh())]
        self.net = nn.Sequential(OrderedDict([*layers, ("head", nn.Linear(16, 2))]))

    def pipeline_stages(self):
        return split_stages(self.net, self.split_points)

    def pipeline_loss(self, output, target):
        return F.cross_entropy(output, target)

    def pipeline_metrics(self, output, target):
        return {"accuracy": (output.argmax(dim=1) == target).float().mean()}

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.05)


class _Logged(Callback):
    """Every value the module logged, at each step and at each validation's end."""

    def __init__(self) -> None:
        self.values: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.values.append({name: round(float(value), 5) for name, value in trainer.callback_metrics.items()})


class _KilledAt(Callback):
    """Rank 0 is SIGKILLed (a real signal) at the end of `step`, the background save of the step before on its way."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and torch.distributed.get_rank() == 0:
            os.kill(os.getpid(), signal.SIGKILL)


def _params(module: nn.Module) -> dict[str, list]:
    return {name: value.flatten().tolist() for name, value in module.state_dict().items()}


def _loader(batch_size: int = 8) -> DataLoader:
    # a plain shuffling loader: every rank of a pipeline reads the order one process reads with the same seed
    return DataLoader(make_loader().dataset, batch_size=batch_size, shuffle=True)


def _fit(out: str, strategy, module=None, ckpt=None, max_steps=12, callbacks=(), clip=0.05, **options):
    module = module or Stacked()
    logged = _Logged()
    checkpoint = ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=4, save_top_k=None)
    trainer = Trainer(
        max_steps=max_steps,
        seed=3,
        enable_progress_bar=False,
        default_root_dir=out,
        strategy=strategy,
        callbacks=[checkpoint, logged, *callbacks],
        loggers=False,
        gradient_clip_val=clip,
        val_check_interval=4,
        **options,
    )
    # validation in batches of 10: the stages take any size to evaluate (padded to whole micro-batches)
    trainer.fit(module, _loader(), _loader(batch_size=10), ckpt_path=ckpt)
    module.fitted_by = trainer
    return module, logged.values


def _predicted_classes(module) -> list | None:
    """The classes `module`'s Trainer predicts for the task's inputs (None on a rank without the last stage)."""
    loader = DataLoader(make_loader().dataset.tensors[0], batch_size=10)
    batches = module.fitted_by.predict(module, loader)
    return None if batches[0] is None else [row for batch in batches for row in batch.argmax(dim=1).tolist()]


def _two_stages(out: str) -> None:
    module, logged = _fit(out, PipelineStrategy(num_microbatches=4))
    _save(out, "params", _params(module))
    _save(out, "logged", logged)
    _save(out, "removed", [name for name, child in module.named_modules() if isinstance(child, RemovedStage)])
    _save(out, "predicted", _predicted_classes(module))
    resumed, _ = _fit(
        os.path.join(out, "again"),
        PipelineStrategy(num_microbatches=4),
        ckpt=os.path.join(out, "ckpt", "checkpoint_8.dcp"),
    )
    _save(out, "resumed", _params(resumed))


def test_two_stages_train_what_one_process_trains_and_checkpoints_go_both_ways(tmp_path):
    spawn(_two_stages, 2, args=(str(tmp_path),))
    one, one_logged = _fit(str(tmp_path / "one"), "auto")
    expected = _params(one)
    # each rank holds its stage only: the other is removed from its module
    assert _load(tmp_path, "removed") == [["net.hidden", "net.act2", "net.head"], ["net.embed", "net.act"]]
    params = _load(tmp_path, "params")
    assert sorted(params[0]) == ["net.embed.bias", "net.embed.weight"]
    assert sorted(params[1]) == ["net.head.bias", "net.head.weight", "net.hidden.bias", "net.hidden.weight"]
    held = {**params[0], **params[1]}
    assert sorted(held) == sorted(expected)
    for name, values in expected.items():  # clipping took the norm over both stages, as one process does
        assert held[name] == pytest.approx(values, abs=1e-5), name
    # the loss and the last stage's metrics on every rank, as one process logged them
    logged = _load(tmp_path, "logged")
    assert logged[0] == logged[1]
    assert {"train_loss", "train_accuracy", "val_loss", "val_accuracy"} <= set(logged[0][-1])
    assert len(logged[0]) == len(one_logged) == 12
    for ours, theirs in zip(logged[0], one_logged):
        assert ours.keys() == theirs.keys()
        for name, value in ours.items():
            assert value == pytest.approx(theirs[name], abs=1e-4), name

    # predictions: the last stage's output, on its rank
    assert _load(tmp_path, "predicted") == [None, _predicted_classes(one)]

    # the sharded checkpoint of step 12, read whole by one process, is the model the ranks held
    states = read_checkpoint(tmp_path / "ckpt" / "checkpoint_12.dcp")
    whole = Stacked()
    whole.load_state_dict(states["model"])  # every stage's parameters, under the whole model's names
    assert _params(whole) == held
    assert len(whole(torch.randn(3, 4))) == 3  # runs in one process: evaluation, export
    # the optimizer's state keyed by index in the whole model's order, as one process's AdamW keys it
    optimizer = whole.configure_optimizers()
    optimizer.load_state_dict(states["optimizers"][0])
    reference = one.fitted_by.optimizers[0].state_dict()
    assert states["optimizers"][0]["param_groups"][0]["params"] == reference["param_groups"][0]["params"]
    for index, moments in reference["state"].items():
        for key, value in moments.items():
            read = states["optimizers"][0]["state"][index][key]
            assert read.flatten().tolist() == pytest.approx(value.flatten().tolist(), abs=1e-5), (index, key)
    # resumed at step 8 on 2 ranks: bit for bit where the uninterrupted run ended
    assert _load(tmp_path, "resumed") == params


def _interleaved(out: str, name: str, max_steps: int, ckpt: str | None = None, kill_at: int | None = None) -> None:
    callbacks = [_KilledAt(kill_at)] if kill_at is not None else []
    strategy = PipelineStrategy(num_microbatches=4, schedule="interleaved_1f1b")
    module, _ = _fit(out, strategy, Stacked(FOUR_STAGES), ckpt=ckpt, max_steps=max_steps, callbacks=callbacks)
    _save(out, name, _params(module))


@pytest.mark.slow  # about 30 s of ranks; CI runs the slow tests
def test_sigkill_of_an_interleaved_pipeline_resumes_bit_for_bit(tmp_path):
    os.environ.setdefault("TRACKTRAIN_DIST_TIMEOUT", "20")
    spawn(_interleaved, 2, args=(str(tmp_path / "full"), "trained", 16))
    with pytest.raises(Exception, match="SIGKILL|signal|exit"):
        spawn(_interleaved, 2, args=(str(tmp_path / "cut"), "trained", 16, None, 10))
    assert not (tmp_path / "cut" / "trained_rank0.json").exists()
    spawn(_interleaved, 2, args=(str(tmp_path / "cut"), "trained", 16, "last"))
    full, resumed = _load(tmp_path / "full", "trained"), _load(tmp_path / "cut", "trained")
    assert resumed == full  # bit for bit, each rank its two stages (0 and 2, 1 and 3)
    assert sorted(full[0]) == ["net.embed.bias", "net.embed.weight", "net.hidden.bias", "net.hidden.weight"]


def _from_one_process(out: str, ckpt: str) -> None:
    strategy = PipelineStrategy(num_microbatches=2, schedule="gpipe")
    module, _ = _fit(out, strategy, ckpt=ckpt, max_steps=6, accumulate_grad_batches=2)
    _save(out, "params", _params(module))


@pytest.mark.slow  # 15 s of ranks; CI runs the slow tests
def test_a_single_process_checkpoint_loads_into_the_pipeline_and_training_goes_on_alike(tmp_path):
    # accumulating 2 batches per step: each micro-batch's loss divided by the window, as one process divides the loss
    _fit(str(tmp_path / "one"), "auto", max_steps=4, accumulate_grad_batches=2)
    expected = _params(_fit(str(tmp_path / "one_more"), "auto", max_steps=6, accumulate_grad_batches=2)[0])
    ckpt = str(tmp_path / "one" / "ckpt" / "checkpoint_4.pt")
    spawn(_from_one_process, 2, args=(str(tmp_path), ckpt))
    params = _load(tmp_path, "params")
    held = {**params[0], **params[1]}
    assert sorted(held) == sorted(expected)
    for name, values in expected.items():  # model and AdamW moments taken from the one-process checkpoint
        assert held[name] == pytest.approx(values, abs=1e-5), name


def test_a_pipeline_needs_a_pipeline_module_whose_stages_hold_every_parameter():
    class Partial(Stacked):
        def pipeline_stages(self):
            return [self.net.embed, self.net.hidden]  # head in no stage

    with pytest.raises(ValueError, match=r"\['net.head.weight', 'net.head.bias'\] .* in none of its pipeline_stages"):
        partial = Partial()
        check_stages(partial, list(partial.pipeline_stages()))

    class Tied(Stacked):
        def pipeline_stages(self):
            return [self.net, self.net.head]

    tied = Tied()
    with pytest.raises(ValueError, match="in stage 0 and in stage 1"):
        check_stages(tied, list(tied.pipeline_stages()))

    with pytest.raises(ValueError, match="schedule='zigzag'.* takes one of"):
        PipelineStrategy(schedule="zigzag")
    with pytest.raises(ValueError, match="num_microbatches=0"):
        PipelineStrategy(num_microbatches=0)
    with pytest.raises(TypeError, match="runs a PipelineModule"):
        PipelineStrategy().setup_module(nn.Linear(2, 2))


def test_a_pipeline_module_trains_in_one_process_with_the_same_names():
    trainer = Trainer(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, loggers=False)
    trainer.fit(Stacked(), _loader(), _loader())
    assert {"train_loss", "train_accuracy", "val_loss", "val_accuracy"} <= set(trainer.callback_metrics)
    assert 0.0 <= float(trainer.callback_metrics["val_accuracy"]) <= 1.0
