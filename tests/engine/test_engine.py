"""The Engine's run loop: event order, stopping, exceptions, re-running, state_dict and memory."""

from __future__ import annotations

import gc
import weakref

import pytest

from tracktrain.engine import Engine, Events, State

ITERATION = ["GET_BATCH_STARTED", "GET_BATCH_COMPLETED", "ITERATION_STARTED", "ITERATION_COMPLETED"]


def test_event_order_of_a_plain_run(record):
    engine = Engine(lambda e, b: b * 10)
    recorder = record(engine)
    state = engine.run([1, 2], max_epochs=2)
    assert recorder.trace == [
        ("STARTED", 0, 0),
        ("EPOCH_STARTED", 1, 0),
        *[(name, 1, 0 if i < 2 else 1) for i, name in enumerate(ITERATION)],
        *[(name, 1, 1 if i < 2 else 2) for i, name in enumerate(ITERATION)],
        ("EPOCH_COMPLETED", 1, 2),
        ("EPOCH_STARTED", 2, 2),
        # the iterator is exhausted at the next batch: it is re-created between GET_BATCH_STARTED/COMPLETED
        ("GET_BATCH_STARTED", 2, 2),
        ("DATALOADER_STOP_ITERATION", 2, 2),
        ("GET_BATCH_COMPLETED", 2, 2),
        ("ITERATION_STARTED", 2, 3),
        ("ITERATION_COMPLETED", 2, 3),
        *[(name, 2, 3 if i < 2 else 4) for i, name in enumerate(ITERATION)],
        ("EPOCH_COMPLETED", 2, 4),
        ("COMPLETED", 2, 4),
    ]
    assert (state.epoch, state.iteration, state.output, state.batch) == (2, 4, 20, 2)
    assert state.epoch_length == 2 and state.max_epochs == 2 and state.max_iters is None
    assert set(state.times) == {"EPOCH_COMPLETED", "COMPLETED"}
    assert all(isinstance(t, float) and t >= 0 for t in state.times.values())


def test_data_none_fires_no_batch_events(record):
    batches = []
    engine = Engine(lambda e, b: batches.append(b))
    recorder = record(engine)
    engine.run(max_epochs=2, epoch_length=3)
    assert batches == [None] * 6
    assert not {"GET_BATCH_STARTED", "GET_BATCH_COMPLETED", "DATALOADER_STOP_ITERATION"} & set(recorder.names())
    assert recorder.names().count("ITERATION_COMPLETED") == 6


def test_epoch_length_shorter_than_data_continues_the_iterator():
    seen = []
    Engine(lambda e, b: seen.append(b)).run(range(5), max_epochs=3, epoch_length=2)
    assert seen == [0, 1, 2, 3, 4, 0]


def test_unknown_length_is_defined_by_the_first_exhaustion(record):
    class Unsized:
        def __iter__(self):
            return iter(range(3))

    engine = Engine(lambda e, b: b)
    recorder = record(engine)
    state = engine.run(Unsized(), max_epochs=2)
    assert state.epoch_length == 3 and state.iteration == 6
    # epoch 1 ends when the data runs dry, without DATALOADER_STOP_ITERATION; epoch 2 re-creates it
    assert recorder.names().count("DATALOADER_STOP_ITERATION") == 1


def test_one_shot_iterator_that_runs_dry_ends_the_run_with_a_warning():
    seen = []
    with pytest.warns(UserWarning, match="can not provide data anymore.*Current iteration: 4"):
        state = Engine(lambda e, b: seen.append(b)).run(iter(range(4)), max_epochs=3, epoch_length=3)
    assert seen == [0, 1, 2, 3] and state.iteration == 4


def test_max_iters_stops_mid_epoch(record):
    engine = Engine(lambda e, b: b)
    recorder = record(engine)
    state = engine.run(range(4), max_iters=6)
    assert state.iteration == 6 and state.epoch == 2
    # Ignite ends a max_iters run through terminate: TERMINATE, then COMPLETED, no second EPOCH_COMPLETED
    assert recorder.names()[-2:] == ["TERMINATE", "COMPLETED"]
    assert recorder.names().count("EPOCH_COMPLETED") == 1
    assert engine.state_dict() == {"epoch_length": 4, "iteration": 6, "max_iters": 6}


