"""Hooks are Engine events: the map is one-to-one, only overridden hooks attach, and they fire in order."""

from __future__ import annotations

import inspect

import pytest
import torch

from tracktrain import Callback, Events, LoopModule, Trainer
from tracktrain.callbacks import CallbackPhase
from tracktrain.trainer.hooks import HOOK_EVENTS

from ._tasks import Classifier, make_loader, quiet


def _hook_names(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if name.startswith("on_")}


def test_every_hook_maps_to_exactly_one_event():
    targets = [(spec.stage, spec.event.name) for spec in HOOK_EVENTS.values()]
    assert len(targets) == len(set(targets)), "two hooks share an engine event"
    assert _hook_names(Callback) == set(HOOK_EVENTS)
    assert _hook_names(LoopModule) == set(HOOK_EVENTS)


class Recorder(Callback):
    """Records every hook (all overridden) as (hook, current_epoch, global_step)."""

    def __init__(self, calls: list) -> None:
        self.calls = calls


def _record(name: str):
    def hook(self, trainer, module, *args):
        self.calls.append(name)

    hook.__name__ = name
    return hook


for _name in HOOK_EVENTS:
    setattr(Recorder, _name, _record(_name))


def _collapse(calls: list[str]) -> list[str]:
    """Repeated batch-level hooks collapsed so orders read like a story."""
    out: list[str] = []
    for call in calls:
        if out and out[-1].rstrip("*") == call and "batch" in call or (out and out[-1] == call and "backward" in call):
            out[-1] = call + "*"
        else:
            out.append(call)
    return out


ONE_VALIDATION_BATCH = [
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
]


def test_fit_hook_order_with_validation_at_epoch_end(tmp_path):
    calls: list[str] = []
    trainer = Trainer(
        **quiet(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1, callbacks=[Recorder(calls)])
    )
    trainer.fit(Classifier(), make_loader(), make_loader())
    assert calls == [
        "on_fit_start",
        # the sanity check (Lightning's order): min(num_sanity_val_steps=2, limit_val_batches=1) batch
        "on_sanity_check_start",
        *ONE_VALIDATION_BATCH,
        "on_sanity_check_end",
        "on_train_start",
        "on_train_epoch_start",
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_train_batch_end",
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_train_batch_end",
        *ONE_VALIDATION_BATCH,
        "on_train_epoch_end",
        "on_train_end",
        "on_fit_end",
    ]


