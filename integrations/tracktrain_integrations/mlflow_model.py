"""After a fit: the best checkpoint's model logged to the fit's own MLflow run as an MLflow model (the pytorch flavour,
with a signature and an input example), so it can be registered from the UI, served (`mlflow models serve`) and
loaded with `mlflow.pytorch.load_model("runs:/<run_id>/model")` or as a pyfunc.

    trainer = Trainer(loggers=[MLflowLogger(...)], callbacks=[ModelCheckpoint(monitor="val_acc", mode="max")])
    trainer.fit(module, train_loader, val_loader)
    info = log_model(trainer, module, features[:8], registered_model_name="classifier")

`MLflowLogger(log_model=True)` keeps the module as it ends the fit, with no signature; this is the step after it, for
the checkpoint the run chose. Needs MLflow: `pip install 'tracktrain[mlflow]'`.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.export import detached_copy, export_module, module_from_checkpoint
from tracktrain.export.onnx import export_onnx  # imports onnx and onnxruntime only when it is called
from tracktrain_integrations.mlflow import MLflowLogger

if TYPE_CHECKING:
    from mlflow.models.model import ModelInfo

    from tracktrain import Trainer

__all__ = ["EXPORT_ARTIFACTS", "log_model"]

EXPORT_ARTIFACTS = "export"
"""Where `log_model(..., export=True)` puts the `torch.export` program (`model.pt2`), and `onnx=True` the ONNX file
(`model.onnx`), in the run's artifacts."""


def log_model(
    source: Trainer | MLflowLogger,
    module: nn.Module,
    input_example: torch.Tensor,
    *,
    registered_model_name: str | None = None,
    checkpoint: str | os.PathLike | None = "best",
    submodule: str | None = None,
    name: str = "model",
    export: bool = False,
    onnx: bool = False,
) -> ModelInfo:
    """Log `module` (with a checkpoint's weights) to the MLflow run of `source` as an MLflow pytorch model.

    Args:
        source: the Trainer after `fit` (its one `MLflowLogger` names the run and the tracking URI, its
            `ModelCheckpoint` the best checkpoint), or that `MLflowLogger`.
        module: the module as built (a `LoopModule` too: its Trainer stays out of the saved model, which is a copy
            moved to the CPU and in eval mode; `module` itself is not changed).
        input_example: one batch of inputs (a tensor): saved with the model as its input example, and run through
            it to infer the signature (inputs and outputs, with their dtypes and shapes; the batch dimension free).
        registered_model_name: also register the logged model as a new version of this registered model (created
            when missing). Needs a store with a model registry (a database: sqlite, or a tracking server).
        checkpoint: "best": the `best_model_path` of the Trainer's `ModelCheckpoint` (the latest one without
            `monitor`); "last": its `last_model_path`; a path (a `.pt` file or a sharded `.dcp` directory); None: the
            module as it is.
        submodule: log this attribute of the module (dotted, e.g. "net") after the checkpoint is loaded: for a
            `LoopModule` that has no `forward` of its own, whose steps call a network.
        name: the model's name in the run (`runs:/<run_id>/<name>`).
        export: also export the model with `torch.export` (`tracktrain.export.export_module`) and log the program
            as `export/model.pt2` in the run's artifacts (`torch.export.load` reads it without the module's class).
        onnx: also export the model to ONNX (`tracktrain.export.onnx.export_onnx`, checked by onnxruntime) and log
            the file as `export/model.onnx` (with `model.onnx.data` beside it for weights over 2 GB); onnxruntime
            runs it without torch. Needs the ONNX extra: `pip install 'tracktrain[onnx]'`.

    Returns MLflow's `ModelInfo` (`model_uri`, `registered_model_version`, ...).

    The model is pickled (MLflow's "pickle" format): loading it needs the module's class importable, as
    `torch.save(module)` does; load only models you trust.
    """
    import mlflow
    import mlflow.pytorch
    from mlflow.models import infer_signature

    logger = _mlflow_logger(source)
    run_id, tracking_uri = logger.run_id, logger.tracking_uri
    if run_id is None or tracking_uri is None:
        raise RuntimeError(
            "log_model: the MLflowLogger has no MLflow run yet (run_id is None: it was never started, or its "
            f"tracking server {tracking_uri} did not answer). Call it after trainer.fit(...) with that logger; "
            "a run kept in a spill file exists once `python -m tracktrain.loggers.replay FILE` has sent it."
        )
    if not isinstance(input_example, torch.Tensor):
        raise TypeError(
            f"log_model(input_example=...) must be a tensor (one batch of the model's input), got "
            f"{type(input_example).__name__}."
        )
    path = _checkpoint_path(source, checkpoint)
    model = module_from_checkpoint(module, path) if path is not None else detached_copy(module)
    if submodule is not None:
        model = model.get_submodule(submodule)
    model = model.cpu().eval()
    example = input_example.detach().cpu()
    with torch.no_grad():
        output = model(example)
    if not isinstance(output, torch.Tensor):
        raise TypeError(
            f"log_model: {type(model).__name__} returns {type(output).__name__}, and MLflow's pytorch flavour serves "
            "one tensor. Log a submodule that returns one (submodule=NAME), or wrap the module in one that does."
        )
    signature = infer_signature(example.numpy(), output.numpy())

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(tracking_uri)  # MLflow's log_model talks to the global URI: the logger's, for this call
    try:
        client = mlflow.MlflowClient(tracking_uri)
        run = client.get_run(run_id)
        # the logged model made in the run's experiment, linked to the run: without an active run, log_model would
        # make it in the default experiment, where `runs:/<run_id>/<name>` does not find it. The run is not
        # reopened (mlflow.start_run would mark it RUNNING, then FINISHED with a new end time)
        logged = mlflow.initialize_logged_model(
            name=name,
            source_run_id=run_id,
            experiment_id=run.info.experiment_id,
            params=dict(run.data.params),
            tags={"tracktrain.checkpoint": os.fspath(path) if path is not None else "module as given"},
        )
        info = mlflow.pytorch.log_model(
            model,
            name=name,
            run_id=run_id,
            model_id=logged.model_id,
            signature=signature,
            input_example=example.numpy(),
            registered_model_name=registered_model_name,
            serialization_format="pickle",
            # the flavour's own requirements: inferring them loads the model again in a subprocess (seconds)
            pip_requirements=mlflow.pytorch.get_default_pip_requirements(),
        )
        if export or onnx:
            _log_exports(client, run_id, model, example, export=export, onnx=onnx)
    finally:
        mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]  # None: back to MLflow's own default
    return info


