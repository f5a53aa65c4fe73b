"""Profiler: real fits profiled over a window of batches. The trace is valid Chrome JSON holding the model's ops from
that window only, the table names the top ops, both reach a tracker through the real delivery queue (and MLflow's
store), and no profiler is left running after the window, a fit too short for it, or an exception."""

from __future__ import annotations

import gc
import gzip
import json
import os
import weakref
from pathlib import Path

import pytest
import torch

from tests._file_tracker import FileTracker
from tracktrain import Callback, Trainer
from tracktrain.callbacks.profiler import Profiler
from tracktrain.distributed.collectives import spawn

from ..trainer._tasks import Classifier, make_loader, quiet


class ProfilerState(Callback):
    """After each training batch's end (after the Profiler, which runs first): whether torch's profiler is on."""

    def __init__(self) -> None:
        self.enabled: list[bool] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.enabled.append(torch.autograd._profiler_enabled())


class FailAtBatch(Callback):
    def __init__(self, batch: int) -> None:
        self.batch = batch

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.train_engine.state.iteration == self.batch:
            raise RuntimeError("failed on purpose")


def trace_events(path: str | Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as trace:
        return json.load(trace)["traceEvents"]


def names(events: list[dict]) -> list[str]:
    return [event["name"] for event in events if event.get("ph") == "X"]


def step_markers(events: list[dict]) -> list[str]:
    return sorted(name for name in names(events) if name.startswith("ProfilerStep#"))


def artifacts(target: Path) -> list[tuple[str, str, int]]:
    """(file name, artifact path, step) of every artifact the FileTracker received."""
    records = [json.loads(line) for line in target.read_text().splitlines()]
    return [
        (os.path.basename(record["local_path"]), record["artifact_path"], record["step"])
        for record in records
        if "local_path" in record
    ]


def fit(tmp_path: Path, profiler: Profiler, *callbacks: Callback, batches: int = 8) -> FileTracker:
    """A one-epoch fit of `batches` batches under tmp_path/root, tracked by a FileTracker (its file: tracker.jsonl)."""
    tracker = FileTracker(str(tmp_path / "tracker.jsonl"), linger=0.0)
    trainer = Trainer(**quiet(tmp_path / "root", max_epochs=1, loggers=[tracker], callbacks=[profiler, *callbacks]))
    trainer.fit(Classifier(), make_loader(n=8 * batches, batch_size=8))
    return tracker


@pytest.mark.parametrize("use_gzip", [False, True])
def test_the_window_is_traced_tabled_and_handed_to_the_tracker_then_the_profiler_is_gone(
    tmp_path, dist_logger, monkeypatch, use_gzip
):
    steps = []
    step = torch.profiler.profile.step
    monkeypatch.setattr(torch.profiler.profile, "step", lambda self: (steps.append(1), step(self))[1])
    profiler = Profiler(wait=1, warmup=1, active=3, use_gzip=use_gzip, logger=dist_logger)
    state = ProfilerState()
    fit(tmp_path, profiler, state)

    # batch 1 waits, batch 2 warms up (torch's profiler prepared, not on), batches 3-5 are recorded; then the
    # profiler is stopped and no longer stepped
    assert state.enabled == [False, True, True, True, False, False, False, False]
    assert len(steps) == 5 and not torch.autograd._profiler_enabled()

    directory = tmp_path / "root" / "profiler"  # the default: in the Trainer's root dir
    trace = directory / ("rank0.5.pt.trace.json" + (".gz" if use_gzip else ""))
    assert profiler.trace_paths == [str(trace)] and profiler.table_paths == [str(directory / "rank0.5.ops.txt")]
    assert sorted(os.listdir(directory)) == sorted([trace.name, "rank0.5.ops.txt"])
    events = trace_events(trace)
    # the model's ops, from the three recorded batches only (one forward addmm each): none of warmup's, none after
    assert names(events).count("aten::addmm") == 3 and "aten::linear" in names(events)
    assert step_markers(events) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]

    table = (directory / "rank0.5.ops.txt").read_text()
    assert table.startswith("Profiler: rank 0, training batches 3-5 (global step 5), sorted by self_cpu_time_total")
    assert "Self CPU" in table and "aten::addmm" in table and "Optimizer.step#SGD.step" in table
    logged = (tmp_path / "logs" / "rank_0.log").read_text()
    assert "training batches 3-5" in logged and "aten::addmm" in logged

    assert artifacts(tmp_path / "tracker.jsonl") == [(trace.name, "profiler", 5), ("rank0.5.ops.txt", "profiler", 5)]


