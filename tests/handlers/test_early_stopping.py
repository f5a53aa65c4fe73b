"""EarlyStopping: counting, threshold (abs/rel), cumulative, mode, stopping a real trainer, resuming, Ignite parity."""

from __future__ import annotations

import itertools

import pytest

from tracktrain.engine import Engine, Events
from tracktrain.handlers import EarlyStopping


def _trainer() -> Engine:
    return Engine(lambda e, b: None)


def _feed(handler: EarlyStopping, scores: list[float]) -> list[tuple[int, float, bool]]:
    """Call the handler once per score (the score function reads the score off the 'engine')."""
    trace = []
    for score in scores:
        handler(score)
        trace.append((handler.counter, handler.best_score, bool(handler.trainer.should_terminate)))
    return trace


def _identity_handler(patience: int, **kwargs) -> EarlyStopping:
    return EarlyStopping(patience, score_function=lambda score: score, trainer=_trainer(), **kwargs)


def test_counts_evaluations_without_improvement_and_resets_on_improvement():
    handler = _identity_handler(3)
    trace = _feed(handler, [0.5, 0.4, 0.5, 0.6, 0.6, 0.55, 0.59])
    assert [c for c, _, _ in trace] == [0, 1, 2, 0, 1, 2, 3]
    assert [stop for _, _, stop in trace] == [False] * 6 + [True]
    assert handler.best_score == 0.6


def test_threshold_without_and_with_cumulative():
    scores = [1.0, 1.05, 1.1, 1.15, 1.3]
    plain = _feed(_identity_handler(10, threshold=0.1), scores)
    # each small gain becomes the new best, so the next must beat it by min_delta again
    assert plain == [(0, 1.0, False), (1, 1.05, False), (2, 1.1, False), (3, 1.15, False), (0, 1.3, False)]
    cumulative = _feed(_identity_handler(10, threshold=0.1, cumulative=True), scores)
    # the best stays put, so the small gains add up: 1.15 beats 1.0 by more than 0.1
    assert cumulative == [(0, 1.0, False), (1, 1.0, False), (2, 1.0, False), (0, 1.15, False), (0, 1.3, False)]


def test_stops_the_trainer_from_the_evaluator():
    val_scores = [0.1, 0.3, 0.29, 0.3, 0.2, 0.5, 0.6]
    trainer = _trainer()
    evaluator = Engine(lambda e, b: None)
    evaluator.add_event_handler(
        Events.COMPLETED, lambda e: e.state.metrics.update(score=val_scores[trainer.state.epoch - 1])
    )
    handler = EarlyStopping(patience=3, score_function=lambda e: e.state.metrics["score"], trainer=trainer)
    evaluator.add_event_handler(Events.COMPLETED, handler)
    completed_epochs = []
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda e: completed_epochs.append(e.state.epoch))
    terminated = []
    trainer.add_event_handler(Events.TERMINATE, lambda e: terminated.append(e.state.epoch))

    trainer.run(range(4), max_epochs=len(val_scores))
    # best 0.3 at epoch 2; epochs 3, 4, 5 do not beat it -> stop after epoch 5's evaluation
    assert terminated == [5]
    assert trainer.state.epoch == 5
    assert trainer.state.iteration == 5 * 4
    assert completed_epochs == [1, 2, 3, 4, 5]


def test_state_dict_resumes_the_counter_in_a_fresh_instance():
    first = _identity_handler(3)
    _feed(first, [0.9, 0.8, 0.85])
    saved = first.state_dict()
    assert dict(saved) == {"counter": 2, "best_score": 0.9, "threshold_mode": "abs"}

    resumed = _identity_handler(3)
    resumed.load_state_dict(saved)
    assert _feed(resumed, [0.7]) == [(3, 0.9, True)]

    not_resumed = _identity_handler(3)
    assert _feed(not_resumed, [0.7]) == [(0, 0.7, False)]


def test_reset_forgets_the_history():
    handler = _identity_handler(2)
    _feed(handler, [1.0, 0.5])
    handler.reset()
    assert (handler.counter, handler.best_score) == (0, None)


def test_same_counters_as_ignite():
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.handlers import EarlyStopping as IgniteEarlyStopping

    sequences = [
        [0.1, 0.2, 0.2, 0.19, 0.25, 0.24, 0.24, 0.3, 0.2],
        [1.0, 1.04, 1.08, 1.12, 1.16, 1.2, 1.0, 0.9],
        [5, 4, 3, 6, 6, 6.05, 7, 7.01, 7.02],
    ]
    options = itertools.product([0.0, 0.05], [False, True], ["abs", "rel"], ["max", "min"])
    for scores, (threshold, cumulative, threshold_mode, mode), patience in itertools.product(
        sequences, options, [1, 2, 4]
    ):
        kwargs = dict(threshold=threshold, cumulative=cumulative, threshold_mode=threshold_mode, mode=mode)
        ours = _identity_handler(patience, **kwargs)
        ignite_trainer = IgniteEngine(lambda e, b: None)
        theirs = IgniteEarlyStopping(patience, lambda score: score, ignite_trainer, **kwargs)
        for score in scores:
            ours(score)
            theirs(score)
            assert (ours.counter, ours.best_score, bool(ours.trainer.should_terminate)) == (
                theirs.counter,
                theirs.best_score,
                bool(ignite_trainer.should_terminate),
            ), (scores, kwargs, patience)


