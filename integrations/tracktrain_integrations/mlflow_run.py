"""`MlflowRun`: one MLflow run as `MLflowLogger` talks to it, in the training process and in a sender child: the
client, creating the run once (or marking a resumed one RUNNING), `log_batch` with refused values dropped one by one,
uploads, the model registry and the run's end. Every request but an upload is bounded by `request_timeout`
(`tracktrain.loggers.one_call`)."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from tracktrain import storage
from tracktrain.loggers.base import CHECKPOINT_ARTIFACTS
from tracktrain.loggers.one_call import OneCallAtATime
from tracktrain.storage.redaction import split_credentials

__all__ = ["EXPERIMENT_TAGS", "MlflowRun", "refused", "save_pytorch_model"]

# Read by MLflow 3's UI to open the experiment as model training (runs, metric charts, params, artifacts) rather than
# in its GenAI view; older servers keep it as an ordinary tag.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}

_logger = logging.getLogger("tracktrain_integrations.mlflow")


class MlflowRun:
    """The run `run_id` (None until created) of `experiment_name` at `tracking_uri`; `run_key` tags it, so that a
    retried or replayed creation finds it rather than making a second one."""

    def __init__(
        self,
        tracking_uri: str | None,
        experiment_name: str,
        run_name: str,
        tags: Mapping[str, str],
        run_key: str,
        request_timeout: float,
        on_late_success: Callable[[], None],
    ) -> None:
        # the URI every client, message and spill file gets has no credentials: those written in it are handed to
        # MLflow's client the way it reads them (`export_credentials`), so MLflow never prints them ("View run at")
        self.tracking_uri, username, password = (
            (None, None, None) if tracking_uri is None else split_credentials(tracking_uri)
        )
        self.credentials = {
            variable: value
            for variable, value in (("MLFLOW_TRACKING_USERNAME", username), ("MLFLOW_TRACKING_PASSWORD", password))
            if value is not None
        }
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tags = dict(tags)
        self.run_key = run_key
        self.request_timeout = request_timeout
        self.run_id: str | None = None
        self.reopen = False  # a resumed run still to be marked RUNNING
        # whether a run tagged `run_key` may exist already: a creation was tried (it may have succeeded unseen), or
        # this is a sender child or a replay continuing a training process's attempts. Else creating skips the search
        self.may_exist = False
        self.artifact_location: str | None = None
        self.experiment_id: str | None = None  # known once the run is created (or looked up, `experiment_id`)
        self.refusals: dict[tuple[str, str], str] = {}  # values MLflow refused for good, and why
        self.client: Any = None
        self._requests = OneCallAtATime(on_late_success, what="MLflow")

    @property
    def uri(self) -> str:
        """The tracking URI as messages and spill files show it (without credentials, as it is kept)."""
        return str(self.tracking_uri)

    def connect(self, root_dir: str | None) -> None:
        from mlflow.tracking import MlflowClient

        if self.tracking_uri is None and root_dir is not None:
            directory = os.path.abspath(storage.local_dir(root_dir))
            os.makedirs(directory, exist_ok=True)
            self.tracking_uri = f"sqlite:///{os.path.join(directory, 'mlflow.db')}"
            self.artifact_location = os.path.join(directory, "mlartifacts")
        self.export_credentials()
        self.client = MlflowClient(self.tracking_uri)  # a sqlite URI creates (or migrates) its database here

    def export_credentials(self) -> None:
        """The credentials written in the tracking URI, as MLflow's client reads them on each request (its
        MLFLOW_TRACKING_USERNAME / _PASSWORD, in this process's environment; a sender child gets them the same way).
        Different values already there are an error: this process would send one or the other to both servers."""
        for variable, value in self.credentials.items():
            present = os.environ.get(variable)
            if present is not None and present != value:
                raise ValueError(
                    f"MLflowLogger(tracking_uri={self.uri!r} with credentials in it): {variable} is set in the "
                    "environment to another value, and MLflow's client sends one of them for every request of this "
                    "process. Give the credentials one way: in the URI, or in the environment (not both)."
                )
            os.environ[variable] = value

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._requests.call(self.request_timeout, function, *args, **kwargs)

    def ensure(self) -> str:
        """The run's id, creating the run (or marking a resumed one RUNNING) if that is still to do."""
        if self.run_id is None:
            experiment_id = self.experiment_id = self._experiment_id()
            self.run_id = (self._find(experiment_id) if self.may_exist else None) or self._create(experiment_id)
            self.reopen = False
        if self.reopen:
            self.call(self.client.update_run, self.run_id, status="RUNNING")
            self.reopen = False
        return self.run_id

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self.call(self.client.get_experiment_by_name, self.experiment_name)
        if experiment is None:
            try:
                # MLflow 3's UI opens an experiment by its kind: this one is model training, not GenAI evaluation
                return self.call(
                    self.client.create_experiment,
                    self.experiment_name,
                    artifact_location=self.artifact_location,
                    tags=EXPERIMENT_TAGS,
                )
            except MlflowException as error:  # another process created it meanwhile
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment = self.call(self.client.get_experiment_by_name, self.experiment_name)
        if experiment.lifecycle_stage != "deleted" and "mlflow.experimentKind" not in (experiment.tags or {}):
            for key, value in EXPERIMENT_TAGS.items():  # made by an older version, or without tracktrain: no kind yet
                self.call(self.client.set_experiment_tag, experiment.experiment_id, key, value)
        if experiment.lifecycle_stage == "deleted":
            raise ValueError(
                f"MLflow experiment {self.experiment_name!r} at {self.uri} is deleted. Restore it with `mlflow "
                f"experiments restore --experiment-id {experiment.experiment_id}` or choose another experiment_name."
            )
        return experiment.experiment_id

    def _find(self, experiment_id: str) -> str | None:
        runs = self.call(
            self.client.search_runs,
            [experiment_id],
            max_results=1,
            filter_string=f"tags.`tracktrain.run_key` = '{self.run_key}'",
        )
        return runs[0].info.run_id if runs else None

    def _create(self, experiment_id: str) -> str:
        from tracktrain import __version__

        tags = {**self.tags, "tracktrain.version": __version__, "tracktrain.run_key": self.run_key}
        self.may_exist = True  # from here a failed or overrun request may still have created it
        run = self.call(self.client.create_run, experiment_id, run_name=self.run_name, tags=tags)
        return run.info.run_id

    def log_batch(self, batch: dict[str, list[Any]]) -> None:
        try:
            self.call(self.client.log_batch, self.run_id, synchronous=True, **batch)
        except Exception as error:
            if not refused(error, 400):
                raise  # the tracker is down or failing: the whole batch is retried (MLflow ignores repeats)
            # MLflow refuses something in this batch and always will, so retrying it would block every later
            # record: send the values one by one and drop only those it refuses
            for kind, values in batch.items():
                for value in values:
                    try:
                        self.call(self.client.log_batch, self.run_id, synchronous=True, **{kind: [value]})
                    except Exception as refusal:
                        if not refused(refusal, 400):
                            raise
                        what = f"{kind[:-1]} {value.key}={value.value!r} ({refusal.message})"
                        self.refuse((kind, repr(value)), what)

    def upload(self, local_path: str, artifact_path: str | None) -> None:
        if not os.path.exists(local_path):
            if artifact_path == CHECKPOINT_ARTIFACTS:  # retention deleted it before its upload: not kept, as meant
                _logger.debug("Checkpoint %s was deleted by retention before its upload; skipped.", local_path)
                return
            self.refuse(("artifact", local_path), f"artifact {local_path} (the file no longer exists)")
            return
        self.call(self.client.get_run, self.run_id)  # fails fast when the server is down; the upload is not bounded
        upload = self.client.log_artifacts if os.path.isdir(local_path) else self.client.log_artifact
        self._requests.call(None, upload, self.run_id, local_path, artifact_path)

    def register(self, name: str) -> None:
        """A new version of the registered model `name` (created if missing) made from the run's `model/`."""
        from mlflow.exceptions import MlflowException

        try:
            self.call(self.client.create_registered_model, name)
        except MlflowException as error:  # it exists already: the usual case after the first run
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        self.call(
            self.client.create_model_version,
            name,
            source=f"runs:/{self.run_id}/model",
            run_id=self.run_id,
            await_creation_for=0,
        )  # a local or tracking-server registry makes it READY at once

    def terminate(self, status: str) -> None:
        if self.run_id is not None:  # a run never created is created and filled by replay
            self.call(self.client.set_terminated, self.run_id, status)

    def refuse(self, value: tuple[str, str], what: str) -> None:
        if value not in self.refusals:  # a batch retried after a later failure meets the same refusal again
            self.refusals[value] = what
            _logger.warning("Not sent to MLflow run %s, dropped: %s", self.run_id, what)


