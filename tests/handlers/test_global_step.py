"""global_step_from_engine: an evaluator's handlers read the trainer's epoch or iteration."""

from __future__ import annotations

import pytest

from tracktrain.engine import Engine, EventEnum, Events
from tracktrain.handlers import global_step_from_engine


class CustomEvents(EventEnum):
    BACKWARD_COMPLETED = "backward_completed"


def trainer_with_evaluator(**transform_kwargs) -> tuple[Engine, Engine, list[int]]:
    """A trainer (4 iterations x 3 epochs) that runs an evaluator after each epoch; the evaluator's COMPLETED
    handler records the step the transform gives for that event."""
    trainer = Engine(lambda e, b: None)
    evaluator = Engine(lambda e, b: None)
    transform = global_step_from_engine(trainer, **transform_kwargs)
    steps: list[int] = []
    evaluator.add_event_handler(Events.COMPLETED, lambda e: steps.append(transform(e, Events.COMPLETED)))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run(range(2)))
    return trainer, evaluator, steps


def test_evaluator_results_are_placed_at_the_trainer_epoch():
    trainer, evaluator, steps = trainer_with_evaluator()
    trainer.run(range(4), max_epochs=3)
    assert steps == [1, 2, 3]
    assert evaluator.state.epoch == 1  # the evaluator's own counter would have said 1 every time


def test_custom_event_name_picks_the_trainer_iteration():
    trainer, _, steps = trainer_with_evaluator(custom_event_name=Events.ITERATION_COMPLETED)
    trainer.run(range(4), max_epochs=3)
    assert steps == [4, 8, 12]


def test_registered_custom_event_uses_its_counter():
    trainer = Engine(lambda e, b: e.fire_event(CustomEvents.BACKWARD_COMPLETED))
    trainer.register_events(*CustomEvents, event_to_attr={CustomEvents.BACKWARD_COMPLETED: "backward"})
    trainer.add_event_handler(Events.ITERATION_STARTED, lambda e: setattr(e.state, "backward", e.state.backward + 2))
    transform = global_step_from_engine(trainer, custom_event_name=CustomEvents.BACKWARD_COMPLETED)
    trainer.run(range(3), max_epochs=1)
    assert transform(None, Events.COMPLETED) == 6


def test_event_without_a_counter_falls_back_to_an_attribute():
    trainer = Engine(lambda e, b: None)
    trainer.run(range(5), max_epochs=2)
    assert global_step_from_engine(trainer)(None, "some_unregistered_event") == 2
    assert global_step_from_engine(trainer, fallback_attr="iteration")(None, "some_unregistered_event") == 10


def test_same_steps_as_ignite():
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import global_step_from_engine as ignite_global_step_from_engine

    def steps(engine_cls, events, factory):
        trainer = engine_cls(lambda e, b: None)
        trainer.run(range(5), max_epochs=3)
        return [
            factory(trainer)(None, events.EPOCH_COMPLETED),
            factory(trainer)(None, events.ITERATION_COMPLETED),
            factory(trainer, events.ITERATION_STARTED)(None, events.EPOCH_COMPLETED),
            factory(trainer)(None, events.COMPLETED),
        ]

    assert (
        steps(Engine, Events, global_step_from_engine)
        == steps(IgniteEngine, IgniteEvents, ignite_global_step_from_engine)
        == [3, 15, 15, 3]
    )


def test_rejects_a_non_engine():
    with pytest.raises(TypeError, match="needs the Engine"):
        global_step_from_engine("trainer")