def test_each_window_of_a_repeated_schedule_is_a_trace_of_its_own(tmp_path):
    state = ProfilerState()
    profiler = Profiler(wait=0, warmup=1, active=2, repeat=2, row_limit=3)
    fit(tmp_path, profiler, state)

    # batch 1 warms up, 2-3 are recorded, 4 warms up, 5-6 are recorded, then nothing
    assert state.enabled == [True, True, False, True, True, False, False, False]
    directory = tmp_path / "root" / "profiler"
    assert profiler.trace_paths == [str(directory / "rank0.3.pt.trace.json"), str(directory / "rank0.6.pt.trace.json")]
    first, second = (trace_events(path) for path in profiler.trace_paths)
    assert names(first).count("aten::addmm") == 2 and names(second).count("aten::addmm") == 2
    assert step_markers(first) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert step_markers(second) == ["ProfilerStep#4", "ProfilerStep#5"]
    table = (directory / "rank0.6.ops.txt").read_text().splitlines()
    assert table[0].startswith("Profiler: rank 0, training batches 5-6")
    assert len([line for line in table if "  " in line and not line.startswith("-")]) == 1 + 3  # header + row_limit
    assert [name for name, _, _ in artifacts(tmp_path / "tracker.jsonl")] == [
        "rank0.3.pt.trace.json",
        "rank0.3.ops.txt",
        "rank0.6.pt.trace.json",
        "rank0.6.ops.txt",
    ]


class ProfiledClassifier(Classifier):
    """A module that brings its own profiler (`configure_callbacks`): it joins the callbacks after those given."""

    def __init__(self, profiler: Profiler) -> None:
        super().__init__()
        self.profiler = profiler

    def configure_callbacks(self):
        return [self.profiler]


def test_a_window_open_at_the_fits_end_reaches_the_trackers_also_from_the_modules_own_profiler(tmp_path):
    """The trackers' runs close after every callback's `on_fit_end`: the Trainer's own work, last, whatever the
    callbacks' order (a module's callbacks come after the Trainer's)."""
    profiler = Profiler(wait=1, warmup=1, active=50)  # still recording when the fit ends: written at its end
    tracker = FileTracker(str(tmp_path / "tracker.jsonl"), linger=0.0)
    trainer = Trainer(**quiet(tmp_path / "root", max_epochs=1, loggers=[tracker]))
    trainer.fit(ProfiledClassifier(profiler), make_loader(n=64, batch_size=8))
    assert artifacts(tmp_path / "tracker.jsonl") == [
        ("rank0.8.pt.trace.json", "profiler", 8),
        ("rank0.8.ops.txt", "profiler", 8),
    ]
    assert (tmp_path / "tracker.status").read_text() == "FINISHED"


def test_an_exception_inside_the_window_stops_the_profiler_and_keeps_what_it_recorded(tmp_path):
    profiler = Profiler(wait=1, warmup=1, active=3)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        fit(tmp_path, profiler, FailAtBatch(4))

    assert not torch.autograd._profiler_enabled()
    (trace,) = profiler.trace_paths
    assert os.path.basename(trace) == "rank0.4.pt.trace.json"
    assert names(trace_events(trace)).count("aten::addmm") == 2  # batches 3 and 4
    # handed over before the run was marked failed (the runs end after every on_exception hook)
    assert artifacts(tmp_path / "tracker.jsonl") == [
        ("rank0.4.pt.trace.json", "profiler", 4),
        ("rank0.4.ops.txt", "profiler", 4),
    ]
    assert (tmp_path / "tracker.status").read_text() == "FAILED"


