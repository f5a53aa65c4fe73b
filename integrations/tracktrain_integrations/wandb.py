"""Weights & Biases for the Trainer: `WandbLogger`, a `QueuedLogger` whose records reach a W&B run from a
background thread, on our global step as W&B's step axis. The run is opened here (`wandb.init`); its history rows,
config, tags and artifacts are written by a child process attached to it (`wandb.attach`), unless `watch` is used.

Needs the `wandb` package (0.19.10 or newer, for several runs in one process): `pip install 'tracktrain[wandb]'`.

    trainer = Trainer(loggers=[WandbLogger(project="mnist", mode="offline")])

W&B keeps one open history row, at the latest step, and commits it when a higher step arrives or the run finishes;
a value for an older step is dropped ("step must be monotonically increasing"). Every record is therefore logged at
its global step without committing, so everything published at one step (train values, validation values, epoch
values), in one batch or several, lands in the same row. Only a step older than one already logged, which the
Trainer never publishes, cannot be written: it is counted, logged as a warning, and reported at the end.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from tracktrain import storage
from tracktrain.loggers.base import CHECKPOINT_ARTIFACTS, QueuedLogger, default_run_name, flatten_params
from tracktrain.loggers.delivery import Record
from tracktrain_integrations.wandb_values import MAX_TAG_LENGTH as MAX_TAG_LENGTH  # importable from here, as before
from tracktrain_integrations.wandb_values import (
    MODES,
    RESUME_MODES,
    WATCH_MODES,
    check_choice,
    checked_tag,
    json_safe,
    truncated_tag,
)

__all__ = ["WandbLogger"]

_logger = logging.getLogger(__name__)

# W&B marks any non-zero exit code as a failed run; 255 is what W&B itself records for a Ctrl-C.
EXIT_CODES = {"FINISHED": 0, "FAILED": 1, "KILLED": 255}
# with `watch`: how long publishing a step's values waits for their row to be open in W&B (`log_metrics`)
WATCH_DELIVERY_TIMEOUT = 10.0


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as error:
        raise ImportError("WandbLogger needs the wandb package: pip install 'tracktrain[wandb]'") from error
    return wandb


class WandbLogger(QueuedLogger):
    """Logs the Trainer's hyperparameters, published values, tags and checkpoints to a W&B run.

    Args:
        project: the W&B project.
        name: the run's display name; None: `<project>-<date>-<time>-<6 hex>`, which tells runs apart. Kept as `run_name`: `name` is the logger's kind.
        id: the id of a run to continue; a checkpoint's run id (given through `resume`) takes its place.
        resume: W&B's resume mode ("allow", "must", "never", "auto"); "allow" when a run id is known.
        mode: "online", "offline" (sync later with `wandb sync`) or "disabled"; None: W&B's default (WANDB_MODE).
        config: the run's initial config; the Trainer's hyperparameters are added to it.
        tags: the run's tags (1 to 64 characters each); `set_tags({"k": "v"})` adds "k:v".
        log_checkpoints: upload every checkpoint the Trainer saves as a W&B artifact of type "model".
        watch: "gradients", "parameters" or "all" to log histograms through `wandb.watch` (off when None); see
            `watch_module`. W&B's hooks log to the process's current run, so this run becomes it, finishing any
            other W&B run the process has open.
        watch_log_freq: log those histograms every this many backward (or forward, for parameters) passes.
        save_dir: where W&B writes its `wandb/` folder; None: WANDB_DIR when set, else the Trainer's root dir
            (`./.tracktrain` when that is a remote URL).
        entity: the W&B user or team (W&B's default entity when None).
        delivery: "process": a child process (`python -m tracktrain.loggers.sender_child`, started at the first
            delivery) attaches to this run with `wandb.attach` and does W&B's per-row work (encoding each row, handing
            it to W&B's service), so it never competes with training for this process's GIL; its terminal output is
            silenced (WANDB_SILENT): W&B's messages about the run come from this process. The child also writes the
            run's requirements.txt (the installed packages), which `wandb.init` would otherwise read here at every
            start, unless `settings=` is passed to W&B. "thread": the background
            thread calls the run in this process (every-step logging then costs training a tenth to a quarter of its
            throughput on a small model). None (default): "process", or "thread" with `watch`, whose histograms
            join the row W&B holds open, which must then be the step being trained (and with mode="disabled").
        flush_timeout, close_timeout, max_pending: see `QueuedLogger`.
        **init_kwargs: more arguments for `wandb.init` (group, job_type, notes, settings, ...).
    """

    tracker = "wandb"

    def __init__(
        self,
        project: str = "tracktrain",
        name: str | None = None,
        id: str | None = None,  # noqa: A002 - W&B's own name for it
        resume: str | None = None,
        mode: str | None = None,
        config: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        log_checkpoints: bool = False,
        watch: str | None = None,
        watch_log_freq: int = 100,
        save_dir: str | os.PathLike | None = None,
        entity: str | None = None,
        flush_timeout: float = 0.0,
        close_timeout: float | None = None,
        max_pending: int = 10_000,
        delivery: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        if delivery == "process" and watch is not None:
            raise ValueError(
                f"WandbLogger(watch={watch!r}) logs histograms into the row W&B holds open, which only "
                "delivery='thread' keeps at the step being trained: pass delivery='thread' or None."
            )
        # Records gather for a moment into one delivery round (each round is a run.log per step), except with
        # watch(): its histograms join W&B's open row, which must then still be the step being trained.
        super().__init__(
            flush_timeout=flush_timeout,
            close_timeout=close_timeout,
            max_pending=max_pending,
            linger=0.0 if watch is not None else 0.2,
            delivery=delivery or ("thread" if watch is not None else "process"),
        )
        self._wandb = _import_wandb()
        check_choice("mode", mode, MODES)
        check_choice("watch", watch, WATCH_MODES)
        check_choice("resume", resume, RESUME_MODES)
        unknown = set(init_kwargs) - set(inspect.signature(self._wandb.init).parameters)
        if unknown:
            raise TypeError(
                f"WandbLogger got arguments wandb.init does not take: {sorted(unknown)}; see "
                f"help(wandb.init) for the ones it does."
            )
        self.project = project
        self.run_name = name if name is not None else default_run_name(project or "tracktrain")
        self.resume_mode = resume
        self.mode = mode
        self.config = dict(config) if config is not None else None
        self.tags = [checked_tag(tag) for tag in tags] if tags is not None else None
        self.log_checkpoints = log_checkpoints  # read by the Trainer's LoggerBridge
        self.watch = watch
        self.watch_log_freq = watch_log_freq
        self.save_dir = os.fspath(save_dir) if save_dir is not None else None
        self.entity = entity
        self.init_kwargs = init_kwargs
        self._run_id = id
        self._run: Any = None
        self._watched: Any = None
        self._wait_for_rows = True  # with watch: publishing waits for its row (until one wait times out)
        self._step = 0  # the oldest step W&B still takes: the latest one logged (its row is open)
        self._attached = False  # in a sender child: the run is this process's view of the training process's run
        self._requirements_by_child = False  # set by `_open`: the sender child writes the run's requirements.txt
        self._skipped_reported = 0  # in a sender child: skipped records the training process was told of
        self.resolved_save_dir: str | None = None  # save_dir, or what it defaulted to
        self.run_dir: str | None = None  # this run's folder under `<save_dir>/wandb/`
        self.skipped_records = 0  # metrics at a step older than one already logged, which W&B cannot take

    # ------------------------------------------------------------------------------------------ the run
    @property
    def experiment(self) -> Any:
        """The `wandb.Run` (after `start`), for anything this logger does not forward (Lightning's
        `self.logger.experiment.log({...})`)."""
        return self._require_run()

    @property
    def name(self) -> str | None:
        """Lightning's: the project's name."""
        return self.project

    @property
    def version(self) -> str | None:
        """Lightning's: the run's id."""
        return self.run_id

    def watch_module(self, module: Any) -> None:
        """Log `module`'s gradient and/or parameter histograms with `wandb.watch`, as `watch=` asks (nothing when
        it is None). Call it after `start` with the LoopModule: the LoggerBridge does at fit start. The histograms
        join the history row of the latest step published (while watching, publishing a step waits for its row to
        be open in W&B); the hooks are removed when the run ends."""
        if self.watch is None:
            return
        self._require_run().watch(module, log=self.watch, log_freq=self.watch_log_freq)
        self._watched = module
        self._wait_for_rows = True

    def _open(self, root_dir: str) -> str:
        save_dir = os.path.abspath(self.save_dir or os.environ.get("WANDB_DIR") or storage.local_dir(root_dir))
        os.makedirs(save_dir, exist_ok=True)
        resume = self.resume_mode or ("allow" if self._run_id is not None else None)
        # W&B's init reads the metadata of every installed package for the run's requirements.txt: 0.1-0.2 s of this
        # process's CPU at every start. With a sender child, the child writes that file instead (unless the caller
        # passes W&B settings of their own, which are then left as they are)
        self._requirements_by_child = self.delivery == "process" and "settings" not in self.init_kwargs
        deferred = {"settings": self._wandb.Settings(x_save_requirements=False)} if self._requirements_by_child else {}
        try:
            run = self._wandb.init(
                project=self.project,
                entity=self.entity,
                name=self.run_name,
                id=self._run_id,
                resume=resume,
                mode=self.mode,
                config=self.config,
                tags=self.tags,
                dir=save_dir,
                # our run leaves other runs of this process alone, except with `watch`: W&B's torch hooks log to
                # the process's current run (`wandb.run`), which only a run that finishes the others becomes
                reinit="finish_previous" if self.watch else "create_new",
                **deferred,
                **self.init_kwargs,
            )
        except Exception as error:
            raise RuntimeError(
                f"W&B could not start the run (project={self.project!r}, id={self._run_id!r}, mode={self.mode!r}): "
                f"{error}. Log in with `wandb login`, or log offline with WandbLogger(mode='offline') or "
                f"WANDB_MODE=offline and upload later with `wandb sync`."
            ) from error
        self._run = run
        if getattr(run, "disabled", False):
            self.delivery = "thread"  # W&B's no-op run (mode="disabled"): nothing for a child to attach to
        self.resolved_save_dir = save_dir
        self.run_dir = run.settings.sync_dir
        self._step = run.starting_step  # a resumed online run already holds the steps before this one
        return run.id

    def _close(self, status: str) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        if self._watched is not None:
            run.unwatch(self._watched)
            self._watched = None
        run.summary["tracktrain/status"] = status  # W&B itself only tells finished from failed
        if self.skipped_records:
            warnings.warn(
                f"{self.skipped_records} metric records for W&B run {run.id} were not logged: their step was older "
                f"than one already logged, and W&B's step axis only grows.",
                stacklevel=3,
            )
        run.finish(exit_code=EXIT_CODES[status])

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        # JSON values from the start: W&B's config takes nothing else, and nor does the spill file
        self._put(Record("params", json_safe(flatten_params(params))))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Queue `metrics` at `step` (the Trainer's global step; None, as Lightning allows: the latest logged)."""
        if step is None:
            step = self._step
        super().log_metrics(metrics, step)
        if self._watched is not None and self._wait_for_rows:
            # W&B's hooks log each histogram, from this thread, into the row open at that moment: this step's row
            # must be open before the next backward pass, or a delivery thread running behind (a busy machine) lets
            # the histograms of several steps fall into one row, each overwriting the last. A tracker that does not
            # answer costs this wait once: training never waits on it again (the histograms may then share rows).
            if not self.flush(WATCH_DELIVERY_TIMEOUT):
                self._wait_for_rows = False
                _logger.warning(
                    "W&B run %s: the values of step %d were not delivered within %.0f s; training no longer waits for "
                    "them, so the gradient histograms of the next steps may share one row",
                    self._run_id,
                    step,
                    WATCH_DELIVERY_TIMEOUT,
                )

    # ---------------------------------------------------------------------------- the delivery thread
    def _send(self, records: list[Record]) -> None:
        run = self._require_run()
        step = self._step  # committed below only once the whole batch is in: a retried batch starts over
        row: dict[str, Any] = {}
        stale: list[int] = []
        for record in records:
            if record.kind == "metrics":
                record_step = step if record.step is None else int(record.step)
                if record_step < step:
                    stale.append(record_step)
                    continue
                if row and record_step != step:
                    run.log(row, step=step)  # no commit: a later record at this step still joins this row
                    row = {}
                row.update(record.payload)
                step = record_step
            elif record.kind == "params":
                run.config.update(record.payload, allow_val_change=True)
            elif record.kind == "tags":
                self._add_tags(run, record.payload)
            elif record.kind == "artifact":
                self._log_artifact(run, record, step)
        if row:
            run.log(row, step=step)
        if self._attached:
            # a round trip to W&B's service: once it answers, the rows above are in its hands, ahead of anything the
            # training process sends after our answer (its run.finish comes through another connection)
            dict(run.summary)
        self._step = step
        if stale:
            self.skipped_records += len(stale)
            _logger.warning(
                "W&B run %s: %d metric records at steps %s not logged: W&B already holds step %d and its step axis "
                "only grows",
                run.id,
                len(stale),
                sorted(set(stale)),
                step,
            )

    def _add_tags(self, run: Any, tags: Mapping[str, str]) -> None:
        new = [truncated_tag(f"{key}:{value}" if value else key) for key, value in tags.items()]
        run.tags = tuple(dict.fromkeys([*run.tags, *new]))

    def _log_artifact(self, run: Any, record: Record, step: int) -> None:
        local_path = record.payload["local_path"]
        artifact_path = record.payload.get("artifact_path")
        is_url = storage.is_remote(local_path)  # a reference to it, kept where it is
        if not is_url and not os.path.exists(local_path):
            if artifact_path == CHECKPOINT_ARTIFACTS:  # retention deleted it before its upload: not kept, as meant
                _logger.debug(
                    "W&B run %s: checkpoint %s was deleted by retention before its upload", run.id, local_path
                )
                return
            _logger.warning("W&B run %s: artifact %s no longer exists; not uploaded", run.id, local_path)
            return
        filename = os.path.basename(local_path.rstrip("/"))
        artifact = self._wandb.Artifact(
            name=re.sub(r"[^\w.-]", "-", f"{artifact_path or 'model'}-{run.id}"),
            type="model",
            # the checkpoint's own step: it may be announced after later rows were logged
            metadata={
                "global_step": step if record.step is None else int(record.step),
                "original_filename": filename,
                "source": local_path,
                "logged_at": record.timestamp,
            },
        )
        if is_url:
            artifact.add_reference(local_path, name=filename, checksum=False)  # kept where it is, not copied
        elif os.path.isdir(local_path):
            artifact.add_dir(local_path, name=filename)
        else:
            artifact.add_file(local_path, name=filename)
        run.log_artifact(artifact, aliases=["latest", f"step-{step}"])

    def _require_run(self) -> Any:
        if self._run is None:
            raise RuntimeError("WandbLogger has no open run: the Trainer starts it when fit begins.")
        return self._run

    # -------------------------------------------------------------------------------------------- replay
    def _spill_header(self) -> dict[str, Any]:
        return {
            **super()._spill_header(),
            "project": self.project,
            "entity": self.entity,
            "mode": self.mode,
            "save_dir": self.resolved_save_dir,
        }

    @classmethod
    def for_replay(cls, header: Mapping[str, Any]) -> WandbLogger:
        logger = cls(
            project=header["project"],
            entity=header.get("entity"),
            id=header["run_id"],
            mode=header.get("mode"),
            save_dir=header["save_dir"],
            delivery="thread",
        )
        logger._run_id = logger._open(header["save_dir"])
        return logger

    # -------------------------------------------------------------------------------- delivery="process"
    def _sender_header(self) -> dict[str, Any]:
        files_dir = self._run.settings.files_dir if self._requirements_by_child and self._run is not None else None
        return {**self._spill_header(), "step": self._step, "requirements_to": files_dir}

    @classmethod
    def for_sender(cls, header: Mapping[str, Any]) -> WandbLogger:
        """The training process's run, attached to through W&B's service (WANDB_SERVICE, in the environment)."""
        logger = cls(
            project=header["project"],
            entity=header.get("entity"),
            id=header["run_id"],
            mode=header.get("mode"),
            save_dir=header["save_dir"],
            delivery="thread",
        )
        logger._run = logger._wandb.attach(run_id=header["run_id"])
        logger._attached = True
        logger._step = header["step"]
        if header.get("requirements_to"):
            try:
                _save_requirements(logger._run, header["requirements_to"])
            except Exception as error:  # a file W&B shows beside the run: never a reason to hold its records back
                _logger.warning("W&B run %s: requirements.txt not saved (%s)", header["run_id"], error)
        return logger

    def _sender_environment(self) -> dict[str, str]:
        # W&B's own terminal lines in the child would repeat this process's, or warn about steps logged from another
        # process than the one that opened the run, which is here the point (only the child logs rows)
        return {"WANDB_SILENT": "true"}

    def _sender_report(self) -> dict[str, Any]:
        skipped, self._skipped_reported = self.skipped_records - self._skipped_reported, self.skipped_records
        return {"step": self._step, "skipped_records": skipped}

    def _take_sender_report(self, report: Mapping[str, Any]) -> None:
        self._step = max(self._step, report.get("step", self._step))
        self.skipped_records += report.get("skipped_records", 0)


def _save_requirements(run: Any, files_dir: str) -> None:
    """The run's requirements.txt, as W&B's init writes it (`name==version` per installed distribution), saved into
    the run from the sender child (see `WandbLogger._open`)."""
    from wandb.util import working_set

    path = os.path.join(files_dir, "requirements.txt")
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(f"{package.key}=={package.version}\n" for package in working_set())
    run.save(path, base_path=files_dir, policy="now")