def test_terminate_skips_the_cut_short_epoch_and_can_be_resumed(record):
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=5), lambda e: e.terminate())
    recorder = record(engine)
    state = engine.run(range(4), max_epochs=3)
    assert recorder.names()[-4:] == ["ITERATION_STARTED", "ITERATION_COMPLETED", "TERMINATE", "COMPLETED"]
    assert recorder.names().count("EPOCH_COMPLETED") == 1
    assert (state.epoch, state.iteration) == (2, 5)
    # running again continues: epoch 3 starts a fresh pass over the data
    recorder.trace.clear()
    seen = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.batch))
    state = engine.run(range(4))
    assert recorder.names()[0] == "STARTED" and (state.epoch, state.iteration) == (3, 9)
    assert seen == [0, 1, 2, 3]


def test_terminate_skip_completed(record):
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: e.terminate(skip_completed=True))
    recorder = record(engine)
    engine.run(range(2), max_epochs=5)
    assert recorder.names()[-2:] == ["EPOCH_COMPLETED", "TERMINATE"]


def test_terminate_epoch_completes_the_epoch_and_starts_the_next(record):
    engine = Engine(lambda e, b: b)
    counters = []
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda e: e.terminate_epoch())
    engine.add_event_handler(Events.TERMINATE_SINGLE_EPOCH, lambda e, iter_counter: counters.append(iter_counter))
    recorder = record(engine)
    state = engine.run(range(4), max_epochs=2)
    names = recorder.names()
    at = names.index("TERMINATE_SINGLE_EPOCH")
    assert names[at - 1 : at + 3] == [
        "ITERATION_COMPLETED",
        "TERMINATE_SINGLE_EPOCH",
        "EPOCH_COMPLETED",
        "EPOCH_STARTED",
    ]
    assert counters == [2]
    assert (state.epoch, state.iteration) == (2, 6)


def test_terminate_epoch_can_skip_epoch_completed(record):
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=1), lambda e: e.terminate_epoch(skip_epoch_completed=True))
    recorder = record(engine)
    engine.run(range(3), max_epochs=2)
    names = recorder.names()
    at = names.index("TERMINATE_SINGLE_EPOCH")
    assert names[at + 1] == "EPOCH_STARTED"


def test_terminate_epoch_on_epoch_started_is_an_error():
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.EPOCH_STARTED, lambda e: e.terminate_epoch())
    with pytest.raises(RuntimeError, match="should not be called on Event.STARTED or Event.EPOCH_STARTED"):
        engine.run(range(3))


def test_interrupt_returns_and_run_resumes_at_the_exact_batch(record):
    seen = []
    engine = Engine(lambda e, b: seen.append(b))
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=[3, 7]), lambda e: e.interrupt())
    recorder = record(engine)
    state = engine.run(range(5), max_epochs=2)
    assert (state.epoch, state.iteration) == (1, 3) and recorder.names()[-1] == "INTERRUPT"
    state = engine.run(range(5), max_epochs=2)
    assert (state.epoch, state.iteration) == (2, 7)
    state = engine.run(range(5), max_epochs=2)
    assert (state.epoch, state.iteration) == (2, 10)
    assert seen == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    names = recorder.names()
    assert names.count("STARTED") == 1 and names.count("COMPLETED") == 1 and names.count("INTERRUPT") == 2


def test_exception_without_handler_propagates():
    def step(engine, batch):
        if engine.state.iteration == 2:
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        Engine(step).run(range(3))


def test_exception_raised_handlers_receive_the_exception(record):
    def step(engine, batch):
        if engine.state.iteration == 2:
            raise KeyError("boom")

    engine = Engine(step)
    caught = []
    engine.add_event_handler(Events.EXCEPTION_RAISED, lambda e, exc: caught.append((e.state.iteration, exc)))
    recorder = record(engine)
    engine.run(range(3), max_epochs=1)
    assert [(i, type(exc)) for i, exc in caught] == [(2, KeyError)]
    # as in Ignite, a handled exception inside the epoch ends that epoch, then the run carries on
    assert recorder.names()[-2:] == ["EPOCH_COMPLETED", "COMPLETED"]