def _log_exports(
    client: Any, run_id: str, model: nn.Module, example: torch.Tensor, *, export: bool, onnx: bool
) -> None:
    """The exports asked for, written to one folder and logged from it under EXPORT_ARTIFACTS: every file an export
    writes goes along (an ONNX file's external data too)."""
    with tempfile.TemporaryDirectory(prefix="tracktrain-export-") as directory:
        if export:
            export_module(model, example, os.path.join(directory, "model.pt2"))
        if onnx:
            export_onnx(model, example, os.path.join(directory, "model.onnx"))
        client.log_artifacts(run_id, directory, EXPORT_ARTIFACTS)


def _mlflow_logger(source: Any) -> MLflowLogger:
    if isinstance(source, MLflowLogger):
        return source
    loggers = [logger for logger in getattr(source, "loggers", ()) if isinstance(logger, MLflowLogger)]
    if len(loggers) != 1:
        raise ValueError(
            f"log_model needs the Trainer's MLflow run, and the Trainer has {len(loggers)} MLflowLogger(s) "
            f"(loggers: {[type(logger).__name__ for logger in getattr(source, 'loggers', ())]}). Fit with "
            "Trainer(loggers=[MLflowLogger(...)]), or pass the MLflowLogger whose run should hold the model."
        )
    return loggers[0]


def _checkpoint_path(source: Any, checkpoint: str | os.PathLike | None) -> str | os.PathLike | None:
    if checkpoint not in ("best", "last"):
        return checkpoint
    callbacks = [callback for callback in getattr(source, "callbacks", ()) if isinstance(callback, ModelCheckpoint)]
    if len(callbacks) > 1:  # several: the one that ranks by a metric chose "best"
        callbacks = [callback for callback in callbacks if callback.monitor is not None]
    if len(callbacks) != 1:
        raise ValueError(
            f"log_model(checkpoint={checkpoint!r}) takes the checkpoint from the Trainer's ModelCheckpoint, and "
            f"{type(source).__name__} has {len(callbacks)} to choose from. Pass the Trainer after a fit with one "
            "ModelCheckpoint, a checkpoint's path (checkpoint=callback.best_model_path), or checkpoint=None for the "
            "module as it is."
        )
    path = callbacks[0].best_model_path if checkpoint == "best" else callbacks[0].last_model_path
    if path is None:
        raise ValueError(
            f"log_model(checkpoint={checkpoint!r}): the Trainer's ModelCheckpoint holds no {checkpoint} checkpoint "
            "(none saved yet, or save_last=False for 'last'). Call it after a fit that saved one, or pass "
            "checkpoint=None for the module as it is."
        )
    return path
