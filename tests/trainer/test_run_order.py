"""The run's order (`tracktrain.trainer.run_order`): at each event, callbacks run at their phase among the Trainer's
own work, in the order given within a phase, the module's hooks first among the hooks; nothing is ordered by a
number, and a callback that still asks for a `priority` is told what to use."""

from __future__ import annotations

import pytest

from tracktrain import Callback, Trainer
from tracktrain.callbacks import CallbackPhase, EarlyStopping

from ._tasks import Classifier, make_loader, quiet


class Seen(Callback):
    """Records, at the end of each training epoch, its tag and what the Trainer had done by then."""

    def __init__(self, tag: str, calls: list, phase: CallbackPhase = CallbackPhase.HOOKS) -> None:
        self.tag, self.calls, self.phase = tag, calls, phase

    def on_train_epoch_end(self, trainer, module):
        validated = "val_loss" in trainer.callback_metrics
        published = "epoch_loss" in trainer.logged_metrics
        self.calls.append((self.tag, validated, published))

    def on_exception(self, trainer, module, exception):
        self.calls.append((self.tag, "exception"))


class Module(Classifier):
    def __init__(self, calls: list) -> None:
        super().__init__()
        self.calls = calls

    def train_step(self, batch, batch_idx):
        loss = super().train_step(batch, batch_idx)
        self.log("epoch_loss", loss, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self):
        self.calls.append(("module", "val_loss" in self.trainer.callback_metrics, False))


def test_callbacks_run_at_their_phase_in_the_order_given_among_the_trainers_own_work(tmp_path):
    calls: list = []
    given = [
        Seen("last", calls, CallbackPhase.LAST),
        Seen("hooks-a", calls),
        Seen("after-decisions", calls, CallbackPhase.AFTER_DECISIONS),
        Seen("metrics", calls, CallbackPhase.METRICS),
        Seen("hooks-b", calls),
        Seen("first", calls, CallbackPhase.FIRST),
    ]
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1, callbacks=given))
    trainer.fit(Module(calls), make_loader(), make_loader())
    # (tag, validation already run, the epoch's values already published)
    assert calls == [
        ("first", False, False),
        ("metrics", False, False),  # before the epoch's validation and before its values are gathered
        ("module", True, False),  # the module's hook first among the hooks, after validation
        ("hooks-a", True, False),
        ("hooks-b", True, False),  # the order given to the Trainer
        ("after-decisions", True, False),
        ("last", True, True),  # after the epoch's values are published
    ]


def test_on_exception_hooks_run_by_phase_then_in_the_order_given(tmp_path):
    calls: list = []

    class Failing(Classifier):
        def train_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    given = [Seen("last", calls, CallbackPhase.LAST), Seen("hooks", calls), Seen("first", calls, CallbackPhase.FIRST)]
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=given))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing(), make_loader())
    assert calls == [("first", "exception"), ("hooks", "exception"), ("last", "exception")]


def test_the_built_in_callbacks_declare_phases_not_numbers():
    """Early stopping acts on what the hooks logged, after the ranks agreed; none of them carries a priority."""
    assert EarlyStopping(monitor="val_loss").phase is CallbackPhase.AFTER_DECISIONS
    assert Callback().phase is CallbackPhase.HOOKS
    assert not hasattr(Callback(), "priority")


@pytest.mark.parametrize("where", ["class", "instance"])
def test_a_callback_asking_for_a_priority_is_refused_naming_the_phases(tmp_path, where):
    class Old(Callback):
        def on_train_epoch_end(self, trainer, module):
            pass

    callback = Old()
    if where == "class":
        Old.priority = -5
    else:
        callback.priority = -5
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[callback]))
    with pytest.raises(TypeError, match=r"Old\.priority = -5.*order given to the Trainer.*CallbackPhase"):
        trainer.fit(Classifier(), make_loader())


def test_a_phase_that_is_not_a_callback_phase_is_refused(tmp_path):
    callback = Callback()
    callback.phase = "last"  # type: ignore[assignment]
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[callback]))
    with pytest.raises(TypeError, match=r"phase = 'last'.*CallbackPhase.LAST"):
        trainer.fit(Classifier(), make_loader())


def test_the_trackers_runs_end_even_when_an_on_exception_hook_is_interrupted():
    """A second Ctrl-C while a checkpoint commits in an `on_exception` hook: the runs still end (FAILED/KILLED), and
    the interruption is what is raised."""
    from tracktrain.trainer.run_order import ExceptionHooks

    ended = []

    def interrupted(engine, exception):
        raise KeyboardInterrupt

    hooks = ExceptionHooks([interrupted], last=lambda engine, exception: ended.append(exception))
    error = RuntimeError("the run's own error")
    with pytest.raises(KeyboardInterrupt):
        hooks.notify(None, error)
    assert ended == [error]