def test_removed_exception_handlers_no_longer_swallow_exceptions():
    def step(engine, batch):
        raise KeyError("boom")

    engine = Engine(step)
    handler = lambda e, exc: None  # noqa: E731
    engine.add_event_handler(Events.EXCEPTION_RAISED, handler)
    engine.remove_event_handler(handler, Events.EXCEPTION_RAISED)
    with pytest.raises(KeyError):
        engine.run([0])


def test_rerun_same_max_epochs_restarts_larger_continues_smaller_fails():
    engine = Engine(lambda e, b: b)
    engine.run(range(3), max_epochs=2)
    assert engine.run(range(3), max_epochs=2).iteration == 6  # restarted from 0
    assert engine.run(range(3), max_epochs=4).iteration == 12  # continued from 6
    with pytest.raises(ValueError, match="max_epochs should be greater than or equal to the start epoch.*3 vs 4"):
        engine.run(range(3), max_epochs=3)
    engine.state.max_epochs = None  # the documented way to restart with fewer epochs
    assert engine.run(range(3), max_epochs=1).iteration == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"data": 5}, TypeError, "should be iterable.*int"),
        ({"data": [1], "max_epochs": 1, "max_iters": 2}, ValueError, "mutually exclusive"),
        ({"data": [1], "epoch_length": 0}, ValueError, r"zero size.*epoch_length=0"),
        ({"data": [1], "max_epochs": -1}, ValueError, r"Argument max_epochs is invalid.*\(got -1\)"),
        ({"data": [1], "max_iters": 0}, ValueError, "Argument max_iters is invalid"),
        ({"data": None}, ValueError, "epoch_length should be provided if data is None"),
        ({"data": []}, ValueError, "zero size"),
        ({"data": [1], "seed": "7"}, TypeError, "seed must be an integer"),
    ],
)
def test_bad_run_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Engine(lambda e, b: b).run(**kwargs)


def test_changing_epoch_length_on_resume_is_an_error():
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda e: e.interrupt())
    engine.run(range(4), max_epochs=2)
    with pytest.raises(ValueError, match="epoch_length should be same as in the state.*3 vs 4"):
        engine.run(range(4), epoch_length=3)


def test_handlers_get_args_kwargs_with_or_without_engine():
    calls = []
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.STARTED, lambda e, a, b=0: calls.append((type(e).__name__, a, b)), 1, b=2)
    engine.add_event_handler(Events.COMPLETED, lambda a, b=0: calls.append((a, b)), "x", b="y")
    engine.add_event_handler(Events.COMPLETED, lambda: calls.append("no args"))
    engine.run([0])
    assert calls == [("Engine", 1, 2), ("x", "y"), "no args"]


def test_on_decorator_returns_the_function():
    engine = Engine(lambda e, b: b)

    @engine.on(Events.ITERATION_COMPLETED(every=2), "tag")
    def handler(engine, tag):
        engine.state.tags = [*getattr(engine.state, "tags", []), (tag, engine.state.iteration)]

    assert callable(handler) and engine.has_event_handler(handler)
    engine.run(range(4))
    assert engine.state.tags == [("tag", 2), ("tag", 4)]


def test_handler_signature_and_type_are_checked_when_added():
    engine = Engine(lambda e, b: b)
    with pytest.raises(TypeError, match="must be callable"):
        engine.add_event_handler(Events.STARTED, "not callable")
    with pytest.raises(ValueError, match=r"takes parameters \['a', 'b', 'c'\]"):
        engine.add_event_handler(Events.STARTED, lambda a, b, c: None)
    with pytest.raises(ValueError, match="process_function"):
        Engine(lambda: None)
    with pytest.raises(ValueError, match="must be given a processing function"):
        Engine(None)
    with pytest.raises(TypeError, match="is not a callable object"):
        Engine(42)


