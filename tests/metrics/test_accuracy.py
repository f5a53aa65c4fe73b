"""Accuracy and TopKCategoricalAccuracy against direct computations over several batches, and their errors."""

from __future__ import annotations

import re

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.metrics import Accuracy, TopKCategoricalAccuracy
from tracktrain.metrics.metric import NotComputableError

sklearn_metrics = pytest.importorskip("sklearn.metrics")

BATCH_SIZES = (16, 5, 32, 1)


def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def accuracy_over(metric: Accuracy | TopKCategoricalAccuracy, batches: list[tuple[torch.Tensor, ...]]) -> float:
    metric.reset()
    for batch in batches:
        metric.update(batch)
    return metric.compute()


# ------------------------------------------------------------------------------------------------ against sklearn
def test_multiclass_is_the_fraction_of_argmax_hits():
    g = generator()
    batches = [(torch.randn(n, 4, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in BATCH_SIZES]
    y_pred = torch.cat([b[0] for b in batches]).argmax(dim=1)
    y = torch.cat([b[1] for b in batches])
    value = accuracy_over(Accuracy(), batches)
    assert type(value) is float
    assert value == pytest.approx(sklearn_metrics.accuracy_score(y.numpy(), y_pred.numpy()))


def test_multiclass_with_extra_dimensions_counts_every_position():
    g = generator()
    batches = [(torch.randn(n, 3, 5, 2, generator=g), torch.randint(0, 3, (n, 5, 2), generator=g)) for n in (4, 7)]
    hits = sum(int((b[0].argmax(dim=1) == b[1]).sum()) for b in batches)
    total = sum(b[1].numel() for b in batches)
    assert accuracy_over(Accuracy(), batches) == pytest.approx(hits / total)


@pytest.mark.parametrize("y_pred_shape", ["(N,)", "(N, 1)"])
def test_binary_matches_sklearn(y_pred_shape):
    g = generator()
    batches = []
    for n in BATCH_SIZES:
        y_pred, y = torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)
        batches.append((y_pred.unsqueeze(1) if y_pred_shape == "(N, 1)" else y_pred, y))
    y_pred = torch.cat([b[0].reshape(-1) for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert accuracy_over(Accuracy(), batches) == pytest.approx(sklearn_metrics.accuracy_score(y, y_pred))


def test_binary_accepts_float_and_bool_zero_one():
    y_pred = torch.tensor([1.0, 0.0, 1.0, 1.0])
    y = torch.tensor([True, False, False, True])
    assert accuracy_over(Accuracy(), [(y_pred, y)]) == 0.75


def test_multilabel_is_subset_accuracy():
    g = generator()
    batches = [
        (torch.randint(0, 2, (n, 3), generator=g), torch.randint(0, 2, (n, 3), generator=g)) for n in BATCH_SIZES
    ]
    y_pred = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    value = accuracy_over(Accuracy(is_multilabel=True), batches)
    assert value == pytest.approx(sklearn_metrics.accuracy_score(y.numpy(), y_pred.numpy()))


def test_multilabel_with_extra_dimensions_counts_every_position():
    g = generator()
    batches = [
        (torch.randint(0, 2, (n, 3, 4), generator=g), torch.randint(0, 2, (n, 3, 4), generator=g)) for n in (5, 6)
    ]
    hits = sum(int((b[0] == b[1]).all(dim=1).sum()) for b in batches)
    assert accuracy_over(Accuracy(is_multilabel=True), batches) == pytest.approx(hits / ((5 + 6) * 4))


def test_top_k_is_the_fraction_of_targets_among_the_k_best_scores():
    g = generator()
    batches = [(torch.randn(n, 10, generator=g), torch.randint(0, 10, (n,), generator=g)) for n in BATCH_SIZES]
    y_score = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    for k in (1, 3, 9):
        value = accuracy_over(TopKCategoricalAccuracy(k=k), batches)
        expected = sklearn_metrics.top_k_accuracy_score(y.numpy(), y_score.numpy(), k=k, labels=list(range(10)))
        assert value == pytest.approx(expected)
    assert accuracy_over(TopKCategoricalAccuracy(k=1), batches) == accuracy_over(Accuracy(), batches)


def test_top_k_accepts_targets_of_shape_n_by_1():
    y_pred = torch.tensor([[0.1, 0.5, 0.4], [0.8, 0.15, 0.05]])
    assert accuracy_over(TopKCategoricalAccuracy(k=2), [(y_pred, torch.tensor([[2], [2]]))]) == 0.5


def test_reset_starts_over_and_the_kind_may_change_after_it():
    accuracy = Accuracy()
    accuracy.update((torch.tensor([1, 0]), torch.tensor([1, 0])))
    assert accuracy.compute() == 1.0
    accuracy.reset()
    accuracy.update((torch.tensor([[0.1, 0.9]]), torch.tensor([0])))
    assert accuracy.compute() == 0.0


def test_per_epoch_values_on_an_engine():
    g = generator()
    batches = [(torch.randn(8, 3, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(3)]
    # epoch 2 flips the targets' classes, so its accuracy differs from epoch 1's
    engine = Engine(lambda e, b: (b[0], (b[1] + e.state.epoch - 1) % 3))
    Accuracy().attach(engine, "acc")
    values = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: values.append(e.state.metrics["acc"]))
    engine.run(batches, max_epochs=2)
    for epoch, value in enumerate(values):
        y_pred = torch.cat([b[0] for b in batches]).argmax(dim=1)
        y = (torch.cat([b[1] for b in batches]) + epoch) % 3
        assert value == pytest.approx((y_pred == y).float().mean().item())
    assert values[0] != values[1]


# -------------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("metric_cls", [Accuracy, TopKCategoricalAccuracy])
def test_compute_before_update(metric_cls):
    with pytest.raises(NotComputableError, match=f"{metric_cls.__name__} must have at least one example"):
        metric_cls().compute()


@pytest.mark.parametrize(
    ("y_pred_shape", "y_shape", "message"),
    [
        ((8, 3), (8, 2), r"y_pred of shape \(8, 3\) and y of shape \(8, 2\).*same shape"),
        ((8, 3), (7,), r"y_pred of shape \(8, 3\) and y of shape \(7,\).*\(N, \.\.\.\) = \(8,\)"),
        ((8, 3, 5), (8, 4), r"\(8, 3, 5\).*\(8, 4\).*\(N, \.\.\.\) = \(8, 5\)"),
        ((8,), (8, 1, 1), r"y_pred of shape \(8,\) and y of shape \(8, 1, 1\): expected y_pred \(N, C, \.\.\.\)"),
        ((), (), r"y_pred of shape \(\) and y of shape \(\)"),
    ],
)
def test_shapes_that_fit_no_kind_are_named(y_pred_shape, y_shape, message):
    with pytest.raises(ValueError, match=message):
        Accuracy().update((torch.zeros(y_pred_shape), torch.zeros(y_shape, dtype=torch.long)))


@pytest.mark.parametrize(("y_pred_shape", "y_shape"), [((8, 3), (8,)), ((8,), (8,)), ((8, 1), (8, 1))])
def test_multilabel_needs_same_shapes_with_several_labels(y_pred_shape, y_shape):
    message = r"must have same shape of \(batch_size, num_categories, \.\.\.\) and num_categories > 1.*is_multilabel=True\) got y_pred of shape"
    with pytest.raises(ValueError, match=message):
        Accuracy(is_multilabel=True).update((torch.zeros(y_pred_shape), torch.zeros(y_shape, dtype=torch.long)))


def test_a_change_of_kind_is_an_error():
    accuracy = Accuracy()
    accuracy.update((torch.tensor([1, 0]), torch.tensor([1, 1])))
    with pytest.raises(
        RuntimeError,
        match=r"Input data type has changed from binary to multiclass\. Accuracy got y_pred of shape \(2, 3\)",
    ):
        accuracy.update((torch.randn(2, 3), torch.tensor([0, 2])))


def test_a_change_of_the_number_of_classes_is_an_error():
    accuracy = Accuracy()
    accuracy.update((torch.randn(2, 3), torch.tensor([0, 2])))
    with pytest.raises(ValueError, match="Input data number of classes has changed from 3 to 4"):
        accuracy.update((torch.randn(2, 4), torch.tensor([0, 2])))


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (torch.zeros(3), r"expects \(y_pred, y\), got Tensor"),
        ((torch.zeros(3),), r"expects \(y_pred, y\), got tuple of length 1"),
        (([1, 0], torch.zeros(2)), "expects y_pred and y as tensors, got list and Tensor"),
    ],
)
def test_outputs_that_are_not_two_tensors(output, message):
    with pytest.raises(TypeError, match=message):
        Accuracy().update(output)


def test_binary_values_other_than_zero_and_one_fail_compute():
    accuracy = Accuracy()
    accuracy.update((torch.tensor([0.2, 0.9, 1.0]), torch.tensor([0, 1, 1])))  # probabilities, not thresholded
    accuracy.update((torch.tensor([1, 0]), torch.tensor([1, 2])))
    accuracy.update((torch.tensor([0.7, 1.0]), torch.tensor([1, 1])))
    with pytest.raises(
        ValueError,
        match=r"For binary cases, y_pred must be comprised of 0's and 1's\. Accuracy got binary inputs whose y_pred held other values in 2 update",
    ):
        accuracy.compute()
    accuracy.reset()
    accuracy.update((torch.tensor([1, 0]), torch.tensor([1, 2])))
    with pytest.raises(ValueError, match=r"whose y held other values in 1 update.*threshold"):
        accuracy.compute()
    accuracy.reset()
    accuracy.update((torch.tensor([1, 0]), torch.tensor([1, 1])))
    assert accuracy.compute() == 0.5


def test_multilabel_values_other_than_zero_and_one_fail_compute():
    accuracy = Accuracy(is_multilabel=True)
    accuracy.update((torch.tensor([[0.3, 0.8]]), torch.tensor([[0, 1]])))
    with pytest.raises(ValueError, match="multilabel inputs whose y_pred held other values"):
        accuracy.compute()


@pytest.mark.parametrize(
    ("y_pred_shape", "y_shape"), [((8,), (8,)), ((8, 5, 2), (8, 5)), ((8, 5), (7,)), ((8, 5), (8, 2))]
)
def test_top_k_shapes_are_checked(y_pred_shape, y_shape):
    shapes = re.escape(f"y_pred of shape {y_pred_shape} and y of shape {y_shape}")
    with pytest.raises(ValueError, match=rf"{shapes}: expected y_pred \(N, C\)"):
        TopKCategoricalAccuracy(k=1).update((torch.zeros(y_pred_shape), torch.zeros(y_shape, dtype=torch.long)))


def test_top_k_needs_k_classes():
    with pytest.raises(ValueError, match=r"k=5\) got y_pred of shape \(4, 3\) with only 3 classes"):
        TopKCategoricalAccuracy(k=5).update((torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)))


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_top_k_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match=f"k must be a positive integer, got {k!r}"):
        TopKCategoricalAccuracy(k=k)
