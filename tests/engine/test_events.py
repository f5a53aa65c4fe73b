"""Events, filters and their argument checks."""

from __future__ import annotations

import pytest

from tracktrain.engine import CallableEventWithFilter, Engine, EventEnum, Events, EventsList


def _fired_at(event, iterations: int = 12) -> list[int]:
    engine = Engine(lambda e, b: None)
    fired: list[int] = []
    engine.add_event_handler(event, lambda e: fired.append(e.state.iteration))
    engine.run(range(iterations))
    return fired


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (Events.ITERATION_COMPLETED(every=4), [4, 8, 12]),
        (Events.ITERATION_COMPLETED(every=1), list(range(1, 13))),
        (Events.ITERATION_COMPLETED(once=5), [5]),
        (Events.ITERATION_COMPLETED(once=[2, 7, 99]), [2, 7]),
        (Events.ITERATION_COMPLETED(before=4), [1, 2, 3]),
        (Events.ITERATION_COMPLETED(after=9), [10, 11, 12]),
        (Events.ITERATION_COMPLETED(after=2, before=6), [3, 4, 5]),
        (Events.ITERATION_COMPLETED(every=3, after=2), [3, 6, 9, 12]),
        (Events.ITERATION_COMPLETED(every=2, before=7), [1, 3, 5]),
        (Events.ITERATION_COMPLETED(event_filter=lambda e, i: i in (1, 12)), [1, 12]),
    ],
)
def test_filters_fire_on_the_expected_iterations(event, expected):
    assert _fired_at(event) == expected


def test_range_filters_exclude_counter_zero_as_in_ignite():
    # STARTED fires with epoch == 0; `after` defaults to 0 and is exclusive, so a range never includes it
    assert _fired_at(Events.STARTED(before=1)) == []
    assert _fired_at(Events.STARTED(every=2)) == [0]  # plain every: 0 % 2 == 0, as in Ignite


def test_every_one_returns_an_unfiltered_event():
    event = Events.ITERATION_COMPLETED(every=1)
    assert event.filter is None
    assert event == Events.ITERATION_COMPLETED


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "without a filter"),
        ({"every": 2, "once": 3}, ValueError, "got every=2 and once=3; pass one"),
        ({"once": 2, "before": 5}, ValueError, "got once=2 with before/after"),
        (
            {"event_filter": lambda e, i: True, "every": 2},
            ValueError,
            "Only one of the input arguments.*cannot combine event_filter",
        ),
        ({"every": 0}, ValueError, r"Argument every should be integer and greater than zero.*got 0"),
        ({"every": -3}, ValueError, "got -3"),
        ({"every": 2.5}, ValueError, "got 2.5"),
        ({"every": True}, ValueError, "got True"),
        ({"once": 0}, ValueError, "Argument once should.*got 0"),
        ({"once": []}, ValueError, "once="),
        ({"once": [1, -2]}, ValueError, "once="),
        ({"before": -1}, ValueError, "before="),
        ({"after": "3"}, ValueError, "after="),
        ({"event_filter": 3}, TypeError, "Argument event_filter should be a callable.*got 3"),
        ({"event_filter": lambda only_one: True}, ValueError, "event_filter"),
    ],
)
def test_bad_filter_arguments_fail_when_the_event_is_built(kwargs, error, match):
    with pytest.raises(error, match=match):
        Events.ITERATION_COMPLETED(**kwargs)


def test_filtered_events_compare_equal_by_name_and_to_their_name():
    filtered = Events.EPOCH_COMPLETED(every=3)
    assert filtered == Events.EPOCH_COMPLETED
    assert filtered == "EPOCH_COMPLETED"
    assert hash(filtered) == hash(Events.EPOCH_COMPLETED)
    assert filtered != Events.EPOCH_STARTED
    assert Events.EPOCH_COMPLETED.value == "epoch_completed"
    assert isinstance(filtered, CallableEventWithFilter)
    assert "every=3" in repr(filtered)


