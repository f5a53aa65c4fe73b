"""Fixtures for the whole suite: a real S3 API (moto's server on 127.0.0.1), reached by s3fs the way users reach
S3, through the AWS_* environment variables."""

from __future__ import annotations

import logging
import os
import uuid
import warnings
from collections.abc import Iterator

import pytest
import torch

from tests import _processes

# Every process group a test starts (spawn, torchrun, in this process or its children) fails a collective that waits
# this long, each rank with its own stack: a hang fails in a minute, not at CI's limit. Python's fault handler prints
# every thread's stack if a process is aborted.
os.environ.setdefault("TRACKTRAIN_DIST_TIMEOUT", "60")
# A tracker's delivery at the end of a run gets a minute, not the default 10 s: on a loaded machine a sender child
# takes seconds to start, and tests of what is delivered must not fail on that (tests of the bound set their own)
os.environ.setdefault("TRACKTRAIN_TRACKER_CLOSE_TIMEOUT", "60")
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
# tracktrain.distributed.spawn forks the tests' ranks from a server that imported torch once per pytest process,
# instead of starting each from scratch (tests/test_spawn.py runs both ways).
os.environ.setdefault("TRACKTRAIN_START_METHOD", "forkserver")
# The tests' models are tiny and pytest-xdist already runs one worker per core: one intra-op thread per process
# (this one and every child it starts) instead of each one's OpenMP threads spinning against the others'.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# ------------------------------------------------------------------------- no test waits for a hang, none leaves one
# Every process a test starts (spawn's ranks, torchrun and its ranks, any subprocess) is the test's: when the test
# fails (pytest-timeout's "Timeout" included) the ones still running print their Python stacks into the failure and
# are killed; when it ends, whatever it left is killed. tests/_processes.py finds them through /proc, by parentage
# and by the marker each inherits (TRACKTRAIN_TEST_ID), and runs commands with a deadline (`Command`, `run`).
_WATCH = pytest.StashKey[_processes.Watch]()


@pytest.fixture
def without_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without the tensorboard package, for the Trainer's choice of its default logger (Lightning's:
    TensorBoard's where installed, else a CSVLogger): the tests that read the CSV logger's files by default."""
    from tracktrain.trainer import defaults

    monkeypatch.setattr(defaults, "tensorboard_installed", lambda: False)


@pytest.fixture(autouse=True)
def _no_global_seed_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """`seed_everything` (ours and Lightning's, an oracle here) records its seed in PL_GLOBAL_SEED, which a Trainer
    without `seed=` then takes: a test's call must not decide the next test's seed."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)


@pytest.fixture(autouse=True)
def _no_torch_flag_outlives_its_test() -> Iterator[None]:
    """`Trainer(deterministic=..., benchmark=...)` sets torch's global flags, as Lightning's does: a test's Trainer
    must not make the next test's kernels strict."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark = benchmark


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Notes the processes running before the test (set up after the session's and modules' fixtures, so their
    servers are not the test's) and marks the environment its processes inherit; at its end (after the test's
    other fixtures have stopped theirs), kills whatever the test started that still runs, with a warning."""
    watch = _processes.Watch()
    request.node.stash[_WATCH] = watch
    before = os.environ.get(_processes.TEST_MARKER)
    os.environ[_processes.TEST_MARKER] = watch.marker
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_processes.TEST_MARKER, None)
        else:
            os.environ[_processes.TEST_MARKER] = before
        left = sorted(watch.leftovers())
        if left:
            names = "; ".join(_processes.describe(pid) for pid in left)
            watch.stop(dump=False)
            warnings.warn(
                f"{request.node.nodeid} left {len(left)} process(es) running, killed: {names}",
                pytest.PytestWarning,
                stacklevel=1,
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed test's processes that still run (a rank stuck in a collective, a launcher waiting for it) print
    their stacks into its report, then are killed: before the teardown, so no fixture waits on them."""
    report = yield
    watch = item.stash.get(_WATCH, None)
    if call.when == "call" and report.failed and watch is not None and watch.leftovers():
        capture = item.config.pluginmanager.getplugin("capturemanager")

        def read_captured() -> str:  # a spawned rank writes its stack to the test's own (captured) stderr
            try:
                out, err = capture.read_global_capture()
            except Exception:  # no capture (-s): the stacks went to the terminal
                return ""
            return out + err

        stacks = watch.stop(read_captured if capture is not None else None)
        title = "processes the test left running: each one's Python stack, then killed"
        if hasattr(report.longrepr, "addsection"):
            report.longrepr.addsection(title, stacks)
        else:
            report.sections.append((title, stacks))
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After the session's fixtures stopped their servers: nothing started by a test outlives pytest (a process
    started by a module fixture, say, that hung). multiprocessing's own helpers end with this process."""
    table = _processes.process_table()
    left = {
        pid
        for pid in _processes.descendants(os.getpid(), table)
        if table[pid][1] not in "ZX" and not _processes.shared_helper(pid)
    }
    if left:
        names = "; ".join(_processes.describe(pid) for pid in sorted(left))
        _processes.stop(lambda: left, dump=False)
        reporter = session.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"killed {len(left)} process(es) left running at the end of the session: {names}")


