"""The hooks take Colossal-AI's arguments (names, order, defaults: from Colossal-AI's source at its last commit before
the trainer moved to colossalai/legacy), and a hook of the script's own runs the Colossal-AI methods it overrides."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from tracktrain.colossal import initialize
from tracktrain.colossal.context import ParallelMode
from tracktrain.colossal.nn.metric import Accuracy
from tracktrain.colossal.trainer import Trainer, hooks

pytest.importorskip("tensorboard")  # hooks.TensorboardHook is the integration's

_ = ParallelMode
COLOSSAL_SIGNATURES = {
    "BaseHook": "(priority)",
    "LossHook": "(priority=0)",
    "AccuracyHook": "(accuracy_func, priority=0)",
    "LRSchedulerHook": "(lr_scheduler, by_epoch, store_lr_in_state=True, priority=1)",
    "LogMetricByEpochHook": "(logger, interval=1, priority=10)",
    "LogMemoryByEpochHook": "(logger, interval=1, priority=10, log_eval=True, report_cpu=False)",
    "LogTimingByEpochHook": "(timer, logger, interval=1, priority=10, log_eval=True, ignore_num_train_steps=0)",
    "TensorboardHook": "(log_dir, ranks=None, parallel_mode=None, priority=10)",
    "SaveCheckpointHook": "(interval=1, checkpoint_dir=None, model=None, save_by_iter=False, priority=10)",
    "ThroughputHook": "(ignored_steps=0, priority=10, tflop_per_step=0, use_local=False)",
}


def _plain(signature: inspect.Signature) -> str:
    parts = [name if p.default is p.empty else f"{name}={p.default!r}" for name, p in signature.parameters.items()]
    return f"({', '.join(parts)})"


@pytest.mark.parametrize("name", sorted(COLOSSAL_SIGNATURES))
def test_each_hook_takes_colossal_ais_arguments(name):
    # TensorboardHook's parallel_mode defaults to ParallelMode.GLOBAL in Colossal-AI; None means it here
    assert _plain(inspect.signature(getattr(hooks, name))) == COLOSSAL_SIGNATURES[name]


def test_accuracy_hooks_function_is_its_first_argument_not_its_priority():
    hook = hooks.AccuracyHook(Accuracy())
    assert hook.hook_priority == 0 and isinstance(hook.accuracy_func, Accuracy)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'accuracy_func'"):
        hooks.AccuracyHook()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="counting a batch's correct predictions"):
        hooks.AccuracyHook(3)  # type: ignore[arg-type]


def _fit(tmp_path, monkeypatch, hook_list, epochs=1, **fit):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    engine, *_ = initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), verbose=False)
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator)) for _ in range(3)]
    trainer = Trainer(engine)
    trainer.fit(data, epochs=epochs, test_dataloader=data, hooks=hook_list, **fit)
    return trainer, data


def test_a_counting_accuracy_function_gives_the_accuracy_of_the_arg_max(tmp_path, monkeypatch):
    def correct(logits, labels):
        return (logits.argmax(-1) == labels).sum()

    by_module, _ = _fit(tmp_path, monkeypatch, [hooks.AccuracyHook(Accuracy())])
    by_function, _ = _fit(tmp_path, monkeypatch, [hooks.AccuracyHook(correct)])
    assert by_function.metrics["val_accuracy"] == pytest.approx(by_module.metrics["val_accuracy"])


def test_a_hook_of_the_scripts_own_runs_the_methods_it_overrides(tmp_path, monkeypatch):
    seen: list[tuple] = []

    class Record(hooks.BaseHook):
        def __init__(self) -> None:
            super().__init__(priority=5)

        def after_hook_is_attached(self, trainer):
            seen.append(("attached", trainer.cur_step))

        def before_train(self, trainer):
            self.init_runner_states(trainer, "counted", 0)
            seen.append(("before_train",))

        def after_train_iter(self, trainer, output, label, loss):
            trainer.states["counted"] += 1
            seen.append(("iter", tuple(output.shape), tuple(label.shape), loss.ndim))

        def after_test_epoch(self, trainer):
            seen.append(("test_epoch", trainer.cur_epoch))

    record = Record()
    trainer, _ = _fit(tmp_path, monkeypatch, [record])
    assert seen == [("attached", 0), ("before_train",), *[("iter", (8, 3), (8,), 0)] * 3, ("test_epoch", 0)]
    assert trainer.states["counted"] == 3
    wrapped = [c for c in trainer.trainer.callbacks if getattr(c, "hook", None) is record]
    assert len(list(wrapped[0].event_handlers(trainer.trainer))) == 3  # only what it overrides is attached


def test_a_hook_that_skipped_base_hooks_init_is_told_to_call_it(tmp_path, monkeypatch):
    class LogMessageHook(hooks.BaseHook):  # Colossal-AI's docs' example: its __init__ never calls super()
        def __init__(self, priority=10):
            self.calls = 0

    with pytest.raises(TypeError, match=r"LogMessageHook has no priority: .*super\(\).__init__\(priority\)"):
        _fit(tmp_path, monkeypatch, [LogMessageHook()])


def test_save_checkpoint_hook_writes_committed_resumable_checkpoints_by_iteration(tmp_path, monkeypatch):
    from tracktrain.checkpoint.discovery import committed_checkpoints

    directory = tmp_path / "ckpt"
    trainer, _ = _fit(
        tmp_path,
        monkeypatch,
        [hooks.SaveCheckpointHook(interval=2, checkpoint_dir=str(directory), save_by_iter=True)],
        epochs=2,
    )
    assert trainer.cur_step == 6
    assert len(committed_checkpoints(str(directory))[0]) == 3  # at iterations 2, 4, 6, each with its manifest


def test_save_checkpoint_hook_refuses_a_model_other_than_the_engines(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="the model given is another one"):
        _fit(
            tmp_path, monkeypatch, [hooks.SaveCheckpointHook(checkpoint_dir=str(tmp_path / "c"), model=nn.Linear(1, 1))]
        )


def test_lr_scheduler_hook_by_iteration_steps_every_iteration(tmp_path, monkeypatch):
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    monkeypatch.chdir(tmp_path)
    engine, *_ = initialize(model, optimizer, nn.CrossEntropyLoss(), verbose=False)
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(3)]
    trainer = Trainer(engine)
    trainer.fit(data, epochs=2, hooks=[hooks.LRSchedulerHook(scheduler, by_epoch=False)])
    assert scheduler.last_epoch == 6 and trainer.metrics["lr"] == pytest.approx(0.5**6)