def save_pytorch_model(module: Any, path: str) -> None:
    """`module` saved by `mlflow.pytorch.save_model` from a copy on the CPU (loadable without an accelerator) that
    leaves out its Trainer: a LoopModule refers to the Trainer, whose engines, loaders and loggers are not the
    model. The parameters are copied straight to the CPU, never twice on the accelerator."""
    import mlflow.pytorch
    import torch

    memo: dict[int, Any] = {}
    trainer = module.__dict__.get("_trainer")
    if trainer is not None:
        memo[id(trainer)] = None
    for parameter in module.parameters():
        memo[id(parameter)] = torch.nn.Parameter(parameter.detach().cpu(), requires_grad=parameter.requires_grad)
    for buffer in module.buffers():
        memo[id(buffer)] = buffer.detach().cpu()
    # pickled: MLflow's default format outside Databricks, "pt2", needs an example input this logger does not have.
    # The flavour's own requirements: inferring them loads the model again in a subprocess (seconds, at every fit end)
    mlflow.pytorch.save_model(
        copy.deepcopy(module, memo),
        path,
        serialization_format="pickle",
        pip_requirements=mlflow.pytorch.get_default_pip_requirements(),
    )


def refused(error: BaseException, status: int | None = None) -> bool:
    """Whether the server answered `error` with a client error (4xx, or exactly `status`), not an outage."""
    from mlflow.exceptions import MlflowException

    if not isinstance(error, MlflowException):
        return False
    code = error.get_http_status_code()
    return code == status if status is not None else 400 <= code < 500 and code not in (408, 429)
