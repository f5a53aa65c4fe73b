"""MLflow for the Trainer: `MLflowLogger` sends hyperparameters, metrics (at the global step), tags and artifacts to
an MLflow tracking server or to an embedded sqlite file, with MLflow's batch API, from a child process by default
(`delivery="process"`): MLflow's client, not the training loop, pays for building and encoding every value.

Needs MLflow: `pip install 'tracktrain[mlflow]'`.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from tracktrain.loggers.base import QueuedLogger, default_run_name, flatten_params
from tracktrain.loggers.delivery import Record
from tracktrain_integrations.mlflow_run import MlflowRun, refused, save_pytorch_model
from tracktrain_integrations.mlflow_system_metrics import SystemMetricsSampler, mlflow_defaults
from tracktrain_integrations.mlflow_values import (
    MAX_KEY_LENGTH,
    MAX_PARAM_LENGTH,
    MAX_TAG_LENGTH,
    batches,
    mlflow_name,
    scalar,
    truncated,
)

__all__ = ["MLFlowLogger", "MLflowLogger"]


def _import_mlflow() -> None:
    try:
        for module in ("mlflow.tracking", "mlflow.entities", "mlflow.exceptions"):
            importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"MLflowLogger needs MLflow ({error}): pip install 'tracktrain[mlflow]'") from error


class MLflowLogger(QueuedLogger):
    """Logs the run to MLflow without ever blocking training: `log_*` queue records, a background thread sends them.

    Args:
        tracking_uri: an `http(s)://` tracking server or a database URI; by default the embedded
            `sqlite:///{root_dir}/mlflow.db`, with artifacts in `{root_dir}/mlartifacts` (in `./.tracktrain/` when
            root_dir is remote; view it with `mlflow ui --backend-store-uri sqlite:///{root_dir}/mlflow.db`).
        experiment_name: created when it does not exist.
        run_name: the new run's name; None: `<experiment>-<date>-<time>-<6 hex>`, which tells runs apart.
        run_id: continue this run instead of creating one (the Trainer does it with `resume` from a checkpoint).
        tags: the new run's tags (set again on a resumed run); a `tracktrain.version` tag is added.
        log_checkpoints: whether the Trainer uploads each checkpoint it saves as an artifact under `checkpoints/`.
        log_model: whether the trained module is kept in the run, in MLflow's pytorch flavour, under `model/` (the
            Trainer calls `log_final_model` when fit ends well); load it with
            `mlflow.pytorch.load_model("runs:/<run_id>/model")` where the module's class can be imported (it is
            pickled, as `torch.save(module)` does: load only models you trust).
        registered_model_name: with log_model, also register that model as a new version of this registered model
            (created when it does not exist).
        log_system_metrics: sample CPU, memory, disk, network (and GPU with `nvidia-ml-py`) every
            `system_metrics_interval` seconds while the run trains, as MLflow's "System metrics" tab shows them
            (`system/...`), at the latest global step logged. None (default): as MLflow does, on when
            `mlflow.enable_system_metrics_logging()` was called or MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING is true.
            The samples travel with the other records (see `mlflow_system_metrics`). Needs psutil.
        system_metrics_interval: seconds between samples; None: MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL, or else
            about 100 samples over the run so far (every second at first, every minute at most).
        on_unreachable: what `start` does when the tracker does not answer: "raise" (default) a ConnectionError
            naming the URI; or "queue": warn, train anyway and keep the records (in memory, then in the spill
            file); the run is created by the background thread as soon as the server answers, or by
            `python -m tracktrain.loggers.replay SPILL_FILE` after the run. Until then `run_id` is None.
        request_timeout: the longest one request may take before it counts as failed (uploads of artifacts
            excepted). MLflow's HTTP client retries a refused connection for about four minutes before it gives
            up (`MLFLOW_HTTP_REQUEST_MAX_RETRIES`); this logger does its own retrying and must hear of an outage in
            seconds. One request at a time is in flight: while an overrun one is still retrying inside MLflow's
            client, the next ones fail at once, so after an outage delivery resumes when that request gets
            through (MLflow's backoff: 4, 8, 16 … s; `MLFLOW_HTTP_REQUEST_MAX_RETRIES=0` makes it immediate).
        delivery: "process" (default): a child process (`python -m tracktrain.loggers.sender_child`, started at the
            first delivery) runs MLflow's client for the records, so its Python work never competes with training
            for this process's GIL; it ends with the run (an idle one waits a minute for this process's next run:
            `QueuedLogger.sender_keep_warm`), or when this process dies. A child that dies is started again and its
            batch retried. Credentials embedded in `tracking_uri` reach it as
            MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD. "thread": the background thread calls MLflow's
            client in this process (every-step logging then costs training about a quarter of its throughput on a
            small model). Starting, resuming and ending the run, and `log_final_model`, happen in this process
            either way.
        flush_timeout, close_timeout, max_pending: see `QueuedLogger`.

    Names MLflow rejects are renamed (the same name always the same way) with a warning naming them. NaN metric
    values are stored as NaN; MLflow stores ±inf as ±1.8e308. Values MLflow refuses however often they are sent
    (HTTP 400, e.g. a hyperparameter whose value changed on resume) are dropped one by one, logged and counted in
    `rejected`; everything else that fails is retried and kept until delivered.
    """

    tracker = "mlflow"

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str = "tracktrain",
        run_name: str | None = None,
        run_id: str | None = None,
        tags: Mapping[str, Any] | None = None,
        log_checkpoints: bool = False,
        log_model: bool = False,
        registered_model_name: str | None = None,
        on_unreachable: str = "raise",
        request_timeout: float = 10.0,
        flush_timeout: float = 0.0,
        close_timeout: float | None = None,
        max_pending: int = 10_000,
        delivery: str = "process",
        log_system_metrics: bool | None = None,
        system_metrics_interval: float | None = None,
    ) -> None:
        _import_mlflow()
        if on_unreachable not in ("raise", "queue"):
            raise ValueError(f'MLflowLogger(on_unreachable=...) must be "raise" or "queue", got {on_unreachable!r}.')
        if registered_model_name is not None and not log_model:
            raise ValueError(
                f"MLflowLogger(registered_model_name={registered_model_name!r}) registers the logged "
                "model: pass log_model=True too."
            )
        super().__init__(
            flush_timeout=flush_timeout, close_timeout=close_timeout, max_pending=max_pending, delivery=delivery
        )
        self.experiment_name = experiment_name
        self.run_name = run_name if run_name is not None else default_run_name(experiment_name)
        self.tags = {str(key): str(value) for key, value in (tags or {}).items()}
        self.log_checkpoints = log_checkpoints
        self.log_model = log_model
        self.registered_model_name = registered_model_name
        self.on_unreachable = on_unreachable
        self.request_timeout = request_timeout
        self._reported: set[tuple[str, str]] = set()  # refusals a sender child has told the training process of
        self._mlflow = MlflowRun(
            tracking_uri,
            experiment_name,
            self.run_name,
            self.tags,
            run_key=uuid.uuid4().hex,
            request_timeout=request_timeout,
            on_late_success=self._tracker_is_back,
        )
        self._names: dict[str, str] = {}
        self._latest_step = 0
        self._system_metrics = self._system_metrics_sampler(log_system_metrics, system_metrics_interval)
        if run_id is not None:
            self.resume(run_id)

    def _system_metrics_sampler(self, enabled: bool | None, interval: float | None) -> SystemMetricsSampler | None:
        by_mlflow, mlflow_interval = mlflow_defaults()
        if not (by_mlflow if enabled is None else enabled):
            return None
        return SystemMetricsSampler(
            self._log_system_metrics, lambda: self._latest_step, mlflow_interval if interval is None else interval
        )

    def _log_system_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self._queue is not None:  # not after finalize
            self._put(Record("metrics", dict(metrics), step))

    @property
    def run_id(self) -> str | None:
        """The MLflow run id (None while the run waits to be created, see `on_unreachable`)."""
        return self._mlflow.run_id

    @property
    def tracking_uri(self) -> str | None:
        """The tracking URI given (without the credentials written in it, which MLflow's client gets apart), or the
        embedded sqlite file's once `start` chose it."""
        return self._mlflow.tracking_uri

    # ------------------------------------------------------------------------------------- Lightning's surface
    @property
    def experiment(self) -> Any:
        """MLflow's `MlflowClient` of the run's store, as Lightning's `MLFlowLogger.experiment` (with `run_id`:
        `logger.experiment.log_artifact(logger.run_id, path)`); None before a fit starts the logger."""
        return self._mlflow.client

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id (None until the run exists)."""
        run = self._mlflow
        if run.experiment_id is None and run.run_id is not None and run.client is not None:
            run.experiment_id = run.call(run.client.get_run, run.run_id).info.experiment_id  # a resumed run's
        return run.experiment_id

    @property
    def name(self) -> str | None:
        """Lightning's: the experiment's id."""
        return self.experiment_id

    @property
    def save_dir(self) -> str | None:
        """The folder of the embedded store (its sqlite file and artifacts), None for a tracking server."""
        uri = self._mlflow.tracking_uri
        if uri is None or not uri.startswith("sqlite:///"):
            return None
        return os.path.dirname(uri[len("sqlite:///") :])

    def resume(self, run_id: str) -> None:
        super().resume(run_id)
        self._mlflow.run_id = run_id
        self._mlflow.reopen = True

    def start(self, root_dir: str) -> None:
        resumed = self._mlflow.reopen
        started = self._queue is not None
        super().start(root_dir)
        if resumed and self.tags:
            self.set_tags(self.tags)
        if self._system_metrics is not None and not started:
            self._system_metrics.start()

    # ------------------------------------------------------------------------------------------ training side
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Queue `metrics` at `step` (the Trainer's global step; None, as Lightning allows: the latest logged)."""
        if step is None:
            step = self._latest_step
        values = {}
        for name, value in metrics.items():
            if type(value) is not float:  # the Trainer passes floats; a direct call may pass anything
                value = scalar(name, value)
            values[self._name(name, "metric")] = value
        self._latest_step = step = int(step)
        self._put(Record("metrics", values, step))

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        values = {}
        for name, value in flatten_params(params).items():  # MLflow keeps params as text
            key = self._name(name, "hyperparameter")
            values[key] = truncated(name, str(value), MAX_PARAM_LENGTH, "hyperparameter")
        if values:
            self._put(Record("params", values))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        values = {}
        for name, value in tags.items():
            values[self._name(str(name), "tag")] = truncated(name, str(value), MAX_TAG_LENGTH, "tag")
        if values:
            self._put(Record("tags", values))

    def finalize(self, status: str) -> None:
        if self._system_metrics is not None:
            self._system_metrics.stop()  # its last sample goes out with the rest
        super().finalize(status)
        if self.rejected:
            first = "; ".join(list(self._mlflow.refusals.values())[:5])
            warnings.warn(
                f"MLflow refused {self.rejected} value(s) of run {self._mlflow.run_id}, dropped since "
                f"sending them again cannot succeed: {first}",
                stacklevel=2,
            )

    def log_final_model(self, module: Any) -> None:
        """With `log_model`, keep the trained `module` in the run under `model/` (MLflow's pytorch flavour) and
        register it as `registered_model_name`. Called once, at the end of training and before `finalize`; it waits
        for the upload (an upload is not time-limited; every other request is, by `request_timeout`) and warns
        instead of raising when something fails: the training itself succeeded."""
        if not self.log_model:
            return
        run_id = self._mlflow.run_id
        if run_id is None or self._mlflow.client is None:
            warnings.warn(
                "MLflowLogger(log_model=True): the trained model is not logged, since the MLflow run "
                f"does not exist yet (tracking server {self._mlflow.uri} unreachable since the start). Save it "
                "with torch.save, then log it with mlflow.pytorch.log_model once the server is back.",
                stacklevel=2,
            )
            return
        try:
            # the records logged so far go first; then the delivery thread is idle and its requests leave ours alone
            if not self.flush(self.request_timeout):
                raise TimeoutError(f"the records logged before it were not delivered within {self.request_timeout} s")
            with tempfile.TemporaryDirectory(prefix="tracktrain-mlflow-model-") as directory:
                path = os.path.join(directory, "model")
                save_pytorch_model(module, path)
                self._mlflow.upload(path, "model")
            if self.registered_model_name is not None:
                self._mlflow.register(self.registered_model_name)
        except Exception as error:
            warnings.warn(
                f"MLflowLogger could not log the trained {type(module).__name__} to MLflow run {run_id} at "
                f"{self._mlflow.uri} ({type(error).__name__}: {error}); the training result is unaffected. Log "
                "it yourself with mlflow.pytorch.log_model, or log_model=False to skip it.",
                stacklevel=2,
            )

    def _name(self, name: str, kind: str) -> str:
        """`name` as MLflow accepts it, warning the first time a name has to change."""
        known = self._names.get(name)
        if known is None:
            known = self._names[name] = mlflow_name(name)
            if known != name:
                warnings.warn(
                    f"MLflow does not accept the {kind} name {name!r} (names may hold letters, digits, "
                    f"_ - . space / : and at most {MAX_KEY_LENGTH} characters); it is logged as {known!r}.",
                    stacklevel=3,
                )
        return known

    # ------------------------------------------------------------------------------ QueuedLogger's three parts
    def _open(self, root_dir: str) -> str:
        self._mlflow.connect(root_dir)
        try:
            return self._mlflow.ensure()
        except Exception as error:
            if refused(error):  # the server answered: a wrong run id, credentials
                raise RuntimeError(f"MLflow at {self._mlflow.uri} refused to open the run ({error}).") from error
            if isinstance(error, ValueError):  # a deleted experiment
                raise
            if self.on_unreachable == "raise":
                raise ConnectionError(
                    f"MLflowLogger cannot reach the MLflow tracking server at {self._mlflow.uri} ({error}). Start it "
                    "(e.g. `mlflow server --host 127.0.0.1 --port 5000`), correct MLflowLogger(tracking_uri=...), "
                    "or pass on_unreachable='queue' to train anyway and send the records once it answers."
                ) from error
            warnings.warn(
                f"The MLflow tracking server at {self._mlflow.uri} does not answer ({error}); training goes on "
                "and the records are sent once it does.",
                stacklevel=4,
            )
            return self._mlflow.run_id or f"pending-{self._mlflow.run_key}"

    def _send(self, records: list[Record]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        self._mlflow.ensure()
        metrics, params, tags, artifacts = [], [], [], []
        for record in records:
            if record.kind == "metrics":
                timestamp = int(record.timestamp * 1000)
                metrics += [Metric(key, value, timestamp, record.step) for key, value in record.payload.items()]
            elif record.kind == "params":
                params += [Param(key, value) for key, value in record.payload.items()]
            elif record.kind == "tags":
                tags += [RunTag(key, value) for key, value in record.payload.items()]
            elif record.kind == "artifact":
                artifacts.append(record.payload)
        for batch in batches(params, tags, metrics):
            self._mlflow.log_batch(batch)
        for artifact in artifacts:
            self._mlflow.upload(artifact["local_path"], artifact["artifact_path"])

    def _close(self, status: str) -> None:
        if self.undelivered:  # the tracker did not take the records: the run's end is in the spill file, with them
            return
        self._mlflow.terminate(status)

    def _spill_header(self) -> dict[str, Any]:
        run = self._mlflow
        return {
            **super()._spill_header(),
            "run_id": run.run_id,
            "run_key": run.run_key,
            "tracking_uri": run.uri,
            "experiment_name": self.experiment_name,
            "run_name": self.run_name,
            "tags": self.tags,
            "artifact_location": run.artifact_location,
            "reopen": run.reopen,
            "request_timeout": self.request_timeout,
        }

    @classmethod
    def for_replay(cls, header: Mapping[str, Any]) -> MLflowLogger:
        """A logger that sends a spill file's records to its run (created, once, when the header has no run id).
        Credentials are not in the header: give them as MLflow reads them (MLFLOW_TRACKING_USERNAME/_PASSWORD…)."""
        logger = cls(
            tracking_uri=header["tracking_uri"],
            experiment_name=header["experiment_name"],
            run_name=header.get("run_name"),
            tags=header.get("tags"),
            request_timeout=header.get("request_timeout", 10.0),
            log_system_metrics=False,
        )
        logger._mlflow.run_key = header["run_key"]
        logger._mlflow.may_exist = True  # the training process may have created it in an attempt it saw fail
        logger._mlflow.artifact_location = header.get("artifact_location")
        if header.get("run_id"):
            logger.resume(header["run_id"])
            logger._mlflow.reopen = header.get("reopen", True)  # False: the training process marked it RUNNING already
        logger._mlflow.connect(None)
        return logger

    # ---------------------------------------------------------------------------- delivery="process"
    def _sender_environment(self) -> dict[str, str]:
        return dict(self._mlflow.credentials)

    def _sender_report(self) -> dict[str, Any]:
        new = {value: what for value, what in self._mlflow.refusals.items() if value not in self._reported}
        self._reported.update(new)
        return {"run_id": self._mlflow.run_id, "refusals": new}

    def _take_sender_report(self, report: Mapping[str, Any]) -> None:
        if self._mlflow.run_id is None and report.get("run_id"):  # the child created the run once MLflow answered
            self._mlflow.run_id = report["run_id"]
        for value, what in report.get("refusals", {}).items():
            self._mlflow.refusals.setdefault(value, what)

    @property
    def rejected(self) -> int:
        """How many values MLflow refused for good (see the class docstring)."""
        return len(self._mlflow.refusals)


class MLFlowLogger(MLflowLogger):
    """Lightning's `MLFlowLogger`, with its arguments and defaults, over `MLflowLogger` (one implementation: the
    same delivery that never blocks training and survives an outage).

    Lightning's meaning of each argument, where ours differs: `save_dir` is the folder of the embedded store when no
    `tracking_uri` is given (a sqlite database there, not MLflow's deprecated `./mlruns` file store);
    `log_model=True` or `"all"` uploads the checkpoints (ours uploads each committed one, as `"all"`);
    `checkpoint_path_prefix` goes before their artifact folder; `prefix` before every metric's name (with "-");
    `synchronous=True` waits for each logged value to be delivered (at most `request_timeout`).
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | os.PathLike | None = "./mlruns",
        log_model: bool | str = False,
        checkpoint_path_prefix: str = "",
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
        **options: Any,
    ) -> None:
        if log_model not in (True, False, "all"):
            raise ValueError(f'MLFlowLogger(log_model=...) is True, False or "all", got {log_model!r}.')
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if tracking_uri is None and save_dir is not None:
            directory = os.path.abspath(os.fspath(save_dir))
            os.makedirs(directory, exist_ok=True)
            tracking_uri = f"sqlite:///{os.path.join(directory, 'mlflow.db')}"
            artifact_location = artifact_location or os.path.join(directory, "mlartifacts")
        super().__init__(
            tracking_uri=tracking_uri,
            experiment_name=experiment_name,
            run_name=run_name,
            run_id=run_id,
            tags=tags,
            log_checkpoints=bool(log_model),
            **options,
        )
        self._mlflow.artifact_location = artifact_location
        self.checkpoint_path_prefix = checkpoint_path_prefix
        self.prefix = prefix
        self.synchronous = bool(synchronous)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.prefix:
            metrics = {f"{self.prefix}{self.LOGGER_JOIN_CHAR}{name}": value for name, value in metrics.items()}
        super().log_metrics(metrics, step)
        if self.synchronous:
            self.flush(self.request_timeout)

    def log_artifact(self, local_path: str, artifact_path: str | None = None, step: int | None = None) -> None:
        if self.checkpoint_path_prefix and artifact_path is not None:
            artifact_path = f"{self.checkpoint_path_prefix}/{artifact_path}"
        super().log_artifact(local_path, artifact_path, step)