def test_events_list_collects_events_in_order():
    events = Events.STARTED | Events.EPOCH_COMPLETED(every=2) | Events.COMPLETED
    assert isinstance(events, EventsList)
    assert [e.name for e in events] == ["STARTED", "EPOCH_COMPLETED", "COMPLETED"]
    assert len(events) == 3 and events[1].filter is not None
    with pytest.raises(TypeError, match="Only events can be combined"):
        _ = Events.STARTED | "not an event"


def test_events_list_handler_fires_for_each_event():
    engine = Engine(lambda e, b: None)
    fired = []
    engine.add_event_handler(
        Events.STARTED | Events.EPOCH_COMPLETED(every=2) | Events.COMPLETED,
        lambda e: fired.append((e.last_event_name.name, e.state.epoch)),
    )
    engine.run([0], max_epochs=4)
    assert fired == [("STARTED", 0), ("EPOCH_COMPLETED", 2), ("EPOCH_COMPLETED", 4), ("COMPLETED", 4)]


class _CustomEvents(EventEnum):
    BACKWARD_STARTED = "backward_started"
    BACKWARD_COMPLETED = "backward_completed"


def test_custom_events_fire_with_counters_and_filters():
    def step(engine, batch):
        engine.state.backward_calls += 1
        engine.fire_event(_CustomEvents.BACKWARD_STARTED)
        engine.fire_event(_CustomEvents.BACKWARD_COMPLETED)

    engine = Engine(step)
    engine.register_events(*_CustomEvents, event_to_attr={_CustomEvents.BACKWARD_STARTED: "backward_calls"})
    assert engine.state.backward_calls == 0
    every_third, all_completed = [], []
    engine.add_event_handler(
        _CustomEvents.BACKWARD_STARTED(every=3), lambda e: every_third.append(e.state.backward_calls)
    )
    engine.add_event_handler(_CustomEvents.BACKWARD_COMPLETED, lambda e: all_completed.append(e.state.iteration))
    engine.run(range(7))
    assert every_third == [3, 6]
    assert all_completed == list(range(1, 8))
    assert engine.has_registered_events(_CustomEvents.BACKWARD_COMPLETED)


def test_custom_events_do_not_leak_between_engines():
    first, second = Engine(lambda e, b: None), Engine(lambda e, b: None)
    first.register_events(*_CustomEvents, event_to_attr={_CustomEvents.BACKWARD_STARTED: "backward_calls"})
    assert not second.has_registered_events(_CustomEvents.BACKWARD_STARTED)
    assert not hasattr(second.state, "backward_calls")
    with pytest.raises(ValueError, match="not a valid event"):
        second.add_event_handler(_CustomEvents.BACKWARD_STARTED, lambda: None)


def test_filter_on_an_event_without_counter_fails_when_attached():
    engine = Engine(lambda e, b: None)
    engine.register_events(*_CustomEvents)  # no event_to_attr
    with pytest.raises(ValueError, match=r"no counter on engine.state.*event_to_attr"):
        engine.add_event_handler(_CustomEvents.BACKWARD_STARTED(every=2), lambda: None)
    with pytest.raises(ValueError, match="no counter"):
        engine.add_event_handler(Events.TERMINATE(once=1), lambda: None)


def test_string_custom_events():
    engine = Engine(lambda e, b: e.fire_event("my_event"))
    fired = []
    engine.register_events("my_event")
    engine.add_event_handler("my_event", lambda e: fired.append(e.state.iteration))
    engine.run([0, 0])
    assert fired == [1, 2]


@pytest.mark.parametrize(
    ("events", "error", "match"),
    [
        (("not_registered",), ValueError, "not a valid event"),
        ((3,), TypeError, "Value at 0"),
    ],
)
def test_bad_event_names(events, error, match):
    engine = Engine(lambda e, b: None)
    if isinstance(events[0], str):
        with pytest.raises(error, match=match):
            engine.add_event_handler(events[0], lambda: None)
        with pytest.raises(error, match=match):
            engine.fire_event(events[0])
    else:
        with pytest.raises(error, match=match):
            engine.register_events(*events)


def test_register_events_rejects_a_non_mapping_event_to_attr():
    with pytest.raises(ValueError, match="Expected event_to_attr to be dictionary"):
        Engine(lambda e, b: None).register_events("x", event_to_attr=["x"])
