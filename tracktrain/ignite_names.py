"""Ignite 0.5.5's public names that tracktrain does not offer at Ignite's module paths, each with what to use.

Reading one of these from its tracktrain path fails with the reason and the alternative (an ImportError for
`from tracktrain.metrics import ROC_AUC`, an AttributeError for `tracktrain.metrics.ROC_AUC`); every other public name
of those Ignite modules is ours with Ignite's meaning. `tests/test_ignite_names.py` walks Ignite's names and fails
when one is neither. Plain data: this module imports nothing (each package's `__init__` reads its table).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["NOT_OFFERED", "TRACKER_MODULES", "refusal", "tracker_refusal"]

_TRACKERS = (
    "tracktrain's trackers are TensorBoard, MLflow and W&B: use TensorboardLogger, MLflowLogger or WandBLogger "
    "(tracktrain.handlers), which deliver from the background and keep what an outage holds back"
)
_STATE_SCHEDULERS = (
    "use a ParamScheduler for an optimizer's parameter, or set engine.state.<name> yourself in an ITERATION_STARTED "
    "or EPOCH_STARTED handler"
)


def _torchmetrics(what: str) -> str:
    return (
        f"compute it with TorchMetrics' {what}: update it in an ITERATION_COMPLETED handler and put its compute() in "
        "engine.state.metrics at EPOCH_COMPLETED (the Trainer takes TorchMetrics metrics in self.log directly)"
    )


# package -> {Ignite's name: what to use}
NOT_OFFERED: dict[str, dict[str, str]] = {
    "tracktrain.handlers": {
        "ClearMLLogger": _TRACKERS,
        "NeptuneLogger": _TRACKERS,
        "PolyaxonLogger": _TRACKERS,
        "VisdomLogger": _TRACKERS,
        "FBResearchLogger": "log with setup_logger (tracktrain.utils) in an ITERATION_COMPLETED handler, or show "
        "values with ProgressBar",
        "EMAHandler": "the Trainer's tracktrain.callbacks.EMA, or torch.optim.swa_utils.AveragedModel updated in an "
        "ITERATION_COMPLETED handler",
        **dict.fromkeys(
            (
                "StateParamScheduler",
                "LambdaStateScheduler",
                "PiecewiseLinearStateScheduler",
                "ExpStateScheduler",
                "StepStateScheduler",
                "MultiStepStateScheduler",
            ),
            _STATE_SCHEDULERS,
        ),
    },
    "tracktrain.metrics": {
        "MetricGroup": "attach each metric under its own name (metric.attach(engine, name))",
        "MeanPairwiseDistance": _torchmetrics(
            "torchmetrics.regression.PairwiseEuclideanDistance (or "
            "torch.nn.functional.pairwise_distance averaged with Average)"
        ),
        "MatthewsCorrCoef": _torchmetrics("torchmetrics.classification.MatthewsCorrCoef"),
        "CosineSimilarity": _torchmetrics("torchmetrics.regression.CosineSimilarity"),
        "ClassificationReport": "attach Precision, Recall and Fbeta with average=False (per class)",
        "Entropy": _torchmetrics("torchmetrics.classification (or Average of the batch's entropy)"),
        "EpochMetric": "keep the epoch's outputs with EpochOutputStore and compute the value at EPOCH_COMPLETED",
        "FID": _torchmetrics("torchmetrics.image.fid.FrechetInceptionDistance"),
        "InceptionScore": _torchmetrics("torchmetrics.image.inception.InceptionScore"),
        "GeometricAverage": "Average of the outputs' logarithm, exponentiated (MetricsLambda(math.exp, Average(...)))",
        "VariableAccumulation": "Average, or a Metric subclass of your own (reset/update/compute)",
        "JSDivergence": _torchmetrics("torchmetrics.regression.JensenShannonDivergence"),
        "KLDivergence": _torchmetrics("torchmetrics.regression.KLDivergence"),
        "HSIC": "a Metric subclass of your own (reset/update/compute): tracktrain has no HSIC",
        "MaximumMeanDiscrepancy": "a Metric subclass of your own (reset/update/compute): tracktrain has no MMD",
        "MultiLabelConfusionMatrix": _torchmetrics("torchmetrics.classification.MultilabelConfusionMatrix"),
        "MutualInformation": _torchmetrics("torchmetrics.clustering.MutualInfoScore"),
        "Frequency": "a Timer (tracktrain.handlers) and a count of what the step processed, or the Trainer's "
        "Timing callback (throughput)",
        "Bleu": _torchmetrics("torchmetrics.text.BLEUScore"),
        "CharacterErrorRate": _torchmetrics("torchmetrics.text.CharErrorRate"),
        "Rouge": _torchmetrics("torchmetrics.text.ROUGEScore"),
        "RougeN": _torchmetrics("torchmetrics.text.ROUGEScore"),
        "RougeL": _torchmetrics("torchmetrics.text.ROUGEScore"),
        "Perplexity": _torchmetrics("torchmetrics.text.Perplexity"),
        "AveragePrecision": _torchmetrics("torchmetrics.classification.AveragePrecision"),
        "CohenKappa": _torchmetrics("torchmetrics.classification.CohenKappa"),
        "PrecisionRecallCurve": _torchmetrics("torchmetrics.classification.PrecisionRecallCurve"),
        "RocCurve": _torchmetrics("torchmetrics.classification.ROC"),
        "ROC_AUC": _torchmetrics("torchmetrics.classification.AUROC"),
        "MeanAveragePrecision": _torchmetrics("torchmetrics.detection.MeanAveragePrecision"),
        "ObjectDetectionAvgPrecisionRecall": _torchmetrics("torchmetrics.detection.MeanAveragePrecision"),
        "CommonObjectDetectionMetrics": _torchmetrics("torchmetrics.detection.MeanAveragePrecision"),
        "coco_tensor_list_to_dict_list": "TorchMetrics' MeanAveragePrecision takes lists of dicts as they are",
        "HitRate": _torchmetrics("torchmetrics.retrieval.RetrievalHitRate"),
        "NDCG": _torchmetrics("torchmetrics.retrieval.RetrievalNormalizedDCG"),
    },
    "tracktrain.distributed": {
        "all_gather_tensors_with_shapes": "all_gather of tensors padded to one shape (or all_gather of objects: "
        "all_gather(tensor.tolist()))",
        "registered_computation_models": "tracktrain runs on torch.distributed's native backends only: backend() "
        "and model_name() say which is running",
    },
}
NOT_OFFERED["tracktrain.contrib.handlers"] = {
    name: NOT_OFFERED["tracktrain.handlers"][name]
    for name in ("ClearMLLogger", "NeptuneLogger", "PolyaxonLogger", "VisdomLogger")
}


# Ignite's modules of the trackers tracktrain does not log to: their tracktrain paths exist, and refuse every name
TRACKER_MODULES = {
    "tracktrain.handlers.visdom_logger": "Visdom",
    "tracktrain.handlers.neptune_logger": "Neptune",
    "tracktrain.handlers.clearml_logger": "ClearML",
    "tracktrain.handlers.polyaxon_logger": "Polyaxon",
}


def tracker_refusal(module: str) -> Callable[[str], str | None]:
    """For one of `TRACKER_MODULES`: the message refusing any of its public names, naming the loggers to use."""

    def message(name: str) -> str | None:
        if name.startswith("_"):
            return None
        return (
            f"{module} has no {name}: tracktrain does not offer Ignite's {TRACKER_MODULES[module]} logger; {_TRACKERS}."
        )

    return message


def refusal(package: str, ignite_package: str) -> dict[str, str]:
    """`package`'s refusals as the messages its `__getattr__` raises: what is not here, Ignite's name, what to use."""
    return {
        name: f"{package} has no {name} (Ignite's {ignite_package}.{name}): {instead}."
        for name, instead in NOT_OFFERED.get(package, {}).items()
    }