def test_has_and_remove_event_handler_find_filtered_handlers():
    engine = Engine(lambda e, b: b)
    calls = []

    def handler(engine):
        calls.append(engine.state.iteration)

    engine.add_event_handler(Events.ITERATION_COMPLETED(every=2), handler)
    assert engine.has_event_handler(handler)
    assert engine.has_event_handler(handler, Events.ITERATION_COMPLETED)
    assert not engine.has_event_handler(handler, Events.EPOCH_COMPLETED)
    engine.remove_event_handler(handler, Events.ITERATION_COMPLETED(every=5))
    assert not engine.has_event_handler(handler)
    with pytest.raises(ValueError, match="is not found among registered event handlers"):
        engine.remove_event_handler(handler, Events.ITERATION_COMPLETED)
    with pytest.raises(ValueError, match="does not exist"):
        engine.remove_event_handler(handler, Events.EPOCH_STARTED)
    engine.run(range(4))
    assert calls == []


def test_removable_handle_as_context_manager_and_weak_references():
    engine = Engine(lambda e, b: b)
    calls = []
    with engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: calls.append(1)) as handle:
        engine.run(range(2))
    engine.run(range(2))
    assert calls == [1, 1]
    assert isinstance(handle.engine, weakref.ref) and isinstance(handle.handler, weakref.ref)
    handle.remove()  # already removed: a no-op

    events = Events.STARTED | Events.COMPLETED
    handle = engine.add_event_handler(events, lambda e: calls.append(2))
    handle.remove()
    engine.run(range(2))
    assert calls == [1, 1]


def test_handler_removed_while_its_event_fires_still_runs_once():
    engine = Engine(lambda e, b: b)
    calls = []

    def first(engine):
        calls.append("first")
        engine.remove_event_handler(second, Events.ITERATION_COMPLETED)

    def second(engine):
        calls.append("second")

    engine.add_event_handler(Events.ITERATION_COMPLETED, first)
    engine.add_event_handler(Events.ITERATION_COMPLETED, second)
    engine.remove_event_handler(first, Events.ITERATION_COMPLETED)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=1), first)
    engine.run(range(2))
    assert calls == ["second", "first"]


def test_state_dict_round_trip_and_resume():
    engine = Engine(lambda e, b: b)
    engine.state_dict_user_keys.append("alpha")
    engine.add_event_handler(Events.STARTED, lambda e: setattr(e.state, "alpha", 0.5))
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=5), lambda e: e.terminate())
    engine.run(range(4), max_epochs=3)
    saved = engine.state_dict()
    assert saved == {"epoch_length": 4, "iteration": 5, "max_epochs": 3, "alpha": 0.5}

    resumed = Engine(lambda e, b: b)
    resumed.state_dict_user_keys.append("alpha")
    resumed.load_state_dict(saved)
    assert (resumed.state.epoch, resumed.state.iteration, resumed.state.alpha) == (1, 5, 0.5)
    seen = []
    resumed.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append((e.state.epoch, e.state.batch)))
    state = resumed.run(range(4))
    # a plain Engine does not replay data positions: the epoch finishes its 3 remaining iterations from a
    # fresh iterator (DeterministicEngine is the one that resumes at the exact batch)
    assert seen[:3] == [(2, 0), (2, 1), (2, 2)]
    assert (state.epoch, state.iteration) == (3, 12)


def test_load_state_dict_with_epoch_key_and_max_iters():
    engine = Engine(lambda e, b: b)
    engine.load_state_dict({"epoch_length": 3, "epoch": 2, "max_epochs": 4})
    assert (engine.state.iteration, engine.state.epoch) == (6, 2)
    assert engine.run(range(3)).iteration == 12
    engine = Engine(lambda e, b: b)
    engine.load_state_dict({"epoch_length": 3, "iteration": 4, "max_iters": 8})
    assert engine.run(range(3)).iteration == 8