def test_a_fit_that_ends_before_the_window_says_so_and_leaves_no_profiler(tmp_path):
    profiler = Profiler(wait=1, warmup=1, active=3)
    with pytest.warns(RuntimeWarning, match=r"Profiler recorded nothing: the fit ran 2 training batches.*batch 3"):
        fit(tmp_path, profiler, batches=2)
    assert not torch.autograd._profiler_enabled()
    assert profiler.trace_paths == [] and not (tmp_path / "root" / "profiler").exists()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"active": 0}, ValueError, r"Profiler\(active=...\) must be a positive int \(training batches\), got 0"),
        ({"repeat": 0}, ValueError, r"Profiler\(repeat=...\) must be a positive int"),
        ({"wait": -1}, ValueError, r"Profiler\(wait=...\) must be an int >= 0 \(training batches\), got -1"),
        ({"warmup": 1.5}, ValueError, r"Profiler\(warmup=...\) must be an int >= 0"),
        ({"skip_first": True}, ValueError, r"Profiler\(skip_first=...\) must be an int >= 0"),
        ({"row_limit": 0}, ValueError, r"Profiler\(row_limit=...\) must be a positive int"),
        (
            {"sort_by": "cpu"},
            ValueError,
            r"Profiler\(sort_by=...\) must be one of \(.*'self_cpu_time_total'.*got 'cpu'",
        ),
        ({"dirpath": "memory://profiles"}, ValueError, r"must be a local directory .*got 'memory://profiles'"),
        ({"dirpath": 3}, TypeError, r"Profiler\(dirpath=...\) takes a local directory \(str or path\), got 3"),
        ({"logger": "stdout"}, TypeError, r"Profiler\(logger=...\) takes a DistributedLogger"),
    ],
)
def test_bad_arguments_are_refused_naming_the_value_and_the_fix(options, error, message):
    with pytest.raises(error, match=message):
        Profiler(**options)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_trace_holds_the_gpu_kernels(tmp_path):
    profiler = Profiler(wait=1, warmup=1, active=2)
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, accelerator="cuda", callbacks=[profiler]))
    trainer.fit(Classifier(), make_loader())
    (trace,) = profiler.trace_paths
    events = trace_events(trace)
    assert any(event.get("cat") == "kernel" for event in events)  # CUDA activity: kernels run on the device
    assert "aten::addmm" in names(events) and not torch.autograd._profiler_enabled()


# ------------------------------------------------------------------------------------------------------- DDP
def _fit_ddp(out: str) -> None:
    tracker = FileTracker(os.path.join(out, "tracker.jsonl"), linger=0.0)
    profiler = Profiler(wait=1, warmup=1, active=2, dirpath=os.path.join(out, "traces"))
    trainer = Trainer(
        **quiet(out, max_epochs=1, strategy="ddp", loggers=[tracker], callbacks=[profiler], accelerator="cpu")
    )
    trainer.fit(Classifier(), make_loader(n=64, batch_size=8))  # 4 batches per rank
    assert not torch.autograd._profiler_enabled()


@pytest.mark.distributed
@pytest.mark.slow  # ~15 s: two processes and a gloo group
@pytest.mark.timeout(120)
def test_under_ddp_every_rank_writes_its_trace_and_rank_zero_alone_hands_files_to_trackers(tmp_path):
    spawn(_fit_ddp, 2, args=(str(tmp_path),))
    traces = tmp_path / "traces"
    assert sorted(os.listdir(traces)) == [
        "rank0.4.ops.txt",
        "rank0.4.pt.trace.json",
        "rank1.4.ops.txt",
        "rank1.4.pt.trace.json",
    ]
    for rank in (0, 1):
        assert names(trace_events(traces / f"rank{rank}.4.pt.trace.json")).count("aten::addmm") == 2
    assert artifacts(tmp_path / "tracker.jsonl") == [
        ("rank0.4.pt.trace.json", "profiler", 4),
        ("rank0.4.ops.txt", "profiler", 4),
    ]


# ---------------------------------------------------------------------------------------------------- MLflow
@pytest.mark.slow
def test_the_files_reach_an_mlflow_run(tmp_path, monkeypatch):
    tracking = pytest.importorskip("mlflow.tracking")
    from tracktrain_integrations.mlflow import MLflowLogger

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns: never the repository's
    logger = MLflowLogger()
    trainer = Trainer(**quiet(tmp_path / "root", max_epochs=1, loggers=[logger], callbacks=[Profiler()]))
    trainer.fit(Classifier(), make_loader())

    client = tracking.MlflowClient(logger.tracking_uri)
    listed = sorted(artifact.path for artifact in client.list_artifacts(logger.run_id, "profiler"))
    assert listed == ["profiler/rank0.5.ops.txt", "profiler/rank0.5.pt.trace.json"]
    local = client.download_artifacts(logger.run_id, "profiler/rank0.5.pt.trace.json", str(tmp_path / "down"))
    assert "aten::addmm" in names(trace_events(local))


def test_a_profiler_kept_after_its_fit_does_not_keep_the_trainer_alive(tmp_path):
    profiler = Profiler(wait=0, warmup=1, active=1)
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, callbacks=[profiler]))
    trainer.fit(Classifier(), make_loader())
    collected = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert collected() is None and len(profiler.trace_paths) == 1
