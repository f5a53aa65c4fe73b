"""Loss, Average, MeanSquaredError and MeanAbsoluteError against direct computations over several batches."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from tracktrain.engine import Engine, Events
from tracktrain.metrics import Average, Loss, MeanAbsoluteError, MeanSquaredError
from tracktrain.metrics.metric import NotComputableError

sklearn_metrics = pytest.importorskip("sklearn.metrics")

BATCH_SIZES = (16, 5, 32, 1)


def generator() -> torch.Generator:
    return torch.Generator().manual_seed(99)


# ---------------------------------------------------------------------------------------------------------- Loss
def test_loss_is_the_mean_over_all_samples_whatever_the_batch_sizes():
    g = generator()
    batches = [(torch.randn(n, 5, generator=g), torch.randint(0, 5, (n,), generator=g)) for n in BATCH_SIZES]
    loss = Loss(F.cross_entropy)
    for batch in batches:
        loss.update(batch)
    value = loss.compute()
    assert type(value) is float
    expected = F.cross_entropy(torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    assert value == pytest.approx(expected.item(), rel=1e-6)


def test_loss_passes_the_third_element_as_keyword_arguments():
    def scaled_mse(y_pred, y, scale=1.0):
        return F.mse_loss(y_pred, y) * scale

    loss = Loss(scaled_mse)
    loss.update((torch.ones(4), torch.zeros(4), {"scale": 3.0}))
    loss.update((torch.ones(4), torch.zeros(4)))
    assert loss.compute() == pytest.approx(2.0)


def test_loss_reads_a_mapping_output_with_criterion_kwargs():
    engine = Engine(lambda e, b: {"y_pred": b, "y": torch.zeros_like(b), "criterion_kwargs": {}})
    Loss(F.l1_loss).attach(engine, "loss")
    assert engine.run([torch.full((2,), 2.0), torch.full((6,), 4.0)]).metrics["loss"] == pytest.approx(3.5)


def test_loss_batch_size_decides_the_weights():
    loss = Loss(F.l1_loss, batch_size=lambda y: 1)  # every batch weighs the same
    loss.update((torch.full((2,), 2.0), torch.zeros(2)))
    loss.update((torch.full((6,), 4.0), torch.zeros(6)))
    assert loss.compute() == pytest.approx(3.0)


def test_loss_output_transform_when_attached():
    engine = Engine(lambda e, b: (b, b + 1))
    Loss(F.l1_loss, output_transform=lambda out: (out[1], out[0])).attach(engine, "loss")
    assert engine.run([torch.zeros(3)]).metrics["loss"] == 1.0


def test_loss_fn_must_return_the_average():
    loss = Loss(lambda y_pred, y: (y_pred - y).abs())
    with pytest.raises(ValueError, match=r"loss_fn returned a tensor of shape \(3,\).*reduction='mean'"):
        loss.update((torch.zeros(3), torch.ones(3)))


@pytest.mark.parametrize(
    ("output", "error", "message"),
    [
        (torch.zeros(3), TypeError, r"expects \(y_pred, y\) or \(y_pred, y, kwargs\), got Tensor"),
        ((torch.zeros(3),), TypeError, r"got tuple of length 1"),
        ((torch.zeros(3), torch.zeros(3), 2.0), TypeError, "third element must be a dict of loss_fn kwargs, got 2.0"),
    ],
)
def test_loss_output_errors(output, error, message):
    with pytest.raises(error, match=message):
        Loss(F.l1_loss).update(output)


def test_loss_arguments_are_checked():
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        Loss("mse")
    with pytest.raises(TypeError, match="batch_size must be callable"):
        Loss(F.l1_loss, batch_size=8)


# ------------------------------------------------------------------------------------------------------ MSE, MAE
@pytest.mark.parametrize(
    ("metric_cls", "reference"),
    [(MeanSquaredError, "mean_squared_error"), (MeanAbsoluteError, "mean_absolute_error")],
)
@pytest.mark.parametrize("y_pred_shape", ["(N,)", "(N, 1)"])
def test_regression_matches_sklearn(metric_cls, reference, y_pred_shape):
    g = generator()
    batches = []
    for n in BATCH_SIZES:
        y_pred, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
        batches.append((y_pred.unsqueeze(1) if y_pred_shape == "(N, 1)" else y_pred, y))
    metric = metric_cls()
    for batch in batches:
        metric.update(batch)
    y_pred = torch.cat([b[0].reshape(-1) for b in batches]).numpy()
    y = torch.cat([b[1] for b in batches]).numpy()
    value = metric.compute()
    assert type(value) is float
    assert value == pytest.approx(getattr(sklearn_metrics, reference)(y, y_pred), rel=1e-6)


def test_regression_on_several_outputs_sums_them_per_sample_as_ignite():
    y_pred = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = torch.zeros(2, 2)
    mse, mae = MeanSquaredError(), MeanAbsoluteError()
    mse.update((y_pred, y))
    mae.update((y_pred, y))
    assert mse.compute() == (1 + 4 + 9 + 16) / 2
    assert mae.compute() == (1 + 2 + 3 + 4) / 2


@pytest.mark.parametrize("metric_cls", [MeanSquaredError, MeanAbsoluteError])
@pytest.mark.parametrize(("y_pred_shape", "y_shape"), [((4,), (5,)), ((4, 2), (4,)), ((2, 3), (3, 2)), ((), ())])
def test_regression_shapes_are_checked(metric_cls, y_pred_shape, y_shape):
    message = re.escape(f"{metric_cls.__name__} got y_pred of shape {y_pred_shape} and y of shape {y_shape}: expected")
    with pytest.raises(ValueError, match=message):
        metric_cls().update((torch.zeros(y_pred_shape), torch.zeros(y_shape)))


@pytest.mark.parametrize("metric_cls", [MeanSquaredError, MeanAbsoluteError, Loss, Average])
def test_compute_before_update(metric_cls):
    metric = metric_cls(F.l1_loss) if metric_cls is Loss else metric_cls()
    with pytest.raises(NotComputableError, match=f"{metric_cls.__name__} must have at least one example"):
        metric.compute()


def test_mse_is_per_epoch_on_an_engine():
    engine = Engine(lambda e, b: (b * e.state.epoch, torch.zeros_like(b)))
    MeanSquaredError().attach(engine, "mse")
    values = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: values.append(e.state.metrics["mse"]))
    engine.run([torch.ones(2), torch.ones(3)], max_epochs=3)
    assert values == [1.0, 4.0, 9.0]


# ------------------------------------------------------------------------------------------------------- Average
def test_average_of_numbers_and_scalar_tensors_is_a_float():
    average = Average()
    for value in (1.0, torch.tensor(2.0), 3, torch.tensor(6.0, dtype=torch.float64)):
        average.update(value)
    result = average.compute()
    assert type(result) is float and result == 3.0


def test_average_of_batches_weights_each_by_its_size():
    g = generator()
    batches = [torch.randn(n, 3, generator=g) for n in BATCH_SIZES]
    average = Average()
    for batch in batches:
        average.update(batch)
    result = average.compute()
    assert isinstance(result, torch.Tensor) and result.shape == (3,)
    torch.testing.assert_close(result, torch.cat(batches).double().mean(dim=0))


def test_average_counts_a_one_dimensional_tensor_as_one_sample_as_ignite():
    average = Average()
    average.update(torch.tensor([1.0, 2.0]))
    average.update(torch.tensor([3.0, 6.0]))
    torch.testing.assert_close(average.compute(), torch.tensor([2.0, 4.0], dtype=torch.float64))


def test_average_samples_must_keep_their_shape():
    average = Average()
    average.update(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"sample of shape \(2,\) after samples of shape \(3,\)"):
        average.update(torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"sample of shape \(\) after samples of shape \(3,\)"):
        average.update(1.0)


def test_average_takes_numbers_or_tensors_only():
    with pytest.raises(TypeError, match="expects a number or a tensor, got str"):
        Average().update("1.0")


def test_average_per_epoch_on_an_engine():
    engine = Engine(lambda e, b: b * e.state.epoch)
    Average().attach(engine, "avg")
    values = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: values.append(e.state.metrics["avg"]))
    engine.run([1.0, 2.0, 3.0], max_epochs=2)
    assert values == [2.0, 4.0]
