"""Fixtures for the whole suite: a real S3 API (moto's server on 127.0.0.1), reached by s3fs the way users reach
S3, through the AWS_* environment variables."""

from __future__ import annotations

import logging
import os
import uuid
import warnings
from collections.abc import Iterator

import pytest

from tests import _processes

# Every process group a test starts (spawn, torchrun, in this process or its children) fails a collective that waits
# this long, each rank with its own stack: a hang fails in a minute, not at CI's limit. Python's fault handler prints
# every thread's stack if a process is aborted.
os.environ.setdefault("TRACKTRAIN_DIST_TIMEOUT", "60")
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


# ------------------------------------------------------------------------- no test waits for a hang, none leaves one
# Every process a test starts (spawn's ranks, torchrun and its ranks, any subprocess) is the test's: when the test
# fails (pytest-timeout's "Timeout" included) the ones still running print their Python stacks into the failure and
# are killed; when it ends, whatever it left is killed. tests/_processes.py finds them through /proc, by parentage
# and by the marker each inherits (TRACKTRAIN_TEST_ID), and runs commands with a deadline (`Command`, `run`).
_WATCH = pytest.StashKey[_processes.Watch]()


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