def test_invalid_arguments():
    trainer = _trainer()
    with pytest.raises(ValueError, match="patience should be positive integer.*got 0"):
        EarlyStopping(0, lambda e: 0.0, trainer)
    with pytest.raises(ValueError, match="got -2"):
        EarlyStopping(-2, lambda e: 0.0, trainer)
    with pytest.raises(TypeError, match="patience"):
        EarlyStopping(1.5, lambda e: 0.0, trainer)
    with pytest.raises(ValueError, match="threshold should not be a negative number.*-0.1"):
        EarlyStopping(2, lambda e: 0.0, trainer, threshold=-0.1)
    with pytest.raises(ValueError, match="threshold_mode should be either 'abs' or 'rel'. Got 'relative'"):
        EarlyStopping(2, lambda e: 0.0, trainer, threshold_mode="relative")
    with pytest.raises(ValueError, match="mode should be either 'min' or 'max'. Got 'lower'"):
        EarlyStopping(2, lambda e: 0.0, trainer, mode="lower")
    with pytest.raises(TypeError, match="score_function should be a function"):
        EarlyStopping(2, "accuracy", trainer)
    with pytest.raises(TypeError, match="trainer should be an instance of Engine.*str"):
        EarlyStopping(2, lambda e: 0.0, "trainer")
    handler = EarlyStopping(2, lambda e: 0.0, trainer)
    with pytest.raises(ValueError, match="Required state attribute 'best_score' is absent"):
        handler.load_state_dict({"counter": 1})
    with pytest.raises(TypeError, match="should be a dictionary"):
        handler.load_state_dict([1, 2])
    with pytest.raises(ValueError, match="counter"):
        handler.load_state_dict({"counter": -1, "best_score": 0.0})


def test_loads_an_ignite_state_dict():
    handler = _identity_handler(3)
    handler.load_state_dict({"counter": 2, "best_score": 0.5, "threshold_mode": "abs"})
    assert _feed(handler, [0.4]) == [(3, 0.5, True)]


def test_mode_min_and_a_relative_threshold():
    # a loss: lower is better; an improvement must beat the best by 10 % of it
    handler = _identity_handler(10, mode="min", threshold=0.1, threshold_mode="rel", cumulative=True)
    assert _feed(handler, [1.0, 0.95, 0.89, 0.85, 0.7]) == [
        (0, 1.0, False),
        (1, 1.0, False),
        (0, 0.89, False),
        (1, 0.89, False),
        (0, 0.7, False),
    ]


def test_ignites_deprecated_names_still_work_with_its_warning():
    with pytest.warns(DeprecationWarning) as caught:
        handler = _identity_handler(10, min_delta=0.1, cumulative_delta=True, min_delta_mode="abs")
    assert [str(w.message).split(" is deprecated")[0] for w in caught] == [
        "min_delta",
        "min_delta_mode",
        "cumulative_delta",
    ]
    assert "Please use 'threshold' instead" in str(caught[0].message)
    assert (handler.threshold, handler.cumulative, handler.threshold_mode) == (0.1, True, "abs")
    with pytest.warns(DeprecationWarning, match="cumulative_delta is deprecated"):
        assert handler.cumulative_delta is True
    with pytest.warns(DeprecationWarning, match="min_delta is deprecated"):
        handler.min_delta = 0.2
    assert handler.threshold == 0.2


@pytest.mark.parametrize("with_reset_engine", [False, True])
def test_attach_checks_on_the_evaluator_and_resets_on_the_trainer_as_ignite_does(with_reset_engine):
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import EarlyStopping as IgniteEarlyStopping

    def trace(engine_class, events, handler_class):
        scores = iter([0.5, 0.4, 0.3, 0.6, 0.2, 0.1, 0.05])
        trainer, evaluator = engine_class(lambda e, b: None), engine_class(lambda e, b: None)
        handler = handler_class(2, lambda e: next(scores), trainer)
        handler.attach(evaluator, reset_engine=trainer if with_reset_engine else None)
        seen = []
        trainer.add_event_handler(events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
        trainer.add_event_handler(events.EPOCH_COMPLETED, lambda e: seen.append((e.state.epoch, handler.counter)))
        trainer.run([0], max_epochs=3)
        trainer.run([0], max_epochs=4)  # a new run (the last one finished): resets when attached to the trainer
        return seen

    assert trace(Engine, Events, EarlyStopping) == trace(IgniteEngine, IgniteEvents, IgniteEarlyStopping)


def test_a_nan_score_counts_as_ignite_counts_it():
    """Ignite asks `score <= bar` for "no improvement", so a NaN score (and any score after a NaN best) improves;
    the shared `ScorePatience` keeps that for this face (the Trainer's callback keeps Lightning's answer)."""
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.handlers import EarlyStopping as IgniteEarlyStopping

    nan = float("nan")
    for mode, cumulative in itertools.product(["max", "min"], [False, True]):
        scores = [0.5, 0.4, nan, 0.3, 0.3, nan, nan, 0.9, 0.1]
        ours = _identity_handler(3, mode=mode, cumulative=cumulative)
        ignite_trainer = IgniteEngine(lambda e, b: None)
        theirs = IgniteEarlyStopping(3, lambda score: score, ignite_trainer, mode=mode, cumulative=cumulative)
        for score in scores:
            ours(score)
            theirs(score)
            assert (ours.counter, repr(ours.best_score)) == (theirs.counter, repr(theirs.best_score)), (mode, score)