# The fake credentials every test reaches moto with. Distinctive, so that a test can assert they appear nowhere.
S3_ACCESS_KEY_ID = "tracktrain-test-key-id"
S3_SECRET = "tracktrain-test-secret-never-stored"
S3_REGION = "us-east-1"

# Variables that would send s3fs elsewhere or sign with other credentials than the fixture's.
_AWS_OVERRIDES = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


@pytest.fixture(scope="session")
def s3_secret() -> str:
    """The secret key of the fake credentials, for tests that assert it appears nowhere."""
    return S3_SECRET


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """`http://127.0.0.1:<port>` of moto's S3 server, started once per session and stopped at its end (importing
    moto.server takes 0.3-1 s, starting and stopping its thread milliseconds and 0.5 s). Skips the test when s3fs
    or moto is not installed."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not one log line per request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_admin(s3_endpoint: str):
    """An S3FileSystem on moto's server built from explicit options, so that it works whatever a test does to the
    environment, and kept out of fsspec's instance cache, so that no test is handed it."""
    from s3fs import S3FileSystem

    return S3FileSystem(key=S3_ACCESS_KEY_ID, secret=S3_SECRET, endpoint_url=s3_endpoint, skip_instance_cache=True)


@pytest.fixture
def s3_bucket(s3_endpoint: str, s3_admin, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`s3://<bucket>`: a new, empty bucket on the session's moto server, deleted with its content afterwards.

    AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION point at the server for the
    test's duration; they are set in os.environ, so that subprocesses the test starts reach the same bucket.
    """
    from s3fs import S3FileSystem

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", S3_REGION)
    for variable in _AWS_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    for variable in ("NO_PROXY", "no_proxy"):  # a proxy configured for the internet must not carry these requests
        monkeypatch.setenv(variable, ",".join(filter(None, [os.environ.get(variable), "127.0.0.1"])))
    # fsspec caches S3FileSystem instances by their arguments, not by the environment they were built in: one
    # made for another test's endpoint or credentials would be handed out again.
    S3FileSystem.clear_instance_cache()
    bucket = f"tracktrain-test-{uuid.uuid4().hex[:12]}"
    s3_admin.mkdir(bucket)
    try:
        yield f"s3://{bucket}"
    finally:
        S3FileSystem.clear_instance_cache()
        s3_admin.rm(bucket, recursive=True)


# ------------------------------------------------------------------------------------------------ the smoke tier
# `pytest -m smoke`: every feature once, in about a minute — the contributor's loop between edits. One place lists it,
# feature by feature; the default run holds all of these and more (`pytest`), `-m slow` the long proofs.
SMOKE = {
    "engine: Ignite's event order": "engine/test_engine.py::test_event_order_of_a_plain_run",
    "engine: resumable data order": "engine/test_deterministic.py::test_every_pass_is_reseeded_and_the_seed_decides_the_order",
    "supervised step and accumulation": "engine/test_supervised.py::test_gradient_accumulation_equals_one_step_on_the_concatenated_batch",
    "ModelEngine (Colossal-AI)": "engine/test_model_engine.py::test_step_runs_gradient_handlers_then_clipping_then_the_optimizer",
    "metrics": "metrics/test_accuracy.py::test_multiclass_is_the_fraction_of_argmax_hits",
    "Ignite Checkpoint": "handlers/test_checkpoint.py::test_filenames_metadata_and_payload_match_ignite[best-True-acc-True-True-True]",
    "Ignite EarlyStopping": "handlers/test_early_stopping.py::test_counts_evaluations_without_improvement_and_resets_on_improvement",
    "async checkpoint writes": "handlers/test_async_saver.py::test_through_a_real_saver_the_checkpoint_is_committed_with_its_manifest",
    "fsspec storage": "test_storage.py::test_write_read_list_remove_round_trip[memory]",
    "Trainer hooks map to events": "trainer/test_hooks.py::test_every_hook_maps_to_exactly_one_event",
    "Trainer logging": "trainer/test_logging.py::test_step_values_are_published_every_n_steps_at_their_step",
    "accumulation, clipping, schedulers": "trainer/test_optimization.py::test_accumulation_equals_the_large_batch",
    "mixed precision": "trainer/test_precision.py::test_mixed_precision_lands_where_fp32_does[bf16-mixed]",
    "ModelCheckpoint top-k": "trainer/test_checkpointing.py::test_top_k_by_a_monitored_metric",
    "exact resume": "trainer/test_resume.py::test_resume_auto_starts_fresh_then_continues_bit_identical",
    "fast_dev_run": "trainer/test_quick_checks.py::test_fast_dev_run_runs_n_batches_of_each_stage_and_leaves_nothing_behind",
    "compile": "trainer/test_compile.py::test_model_engine_compiles_its_model_in_place",
    "DDP (2 gloo processes)": "trainer/test_ddp.py::test_ranks_stay_identical_and_equal_one_process_on_the_full_batch[2]",
    "FSDP2 (2 gloo processes)": "trainer/test_fsdp.py::test_ranks_hold_shards_and_train_what_one_process_trains_on_the_full_batch[2]",
    "pipeline in one process": "trainer/test_pipeline_strategy.py::test_a_pipeline_module_trains_in_one_process_with_the_same_names",
    "callbacks: EarlyStopping": "callbacks/test_early_stopping.py::test_stops_after_patience_checks_without_improvement[min-0.0-2-script0-3]",
    "callbacks: EMA": "callbacks/test_weight_averaging.py::test_ema_is_the_hand_computed_ema_of_the_weights_after_each_optimizer_step[2]",
    "CSV logger": "test_loggers.py::test_csv_logger_is_the_default_and_holds_every_published_value",
    "MLflow": "integrations/test_mlflow.py::test_the_default_is_an_embedded_sqlite_file_in_the_root_dir_holding_the_whole_run[thread]",
    "W&B": "integrations/test_wandb.py::test_values_hyperparameters_and_tags_are_read_back_from_the_offline_run",
    "LR finder": "tuning/test_lr_finder.py::test_exponential_sweep_runs_from_min_lr_to_max_lr",
    "export": "test_export.py::test_a_module_is_exported_in_eval_mode_loaded_back_and_gives_its_outputs_at_any_batch_size",
    "the command line": "test_cli.py::test_inspect_says_what_a_checkpoint_holds_and_that_it_is_complete",
    "the template": "template/test_generate.py::test_the_root_index_and_the_template_directory_generate_the_same_project",
    "Colossal-AI trainer": "colossal/test_seed_example.py::test_seed_example_runs_as_written",
    "layers and import contracts": "test_architecture.py::test_layers_import_downwards_only",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests `SMOKE` names with `smoke`. A name that no longer matches a test of its file (a test renamed
    or its parameters changed) fails the collection of that file, so the tier cannot lose a feature silently."""
    wanted = set(SMOKE.values())
    collected = {item.nodeid.removeprefix("tests/") for item in items}
    files = {nodeid.split("::")[0] for nodeid in collected}
    lost = sorted(nodeid for nodeid in wanted - collected if nodeid.split("::")[0] in files)
    whole_files = not any("::" in argument for argument in config.args)  # not when single tests were asked for
    if lost and whole_files:
        raise pytest.UsageError(f"tests/conftest.py's SMOKE names tests that do not exist (renamed?): {lost}")
    for item in items:
        if item.nodeid.removeprefix("tests/") in wanted:
            item.add_marker(pytest.mark.smoke)