def test_validation_at_step_interval_runs_inside_the_epoch(tmp_path):
    calls: list[str] = []

    class Marks(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            calls.append(f"batch{batch_idx}")

        def on_validation_end(self, trainer, module):
            if not trainer.sanity_checking:  # the fit's validations only
                calls.append(f"val@{trainer.global_step}")

        def on_train_epoch_end(self, trainer, module):
            calls.append("epoch_end")

    trainer = Trainer(
        **quiet(
            tmp_path,
            max_epochs=2,
            limit_train_batches=3,
            limit_val_batches=1,
            val_check_interval=2,
            callbacks=[Marks()],
        )
    )
    trainer.fit(Classifier(), make_loader(), make_loader())
    # counted within each epoch, as Lightning does: after every 2nd batch of an epoch
    assert calls == [
        "batch0",
        "batch1",
        "val@2",
        "batch2",
        "epoch_end",
        "batch0",
        "batch1",
        "val@5",
        "batch2",
        "epoch_end",
    ]


def test_val_every_n_epochs(tmp_path):
    epochs: list[int] = []

    class Marks(Callback):
        def on_validation_start(self, trainer, module):
            if not trainer.sanity_checking:  # the fit's validations only
                epochs.append(trainer.current_epoch)

    Trainer(
        **quiet(
            tmp_path,
            max_epochs=5,
            limit_train_batches=1,
            limit_val_batches=1,
            val_every_n_epochs=2,
            callbacks=[Marks()],
        )
    ).fit(Classifier(), make_loader(), make_loader())
    assert epochs == [1, 3]


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_hook_order(tmp_path, stage):
    calls: list[str] = []
    trainer = Trainer(
        **quiet(
            tmp_path, callbacks=[Recorder(calls)], limit_val_batches=2, limit_test_batches=2, limit_predict_batches=2
        )
    )
    loader = make_loader()
    if stage == "predict":
        loader = [x for x, _ in loader]
    getattr(trainer, stage)(Classifier(), loader)
    name = {"validate": "validation"}.get(stage, stage)
    assert calls == [
        f"on_{name}_start",
        f"on_{name}_epoch_start",
        f"on_{name}_batch_start",
        f"on_{name}_batch_end",
        f"on_{name}_batch_start",
        f"on_{name}_batch_end",
        f"on_{name}_epoch_end",
        f"on_{name}_end",
    ]


def test_only_overridden_hooks_are_attached_and_removed_after(tmp_path):
    class OneHook(Callback):
        def on_train_epoch_end(self, trainer, module):
            pass

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[OneHook() for _ in range(20)]))
    counts = {}

    class Count(Callback):
        phase = CallbackPhase.LAST

        def on_train_start(self, trainer, module):
            engine = trainer.train_engine
            counts.update({key: len(records) for key, records in engine._event_handlers.items()})

    trainer.callbacks.append(Count())
    trainer.fit(Classifier(), make_loader())
    # the 20 callbacks, the trainer's reduce and publish, and the loggers' flush at each epoch's end
    assert counts["EPOCH_COMPLETED"] == 20 + 2 + 1
    assert "ITERATION_COMPLETED" not in counts and "ITERATION_STARTED" not in counts
    assert all(not records for records in trainer.train_engine._event_handlers.values())


def test_module_hooks_get_their_arguments(tmp_path):
    seen = {}

    class Module(Classifier):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.setdefault("batch_idx", []).append(batch_idx)
            seen["outputs"] = outputs

        def on_before_backward(self, loss):
            seen["loss_requires_grad"] = loss.requires_grad

        def on_before_optimizer_step(self, optimizer):
            seen["grad"] = self.net.weight.grad is not None
            seen["optimizer"] = optimizer

    module = Module()
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, limit_train_batches=3))
    trainer.fit(module, make_loader())
    assert seen["batch_idx"] == [0, 1, 2, 0, 1, 2]
    assert isinstance(seen["outputs"], torch.Tensor) and seen["outputs"].requires_grad
    assert seen["loss_requires_grad"] and seen["grad"]
    assert seen["optimizer"] is trainer.optimizers[0]


def test_event_handlers_with_ignite_filters(tmp_path):
    iterations: list[int] = []

    class EveryThree(Callback):
        def event_handlers(self, trainer):
            return [
                ("fit", Events.ITERATION_COMPLETED(every=3), lambda engine: iterations.append(engine.state.iteration))
            ]

    Trainer(**quiet(tmp_path, max_epochs=2, callbacks=[EveryThree()])).fit(Classifier(), make_loader())
    assert iterations == [3, 6, 9, 12, 15]


def test_on_exception_sees_the_error_and_it_still_propagates(tmp_path):
    seen = []

    class Watch(Callback):
        def on_exception(self, trainer, module, exception):
            seen.append(exception)

    class Broken(Classifier):
        def eval_step(self, batch, batch_idx):
            raise RuntimeError("boom in validation")

    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=1, callbacks=[Watch()]))
    with pytest.raises(RuntimeError, match="boom in validation"):
        trainer.fit(Broken(), make_loader(), make_loader())
    assert len(seen) == 1 and "boom" in str(seen[0])


def test_user_handlers_on_the_engines_survive_fits(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2))
    epochs = []
    trainer.train_engine.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: epochs.append(engine.state.epoch))
    trainer.fit(Classifier(), make_loader())
    trainer.max_epochs = 2  # room for the next fit (a Trainer whose limit was reached trains nothing, as Lightning's)
    trainer.fit(Classifier(), make_loader())
    assert epochs == [1, 1, 2]
