"""ConfusionMatrix (with IoU, mIoU, Dice, cm*), Precision, Recall, Fbeta, PSNR and SSIM: the values of Ignite 0.5.5's
metrics on the same batches (binary, multiclass, multilabel and segmentation inputs), attached to engines or
updated by hand, Ignite's tensor-method arithmetic on metrics (`(p * r * 2 / (p + r)).mean()`), a checkpoint
of each, and what each refuses. Why these are written here rather than delegated to TorchMetrics: the numbers
are Ignite's (TorchMetrics' SSIM crops the border Ignite pads, its averages treat absent classes otherwise), the
core depends on torch alone, and `update()` never reads back to the host; TorchMetrics agrees where the
definitions do (PSNR per image, the confusion matrix, macro precision)."""

from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracktrain.engine
import tracktrain.metrics as ours
import tracktrain.metrics.confusion_matrix
from tracktrain.engine import Engine

ignite_metrics = pytest.importorskip("ignite.metrics")
import ignite.engine as ignite_engine  # noqa: E402

g = torch.Generator().manual_seed(3)
MULTICLASS = [(torch.randn(n, 4, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in (8, 5, 11)]
BINARY = [(torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)) for n in (8, 5, 11)]
MULTILABEL = [
    (torch.randint(0, 2, (n, 3, 2), generator=g), torch.randint(0, 2, (n, 3, 2), generator=g)) for n in (8, 5)
]
SEGMENTATION = [(torch.randn(2, 3, 6, 5, generator=g), torch.randint(0, 3, (2, 6, 5), generator=g)) for _ in range(3)]
SEGMENTATION[1][1][0, 0, :3] = 255  # an ignored label
IMAGES = [(torch.rand(3, 3, 24, 20, generator=g), torch.rand(3, 3, 24, 20, generator=g)) for _ in range(2)]
VOLUMES = [(torch.rand(2, 1, 12, 13, 14, generator=g), torch.rand(2, 1, 12, 13, 14, generator=g))]


def cases(lib):
    """name -> (metric of `lib`, batches)."""
    cm = lib.ConfusionMatrix(num_classes=3)
    samples_cm = lib.ConfusionMatrix(num_classes=3, average="samples")
    p, r = lib.Precision(average=False), lib.Recall(average=False)
    return {
        "cm": (cm, SEGMENTATION),
        "cm-recall": (lib.ConfusionMatrix(num_classes=4, average="recall"), MULTICLASS),
        "cm-precision": (lib.ConfusionMatrix(num_classes=4, average="precision"), MULTICLASS),
        "cm-samples": (samples_cm, SEGMENTATION),
        "iou": (lib.IoU(lib.ConfusionMatrix(num_classes=3)), SEGMENTATION),
        "iou-ignore": (lib.IoU(lib.ConfusionMatrix(num_classes=3), ignore_index=1), SEGMENTATION),
        "miou": (lib.mIoU(lib.ConfusionMatrix(num_classes=3), ignore_index=0), SEGMENTATION),
        "jaccard": (lib.JaccardIndex(lib.ConfusionMatrix(num_classes=3)), SEGMENTATION),
        "dice": (lib.DiceCoefficient(lib.ConfusionMatrix(num_classes=3), ignore_index=2), SEGMENTATION),
        "cm-accuracy": (lib.confusion_matrix.cmAccuracy(lib.ConfusionMatrix(num_classes=3)), SEGMENTATION),
        "cm-precision-mean": (lib.confusion_matrix.cmPrecision(lib.ConfusionMatrix(num_classes=3)), SEGMENTATION),
        "cm-recall-classes": (
            lib.confusion_matrix.cmRecall(lib.ConfusionMatrix(num_classes=3), average=False),
            SEGMENTATION,
        ),
        **{
            f"{cls.__name__.lower()}-{average}-{kind}": (cls(average=average, is_multilabel=kind == "multilabel"), data)
            for cls in (lib.Precision, lib.Recall)
            for kind, data in (("multiclass", MULTICLASS), ("binary", BINARY), ("multilabel", MULTILABEL))
            for average in (False, True, "micro", "weighted", "samples")
            if not (average == "samples" and kind != "multilabel")
        },
        "f1": (lib.Fbeta(1.0), MULTICLASS),
        "f2-classes": (lib.Fbeta(2.0, average=False), MULTICLASS),
        "f-half-given": (
            lib.Fbeta(0.5, precision=lib.Precision(average=False), recall=lib.Recall(average=False)),
            BINARY,
        ),
        "f1-by-arithmetic": ((p * r * 2 / (p + r)).mean(), MULTICLASS),
        "psnr": (lib.PSNR(data_range=1.0), IMAGES),
        "ssim": (lib.SSIM(data_range=1.0), IMAGES),
        "ssim-uniform": (lib.SSIM(data_range=1.0, kernel_size=(5, 7), gaussian=False), IMAGES),
        "ssim-3d": (lib.SSIM(data_range=1.0, kernel_size=5, sigma=1.0, ndims=3), VOLUMES),
    }


def plain(value):
    if isinstance(value, torch.Tensor):
        return value.double().reshape(-1).tolist()
    return [float(value)]


def on_an_engine(lib_engine, metric, batches):
    engine = lib_engine.Engine(lambda e, batch: batch)
    metric.attach(engine, "m")
    return engine.run(batches, max_epochs=1).metrics["m"]


NAMES = list(cases(ours))


@pytest.mark.parametrize("name", NAMES)
def test_the_value_ignite_computes(name):
    metric, batches = cases(ours)[name]
    their_metric, _ = cases(ignite_metrics)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Ignite's advice on the dtypes of binary inputs
        theirs = on_an_engine(ignite_engine, their_metric, batches)
    mine = on_an_engine(tracktrain.engine, metric, batches)
    assert type(mine) is type(theirs) or isinstance(mine, float) == isinstance(theirs, float)
    assert plain(mine) == pytest.approx(plain(theirs), rel=1e-6, abs=1e-9, nan_ok=True)


@pytest.mark.parametrize("name", ["cm", "precision-weighted-multiclass", "recall-samples-multilabel", "psnr", "ssim"])
def test_a_checkpoint_resumes_exactly(name):
    make = lambda: cases(ours)[name]  # noqa: E731
    whole, batches = make()
    for batch in batches:
        whole.update(batch)
    first, _ = make()
    first.update(batches[0])
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed, _ = make()
    resumed.load_state_dict(torch.load(buffer))
    for batch in batches[1:]:
        resumed.update(batch)
    assert plain(resumed.compute()) == pytest.approx(plain(whole.compute()))


def test_torchmetrics_agrees_where_the_definitions_do():
    torchmetrics = pytest.importorskip("torchmetrics")
    psnr = ours.PSNR(data_range=1.0)
    theirs = torchmetrics.image.PeakSignalNoiseRatio(data_range=1.0, dim=(1, 2, 3), reduction="elementwise_mean")
    cm = ours.ConfusionMatrix(num_classes=4)
    their_cm = torchmetrics.classification.MulticlassConfusionMatrix(num_classes=4)
    precision = ours.Precision(average=True)
    their_precision = torchmetrics.classification.MulticlassPrecision(num_classes=4, average="macro")
    for y_pred, y in IMAGES:
        psnr.update((y_pred, y))
        theirs.update(y_pred, y)
    for y_pred, y in MULTICLASS:
        cm.update((y_pred, y))
        their_cm.update(y_pred, y)
        precision.update((y_pred, y))
        their_precision.update(y_pred, y)
    assert psnr.compute() == pytest.approx(float(theirs.compute()), rel=1e-5)
    assert torch.equal(cm.compute(), their_cm.compute())
    assert precision.compute() == pytest.approx(float(their_precision.compute()), rel=1e-5)


def test_a_metric_takes_tensor_methods_by_name_only():
    cm = ours.ConfusionMatrix(num_classes=2)
    trace = cm.trace()
    cm.update((torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), torch.tensor([0, 1, 1])))
    assert trace.compute() == 2
    with pytest.raises(AttributeError):
        cm.fft  # noqa: B018 - not one of the tensor methods taken


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: ours.ConfusionMatrix(1), ValueError, "Argument num_classes needs to be > 1"),
        (lambda: ours.ConfusionMatrix(3, average="all"), ValueError, "Argument average can None or one of"),
        (lambda: ours.IoU("cm"), TypeError, "Argument cm should be instance of ConfusionMatrix"),
        (lambda: ours.IoU(ours.ConfusionMatrix(3, average="recall")), ValueError, "either None or 'samples'"),
        (
            lambda: ours.mIoU(ours.ConfusionMatrix(3), ignore_index=3),
            ValueError,
            r"in the range of \[0, 3\), but given 3",
        ),
        (lambda: ours.Precision(average="all"), ValueError, "Argument average should be None or a boolean"),
        (lambda: ours.Fbeta(0), ValueError, "Beta should be a positive integer, but given 0"),
        (lambda: ours.Fbeta(1, precision=ours.Precision(average=True)), ValueError, "should have average=False"),
        (
            lambda: ours.Fbeta(1, precision=ours.Precision(), output_transform=lambda x: x),
            ValueError,
            "output_transform should be None",
        ),
        (lambda: ours.PSNR(0), ValueError, "data_range must be a positive number"),
        (lambda: ours.SSIM(1.0, kernel_size=4), ValueError, "Expected kernel_size to have odd positive number"),
        (lambda: ours.SSIM(1.0, sigma=(1.0,)), ValueError, "Expected sigma to have length of 2"),
        (lambda: ours.SSIM(1.0, ndims=4), ValueError, "Expected ndims to be 2 or 3"),
    ],
)
def test_bad_arguments_are_refused_with_ignites_words(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_bad_inputs_are_refused():
    cm = ours.ConfusionMatrix(3)
    with pytest.raises(ValueError, match="y_pred does not have correct number of classes: 4 vs 3"):
        cm.update((torch.randn(2, 4), torch.tensor([0, 1])))
    with pytest.raises(ValueError, match="y must have shape of \\(batch_size, ...\\)"):
        cm.update((torch.randn(2, 3), torch.tensor([[0], [1]])))
    precision = ours.Precision()
    precision.update((torch.randn(3, 2), torch.tensor([0, 1, 5])))
    with pytest.raises(ValueError, match="y_pred contains fewer classes than y: Precision got 1 target"):
        precision.compute()
    with pytest.raises(ValueError, match="average='samples' is incompatible with binary and multiclass"):
        ours.Recall(average="samples").update(MULTICLASS[0])
    with pytest.raises(ValueError, match="Expected y_pred and y to have the same shape"):
        ours.PSNR(1.0).update((torch.rand(2, 3), torch.rand(2, 4)))
    with pytest.raises(TypeError, match="Expected y_pred and y to have the same data type"):
        ours.SSIM(1.0).update((torch.rand(1, 1, 12, 12), torch.rand(1, 1, 12, 12).double()))
    with pytest.raises(ours.NotComputableError, match="SSIM must have at least one example"):
        ours.SSIM(1.0).compute()


def test_update_reads_nothing_back_from_the_device():
    """The checks of update() run on the device: no .item() or .tolist() (a host sync on CUDA) until compute()."""
    import tracktrain.metrics.precision as precision_module

    calls = []
    original = torch.Tensor.tolist
    try:
        torch.Tensor.tolist = lambda self: calls.append("tolist") or original(self)  # type: ignore[method-assign]
        metric = precision_module.Precision(average="weighted")
        for batch in MULTICLASS:
            metric.update(batch)
        assert calls == []
        metric.compute()
        assert calls == ["tolist"]
    finally:
        torch.Tensor.tolist = original  # type: ignore[method-assign]


def test_attached_to_our_engine_confusion_matrix_counts_every_pixel_but_the_ignored():
    engine = Engine(lambda e, batch: batch)
    cm = ours.ConfusionMatrix(num_classes=3)
    cm.attach(engine, "cm")
    matrix = engine.run(SEGMENTATION, max_epochs=1).metrics["cm"]
    assert int(matrix.sum()) == 3 * 2 * 6 * 5 - 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is there")
def test_gpu_info_without_cuda_raises_the_runtime_error_ignites_examples_catch():
    """Ignite's examples wrap `GpuInfo().attach(trainer)` in `except RuntimeError` (no GPU): the same error here."""
    from tracktrain.metrics.gpu_info import GpuInfo

    with pytest.raises(RuntimeError, match="This contrib module requires available GPU"):
        GpuInfo()
