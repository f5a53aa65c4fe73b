"""MLflow for the Trainer: `MLflowLogger` sends hyperparameters, metrics (at the global step), tags and artifacts to
an MLflow tracking server or to an embedded sqlite file, with MLflow's batch API, from a child process by default
(`delivery="process"`): MLflow's client, not the training loop, pays for building and encoding every value.

Needs MLflow: `pip install 'tracktrain[mlflow]'`.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import itertools
import logging
import numbers
import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from tracktrain import storage
from tracktrain.loggers.base import CHECKPOINT_ARTIFACTS, QueuedLogger, default_run_name, flatten_params
from tracktrain.loggers.delivery import Record
from tracktrain_integrations.mlflow_system_metrics import SystemMetricsSampler, mlflow_defaults

__all__ = ["MLflowLogger"]

# Read by MLflow 3's UI to open the experiment as model training (runs, metric charts, params, artifacts) rather than
# in its GenAI view; older servers keep it as an ordinary tag.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}

_logger = logging.getLogger(__name__)

# MLflow's limits (mlflow/utils/validation.py): per log_batch call, and per name and value
_MAX_METRICS, _MAX_PARAMS, _MAX_TAGS, _MAX_ENTITIES = 1000, 100, 100, 1000
_MAX_REQUEST_BYTES = 900_000  # MLflow documents 1 MB per batch request (managed servers enforce it); keep a margin
_MAX_KEY_LENGTH, _MAX_PARAM_LENGTH, _MAX_TAG_LENGTH = 250, 6000, 8000
# characters MLflow accepts in metric, param and tag names (no colon on Windows)
_REJECTED_CHARACTERS = re.compile(r"[^/\w.\- ]" if os.name == "nt" else r"[^/\w.\- :]")


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

    name = "mlflow"

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
        close_timeout: float = 30.0,
        max_pending: int = 10_000,
        delivery: str = "process",
        log_system_metrics: bool | None = None,
        system_metrics_interval: float | None = None,
    ) -> None:
        _import_mlflow()
        if on_unreachable not in ("raise", "queue"):
            raise ValueError(f'MLflowLogger(on_unreachable=...) must be "raise" or "queue", got {on_unreachable!r}.')
        if registered_model_name is not None and not log_model:
            raise ValueError(f"MLflowLogger(registered_model_name={registered_model_name!r}) registers the logged "
                             "model: pass log_model=True too.")
        super().__init__(flush_timeout=flush_timeout, close_timeout=close_timeout, max_pending=max_pending,
                         delivery=delivery)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name if run_name is not None else default_run_name(experiment_name)
        self.tags = {str(key): str(value) for key, value in (tags or {}).items()}
        self.log_checkpoints = log_checkpoints
        self.log_model = log_model
        self.registered_model_name = registered_model_name
        self.on_unreachable = on_unreachable
        self.request_timeout = request_timeout
        self._refusals: dict[tuple[str, str], str] = {}  # values MLflow refused for good, and why
        self._reported: set[tuple[str, str]] = set()  # refusals a sender child has told the training process of
        self._mlflow_run_id: str | None = None
        self._reopen = False  # a resumed run still to be marked RUNNING
        self._run_key = uuid.uuid4().hex  # tags the run, so a retried or replayed creation finds it, not a second one
        self._artifact_location: str | None = None
        self._client: Any = None
        self._requests = _OneAtATime(on_late_success=self._tracker_is_back)
        self._names: dict[str, str] = {}
        self._latest_step = 0
        self._system_metrics = self._system_metrics_sampler(log_system_metrics, system_metrics_interval)
        if run_id is not None:
            self.resume(run_id)

    def _system_metrics_sampler(self, enabled: bool | None, interval: float | None) -> SystemMetricsSampler | None:
        by_mlflow, mlflow_interval = mlflow_defaults()
        if not (by_mlflow if enabled is None else enabled):
            return None
        return SystemMetricsSampler(self._log_system_metrics, lambda: self._latest_step,
                                    mlflow_interval if interval is None else interval)

    def _log_system_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self._queue is not None:  # not after finalize
            self._put(Record("metrics", dict(metrics), step))

    @property
    def run_id(self) -> str | None:
        """The MLflow run id (None while the run waits to be created, see `on_unreachable`)."""
        return self._mlflow_run_id

    def resume(self, run_id: str) -> None:
        super().resume(run_id)
        self._mlflow_run_id = run_id
        self._reopen = True

    def start(self, root_dir: str) -> None:
        resumed = self._reopen
        started = self._queue is not None
        super().start(root_dir)
        if resumed and self.tags:
            self.set_tags(self.tags)
        if self._system_metrics is not None and not started:
            self._system_metrics.start()

    # ------------------------------------------------------------------------------------------ training side
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        values = {}
        for name, value in metrics.items():
            if type(value) is not float:  # the Trainer passes floats; a direct call may pass anything
                value = _scalar(name, value)
            values[self._name(name, "metric")] = value
        self._latest_step = step = int(step)
        self._put(Record("metrics", values, step))

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        values = {}
        for name, value in flatten_params(params).items():  # MLflow keeps params as text
            key = self._name(name, "hyperparameter")
            values[key] = _truncated(name, str(value), _MAX_PARAM_LENGTH, "hyperparameter")
        if values:
            self._put(Record("params", values))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        values = {}
        for name, value in tags.items():
            values[self._name(str(name), "tag")] = _truncated(name, str(value), _MAX_TAG_LENGTH, "tag")
        if values:
            self._put(Record("tags", values))

    def finalize(self, status: str) -> None:
        if self._system_metrics is not None:
            self._system_metrics.stop()  # its last sample goes out with the rest
        super().finalize(status)
        if self.rejected:
            first = "; ".join(list(self._refusals.values())[:5])
            warnings.warn(f"MLflow refused {self.rejected} value(s) of run {self._mlflow_run_id}, dropped since "
                          f"sending them again cannot succeed: {first}", stacklevel=2)

    def log_final_model(self, module: Any) -> None:
        """With `log_model`, keep the trained `module` in the run under `model/` (MLflow's pytorch flavour) and
        register it as `registered_model_name`. Called once, at the end of training and before `finalize`; it waits
        for the upload (an upload is not time-limited; every other request is, by `request_timeout`) and warns
        instead of raising when something fails: the training itself succeeded."""
        if not self.log_model:
            return
        run_id = self._mlflow_run_id
        if run_id is None or self._client is None:
            warnings.warn("MLflowLogger(log_model=True): the trained model is not logged, since the MLflow run "
                          f"does not exist yet (tracking server {self._uri} unreachable since the start). Save it "
                          "with torch.save, then log it with mlflow.pytorch.log_model once the server is back.",
                          stacklevel=2)
            return
        try:
            # the records logged so far go first; then the delivery thread is idle and its requests leave ours alone
            if not self.flush(self.request_timeout):
                raise TimeoutError(f"the records logged before it were not delivered within {self.request_timeout} s")
            with tempfile.TemporaryDirectory(prefix="tracktrain-mlflow-model-") as directory:
                path = os.path.join(directory, "model")
                _save_pytorch_model(module, path)
                self._upload(run_id, path, "model")
            if self.registered_model_name is not None:
                self._register(run_id)
        except Exception as error:
            warnings.warn(f"MLflowLogger could not log the trained {type(module).__name__} to MLflow run {run_id} at "
                          f"{self._uri} ({type(error).__name__}: {error}); the training result is unaffected. Log "
                          "it yourself with mlflow.pytorch.log_model, or log_model=False to skip it.", stacklevel=2)

    def _name(self, name: str, kind: str) -> str:
        """`name` as MLflow accepts it, warning the first time a name has to change."""
        known = self._names.get(name)
        if known is None:
            known = self._names[name] = _mlflow_name(name)
            if known != name:
                warnings.warn(f"MLflow does not accept the {kind} name {name!r} (names may hold letters, digits, "
                              f"_ - . space / : and at most {_MAX_KEY_LENGTH} characters); it is logged as {known!r}.",
                              stacklevel=3)
        return known

    # ------------------------------------------------------------------------------ QueuedLogger's three parts
    def _open(self, root_dir: str) -> str:
        self._connect(root_dir)
        try:
            return self._ensure_run()
        except Exception as error:
            if _refused(error):  # the server answered: a wrong run id, credentials
                raise RuntimeError(f"MLflow at {self._uri} refused to open the run ({error}).") from error
            if isinstance(error, ValueError):  # a deleted experiment
                raise
            if self.on_unreachable == "raise":
                raise ConnectionError(
                    f"MLflowLogger cannot reach the MLflow tracking server at {self._uri} ({error}). Start it "
                    "(e.g. `mlflow server --host 127.0.0.1 --port 5000`), correct MLflowLogger(tracking_uri=...), "
                    "or pass on_unreachable='queue' to train anyway and send the records once it answers."
                ) from error
            warnings.warn(f"The MLflow tracking server at {self._uri} does not answer ({error}); training goes on "
                          "and the records are sent once it does.", stacklevel=4)
            return self._mlflow_run_id or f"pending-{self._run_key}"

    def _send(self, records: list[Record]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        run_id = self._ensure_run()
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
        for batch in _batches(params, tags, metrics):
            self._log_batch(run_id, batch)
        for artifact in artifacts:
            self._upload(run_id, artifact["local_path"], artifact["artifact_path"])

    def _close(self, status: str) -> None:
        if self._mlflow_run_id is not None:  # a run never created is created and filled by replay
            self._call(self._client.set_terminated, self._mlflow_run_id, status)

    def _spill_header(self) -> dict[str, Any]:
        return {**super()._spill_header(), "run_id": self._mlflow_run_id, "run_key": self._run_key,
                "tracking_uri": self._uri, "experiment_name": self.experiment_name,
                "run_name": self.run_name, "tags": self.tags, "artifact_location": self._artifact_location,
                "reopen": self._reopen, "request_timeout": self.request_timeout}

    @classmethod
    def for_replay(cls, header: Mapping[str, Any]) -> MLflowLogger:
        """A logger that sends a spill file's records to its run (created, once, when the header has no run id).
        Credentials are not in the header: give them as MLflow reads them (MLFLOW_TRACKING_USERNAME/_PASSWORD…)."""
        logger = cls(tracking_uri=header["tracking_uri"], experiment_name=header["experiment_name"],
                     run_name=header.get("run_name"), tags=header.get("tags"),
                     request_timeout=header.get("request_timeout", 10.0), log_system_metrics=False)
        logger._run_key = header["run_key"]
        logger._artifact_location = header.get("artifact_location")
        if header.get("run_id"):
            logger.resume(header["run_id"])
            logger._reopen = header.get("reopen", True)  # False: the training process marked it RUNNING already
        logger._connect(None)
        return logger

    # ---------------------------------------------------------------------------- delivery="process"
    def _sender_environment(self) -> dict[str, str]:
        parts = urlsplit(str(self.tracking_uri))
        credentials = {}
        if parts.username is not None:
            credentials["MLFLOW_TRACKING_USERNAME"] = unquote(parts.username)
        if parts.password is not None:
            credentials["MLFLOW_TRACKING_PASSWORD"] = unquote(parts.password)
        return credentials

    def _sender_report(self) -> dict[str, Any]:
        new = {value: what for value, what in self._refusals.items() if value not in self._reported}
        self._reported.update(new)
        return {"run_id": self._mlflow_run_id, "refusals": new}

    def _take_sender_report(self, report: Mapping[str, Any]) -> None:
        if self._mlflow_run_id is None and report.get("run_id"):  # the child created the run once MLflow answered
            self._mlflow_run_id = report["run_id"]
        for value, what in report.get("refusals", {}).items():
            self._refusals.setdefault(value, what)

    # --------------------------------------------------------------------------------------- talking to MLflow
    def _connect(self, root_dir: str | None) -> None:
        from mlflow.tracking import MlflowClient

        if self.tracking_uri is None and root_dir is not None:
            directory = os.path.abspath(storage.local_dir(root_dir))
            os.makedirs(directory, exist_ok=True)
            self.tracking_uri = f"sqlite:///{os.path.join(directory, 'mlflow.db')}"
            self._artifact_location = os.path.join(directory, "mlartifacts")
        self._client = MlflowClient(self.tracking_uri)  # a sqlite URI creates (or migrates) its database here

    @property
    def _uri(self) -> str:
        """The tracking URI as messages and spill files show it: without credentials."""
        return _without_credentials(str(self.tracking_uri))

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._requests.call(self.request_timeout, function, *args, **kwargs)

    def _ensure_run(self) -> str:
        """The run's id, creating the run (or marking a resumed one RUNNING) if that is still to do."""
        if self._mlflow_run_id is None:
            experiment_id = self._experiment_id()
            self._mlflow_run_id = self._find_run(experiment_id) or self._create_run(experiment_id)
            self._reopen = False
        if self._reopen:
            self._call(self._client.update_run, self._mlflow_run_id, status="RUNNING")
            self._reopen = False
        return self._mlflow_run_id

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self._call(self._client.get_experiment_by_name, self.experiment_name)
        if experiment is None:
            try:
                # MLflow 3's UI opens an experiment by its kind: this one is model training, not GenAI evaluation
                return self._call(self._client.create_experiment, self.experiment_name,
                                  artifact_location=self._artifact_location, tags=EXPERIMENT_TAGS)
            except MlflowException as error:  # another process created it meanwhile
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment = self._call(self._client.get_experiment_by_name, self.experiment_name)
        if experiment.lifecycle_stage != "deleted" and "mlflow.experimentKind" not in (experiment.tags or {}):
            for key, value in EXPERIMENT_TAGS.items():  # made by an older version, or without tracktrain: no kind yet
                self._call(self._client.set_experiment_tag, experiment.experiment_id, key, value)
        if experiment.lifecycle_stage == "deleted":
            raise ValueError(
                f"MLflow experiment {self.experiment_name!r} at {self._uri} is deleted. Restore it with `mlflow "
                f"experiments restore --experiment-id {experiment.experiment_id}` or choose another experiment_name."
            )
        return experiment.experiment_id

    def _find_run(self, experiment_id: str) -> str | None:
        runs = self._call(self._client.search_runs, [experiment_id], max_results=1,
                          filter_string=f"tags.`tracktrain.run_key` = '{self._run_key}'")
        return runs[0].info.run_id if runs else None

    def _create_run(self, experiment_id: str) -> str:
        from tracktrain import __version__

        tags = {**self.tags, "tracktrain.version": __version__, "tracktrain.run_key": self._run_key}
        run = self._call(self._client.create_run, experiment_id, run_name=self.run_name, tags=tags)
        return run.info.run_id

    def _log_batch(self, run_id: str, batch: dict[str, list[Any]]) -> None:
        try:
            self._call(self._client.log_batch, run_id, synchronous=True, **batch)
        except Exception as error:
            if not _refused(error, 400):
                raise  # the tracker is down or failing: the whole batch is retried (MLflow ignores repeats)
            # MLflow refuses something in this batch and always will, so retrying it would block every later
            # record: send the values one by one and drop only those it refuses
            for kind, values in batch.items():
                for value in values:
                    try:
                        self._call(self._client.log_batch, run_id, synchronous=True, **{kind: [value]})
                    except Exception as refusal:
                        if not _refused(refusal, 400):
                            raise
                        what = f"{kind[:-1]} {value.key}={value.value!r} ({refusal.message})"
                        self._refuse((kind, repr(value)), what)

    def _register(self, run_id: str) -> None:
        """A new version of `registered_model_name` (created if missing) made from the run's `model/`."""
        from mlflow.exceptions import MlflowException

        name = self.registered_model_name
        try:
            self._call(self._client.create_registered_model, name)
        except MlflowException as error:  # it exists already: the usual case after the first run
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        self._call(self._client.create_model_version, name, source=f"runs:/{run_id}/model", run_id=run_id,
                   await_creation_for=0)  # a local or tracking-server registry makes it READY at once

    def _upload(self, run_id: str, local_path: str, artifact_path: str | None) -> None:
        if not os.path.exists(local_path):
            if artifact_path == CHECKPOINT_ARTIFACTS:  # retention deleted it before its upload: not kept, as meant
                _logger.debug("Checkpoint %s was deleted by retention before its upload; skipped.", local_path)
                return
            self._refuse(("artifact", local_path), f"artifact {local_path} (the file no longer exists)")
            return
        self._call(self._client.get_run, run_id)  # fails fast when the server is down; the upload is not bounded
        upload = self._client.log_artifacts if os.path.isdir(local_path) else self._client.log_artifact
        self._requests.call(None, upload, run_id, local_path, artifact_path)

    def _refuse(self, value: tuple[str, str], what: str) -> None:
        if value not in self._refusals:  # a batch retried after a later failure meets the same refusal again
            self._refusals[value] = what
            _logger.warning("Not sent to MLflow run %s, dropped: %s", self._mlflow_run_id, what)

    @property
    def rejected(self) -> int:
        """How many values MLflow refused for good (see the class docstring)."""
        return len(self._refusals)


class _OneAtATime:
    """Runs MLflow client calls one at a time on a daemon thread, waiting at most `timeout` seconds for each.

    A call that overruns goes on in the background and its result is dropped; until it ends, the next call fails at
    once, so requests never pile up nor overtake each other. When it ends well, the tracker is back:
    `on_late_success` is called. What this logger sends is idempotent in MLflow (the same metric, parameter value,
    tag or file again changes nothing), so a late success of a call counted as failed, and sent again, is harmless.
    """

    def __init__(self, on_late_success: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._running: _Call | None = None
        self._on_late_success = on_late_success

    def call(self, timeout: float | None, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            running = self._running
            if running is not None and not running.done.is_set():
                raise TimeoutError(f"the previous MLflow request ({running.name}) has not returned after "
                                   f"{time.monotonic() - running.started:.0f} s")
            call = self._running = _Call(function, args, kwargs)
            threading.Thread(target=call.run, name="tracktrain-mlflow-request", daemon=True).start()
        if not call.done.wait(timeout):
            call.on_late_success = self._on_late_success
            raise TimeoutError(f"MLflow request {call.name} did not return within {timeout} s")
        if call.error is not None:
            raise call.error
        return call.result


class _Call:
    def __init__(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs
        self.name = getattr(function, "__name__", repr(function))
        self.started = time.monotonic()
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.on_late_success: Callable[[], None] | None = None  # set when the caller stopped waiting

    def run(self) -> None:
        try:
            self.result = self.function(*self.args, **self.kwargs)
        except BaseException as error:  # handed to the waiting thread
            self.error = error
        finally:
            self.done.set()
        if self.error is None and self.on_late_success is not None:
            self.on_late_success()


def _save_pytorch_model(module: Any, path: str) -> None:
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
    mlflow.pytorch.save_model(copy.deepcopy(module, memo), path, serialization_format="pickle",
                              pip_requirements=mlflow.pytorch.get_default_pip_requirements())


def _refused(error: BaseException, status: int | None = None) -> bool:
    """Whether the server answered `error` with a client error (4xx, or exactly `status`), not an outage."""
    from mlflow.exceptions import MlflowException

    if not isinstance(error, MlflowException):
        return False
    code = error.get_http_status_code()
    return code == status if status is not None else 400 <= code < 500 and code not in (408, 429)


def _scalar(name: str, value: Any) -> float:
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0:  # a 0-d tensor or array (a tensor on an accelerator is read here)
        return float(value)
    raise TypeError(f"MLflowLogger.log_metrics: metric {name!r} must be a number, got {type(value).__name__} "
                    f"{value!r}. Log one number per name (e.g. {name}/0, {name}/1 for the elements).")


def _mlflow_name(name: str) -> str:
    """`name` with the characters MLflow rejects as `_`, and no empty, `.` or `..` path parts (MLflow refuses names
    that would resolve to another path); long names keep a hash of the full name, so they stay distinct."""
    parts = [part if part not in (".", "..") else "_" * len(part)
             for part in _REJECTED_CHARACTERS.sub("_", name).split("/") if part]
    cleaned = "/".join(parts) or "_"
    if len(cleaned) > _MAX_KEY_LENGTH:
        cleaned = f"{cleaned[:_MAX_KEY_LENGTH - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return cleaned


def _truncated(name: Any, value: str, limit: int, kind: str) -> str:
    if len(value) <= limit:
        return value
    warnings.warn(f"The {kind} {name!r} is {len(value)} characters long; MLflow keeps {limit}, so it is truncated.",
                  stacklevel=3)
    return value[:limit]


def _batches(params: list[Any], tags: list[Any], metrics: list[Any]) -> Iterator[dict[str, list[Any]]]:
    """`log_batch` arguments within MLflow's limits: 100 params, 100 tags, 1000 metrics, 1000 in all, 1 MB a call."""
    limits = {"params": _MAX_PARAMS, "tags": _MAX_TAGS, "metrics": _MAX_METRICS}
    batch: dict[str, list[Any]] = {"params": [], "tags": [], "metrics": []}
    count = size = 0
    entities = itertools.chain((("params", p) for p in params), (("tags", t) for t in tags),
                               (("metrics", m) for m in metrics))
    for kind, entity in entities:
        entity_size = len(entity.key) + len(str(entity.value)) + 80  # the JSON around a metric is ~80 bytes
        if count == _MAX_ENTITIES or len(batch[kind]) == limits[kind] or size + entity_size > _MAX_REQUEST_BYTES:
            yield batch
            batch = {"params": [], "tags": [], "metrics": []}
            count = size = 0
        batch[kind].append(entity)
        count += 1
        size += entity_size
    if count:
        yield batch


def _without_credentials(uri: str) -> str:
    """`uri` without a user name or password in it (spill files are plain text)."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))