@pytest.mark.parametrize(
    ("state_dict", "error", "match"),
    [
        ([("iteration", 1)], TypeError, "should be a dictionary"),
        ({"iteration": 1, "max_epochs": 2}, ValueError, "epoch_length must be a positive integer to calculate"),
        ({"epoch_length": 3, "max_epochs": 2}, ValueError, "Required state attribute 'iteration' is absent"),
        ({"epoch_length": 3, "iteration": 1, "epoch": 0, "max_epochs": 2}, ValueError, "only one of"),
        ({"epoch_length": 3, "iteration": 1}, ValueError, "exactly one of"),
        ({"epoch_length": 3, "iteration": 1, "max_epochs": 2, "max_iters": 4}, ValueError, "exactly one of"),
        ({"epoch_length": 3, "iteration": -1, "max_epochs": 2}, ValueError, "integer >= 0, got -1"),
        (
            {"epoch_length": 0, "iteration": 1, "max_epochs": 2},
            ValueError,
            "epoch_length must be a positive integer to calculate",
        ),
        (
            {"epoch_length": 3, "iteration": 12, "max_epochs": 2},
            ValueError,
            "Argument max_epochs should be greater than or equal to the start epoch defined in the state: 2 vs 4",
        ),
        (
            {"epoch_length": None, "epoch": 1, "max_epochs": 2},
            ValueError,
            "epoch_length must be a positive integer to calculate",
        ),
    ],
)
def test_malformed_state_dicts_are_rejected_with_the_reason(state_dict, error, match):
    with pytest.raises(error, match=match):
        Engine(lambda e, b: b).load_state_dict(state_dict)


def test_missing_user_key_is_rejected():
    engine = Engine(lambda e, b: b)
    engine.state_dict_user_keys.append("alpha")
    with pytest.raises(ValueError, match="Required user state attribute 'alpha' is absent"):
        engine.load_state_dict({"epoch_length": 3, "iteration": 0, "max_epochs": 1})


def test_state_accepts_user_attributes_and_reprs_them():
    state = State(custom=3)
    state.more = "x"
    text = repr(state)
    assert "custom: 3" in text and "more: x" in text and "iteration: 0" in text
    assert state.get_event_attrib_value(Events.ITERATION_COMPLETED) == 0
    with pytest.raises(RuntimeError, match="has no counter"):
        state.get_event_attrib_value(Events.TERMINATE)


def test_engine_is_freed_without_the_garbage_collector():
    """Handlers and handles hold no reference cycle through the engine: it dies as soon as it is unused."""
    gc.collect()
    gc.disable()
    try:
        engine = Engine(lambda e, b: b)
        engine.add_event_handler(Events.ITERATION_COMPLETED(every=2), lambda e: None)
        handle = engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e, x: None, 1)
        engine.add_event_handler(Events.ITERATION_COMPLETED(once=3), lambda e: e.interrupt())
        engine.run(range(4), max_epochs=2)  # interrupted: a paused run generator is alive
        engine.run(range(4), max_epochs=2)
        ref = weakref.ref(engine)
        del engine
        assert ref() is None
        handle.remove()  # the engine is gone: the handle does nothing
    finally:
        gc.enable()


def test_paused_engine_is_collected():
    engine = Engine(lambda e, b: b)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda e: e.interrupt())
    engine.run(range(4))
    ref = weakref.ref(engine)
    del engine
    gc.collect()
    assert ref() is None


def test_run_after_an_exception_resumes_the_broken_epoch():
    failures = {"left": 1}
    seen = []

    def step(engine, batch):
        if engine.state.iteration == 2 and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("transient")
        seen.append((engine.state.epoch, engine.state.iteration))

    engine = Engine(step)
    with pytest.raises(RuntimeError, match="transient"):
        engine.run(range(3), max_epochs=2)
    assert (engine.state.epoch, engine.state.iteration) == (1, 2)
    state = engine.run(range(3), max_epochs=2)
    # the failed iteration counts as done (as in Ignite); epoch 1 finishes, then epoch 2 runs in full
    assert seen == [(1, 1), (1, 3), (2, 4), (2, 5), (2, 6)]
    assert (state.epoch, state.iteration) == (2, 6)


def test_interrupt_can_be_disabled_on_the_class_or_the_engine():
    engine = Engine(lambda e, b: b)
    engine.interrupt_resume_enabled = False
    with pytest.raises(RuntimeError, match="interrupt_resume_enabled"):
        engine.interrupt()
    assert Engine(lambda e, b: b).interrupt_resume_enabled is True
