"""Ignite's `MLflowLogger` over tracktrain's `MLflowLogger`, and the handlers Ignite's module offers."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain.handlers.base_logger import OptimizerParamsHandler, OutputHandler
from tracktrain.handlers.global_step import global_step_from_engine
from tracktrain_integrations.ignite_loggers.face import TrackerFace
from tracktrain_integrations.mlflow import MLflowLogger as QueuedMLflowLogger

__all__ = ["MLflowLogger", "OptimizerParamsHandler", "OutputHandler", "global_step_from_engine"]


class MLflowLogger(TrackerFace):
    """Ignite's MLflow logger: a run in the experiment MLFLOW_EXPERIMENT_NAME (MLflow's "Default" without it) at
    `tracking_uri` (MLflow's default without it: MLFLOW_TRACKING_URI, else `sqlite:///mlflow.db` here). Names are
    joined with spaces, as Ignite's; a name MLflow refuses is renamed with a warning (Ignite drops it).

    Ignite's logger hands any other attribute to the `mlflow` module (`mlflow_logger.log_params(...)`); this one
    offers the run's calls by name: `log_params`, `log_param`, `log_metrics`, `log_metric`, `set_tags`, `set_tag`,
    `log_artifact`, and `run_id`."""

    def __init__(self, tracking_uri: str | None = None) -> None:
        tracker = QueuedMLflowLogger(
            tracking_uri=tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None,
            experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default",
        )
        super().__init__(tracker)
        self._mlflow = tracker

    def key(self, parts: Sequence[str]) -> str:
        return " ".join(parts)

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id."""
        return self._mlflow.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._mlflow.log_hyperparams(params)

    def log_param(self, key: str, value: Any) -> None:
        self._mlflow.log_hyperparams({key: value})

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self.write_scalars(metrics, 0 if step is None else step)

    def log_metric(self, key: str, value: Any, step: int | None = None) -> None:
        self.write_scalars({key: value}, 0 if step is None else step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._mlflow.set_tags(tags)

    def set_tag(self, key: str, value: Any) -> None:
        self._mlflow.set_tags({key: value})

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self._mlflow.log_artifact(local_path, artifact_path)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"MLflowLogger has no {name!r}: Ignite's hands it to the mlflow module, tracktrain's sends the run's "
            "values through its delivery queue and offers log_params, log_param, log_metrics, log_metric, set_tags, "
            "set_tag, log_artifact and run_id; call mlflow itself for anything else."
        )
