"""Fixtures for the whole suite: a real S3 API (moto's server on 127.0.0.1), reached by s3fs the way users reach
S3, through the AWS_* environment variables."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest

# Every process group a test starts (spawn, torchrun, in this process or its children) fails a collective that waits
# this long, each rank with its own stack: a hang fails in a minute, not at CI's limit. Python's fault handler prints
# every thread's stack if a process is aborted.
os.environ.setdefault("TRACKTRAIN_DIST_TIMEOUT", "60")
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

# The fake credentials every test reaches moto with. Distinctive, so that a test can assert they appear nowhere.
S3_ACCESS_KEY_ID = "tracktrain-test-key-id"
S3_SECRET = "tracktrain-test-secret-never-stored"
S3_REGION = "us-east-1"

# Variables that would send s3fs elsewhere or sign with other credentials than the fixture's.
_AWS_OVERRIDES = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


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
