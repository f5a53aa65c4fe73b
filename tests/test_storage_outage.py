"""An object store that is hung, stopped or refuses the credentials: resume fails within the bounded time, with one
message naming the URL, the endpoint, what was tried and the fix. Real sockets: a server that accepts connections
and never answers (hung), a port nothing listens on (stopped), and moto's S3 server without credentials."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer

s3fs = pytest.importorskip("s3fs")


@pytest.fixture
def hung_endpoint() -> Iterator[str]:
    """`http://127.0.0.1:<port>` of a server that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


@pytest.fixture
def stopped_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed: nothing listens there now


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Short, bounded tries; no credentials or config from this machine; a fresh s3fs client per test."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_READ_TIMEOUT", "1")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_ATTEMPTS", "2")
    s3fs.S3FileSystem.clear_instance_cache()
    yield monkeypatch
    s3fs.S3FileSystem.clear_instance_cache()


def resume_at(root: str) -> tuple[BaseException, float]:
    trainer = Trainer(max_epochs=1, enable_progress_bar=False, default_root_dir=root, loggers=False, resume="auto")
    started = time.monotonic()
    with pytest.raises(OSError) as caught:
        trainer.fit(Classifier(), make_loader())
    return caught.value, time.monotonic() - started


def test_a_hung_store_fails_resume_in_bounded_time_with_the_endpoint_and_the_fix(aws, hung_endpoint):
    aws.setenv("AWS_ENDPOINT_URL", hung_endpoint)
    aws.setenv("AWS_ACCESS_KEY_ID", "key-id")
    aws.setenv("AWS_SECRET_ACCESS_KEY", "secret-value-never-shown")
    error, seconds = resume_at("s3://bucket/run")
    assert isinstance(error, TimeoutError), repr(error)
    message = str(error)
    assert message.startswith(
        "Cannot resume from s3://bucket/run/checkpoints: listing its checkpoints failed with ReadTimeoutError"
    ), message
    assert "No answer after 2 tries of at most 1 s to connect and 1 s to answer" in message
    assert f"AWS_ENDPOINT_URL is {hung_endpoint}" in message
    assert "secret-value-never-shown" not in message
    assert error.__cause__ is not None  # the client's own error, below ours
    assert seconds < 20, seconds  # 2 tries of 1 s and a backoff; botocore's defaults took 7 minutes


def test_a_stopped_store_fails_resume_at_once_saying_where_it_tried(aws, stopped_endpoint):
    aws.setenv("AWS_ENDPOINT_URL", stopped_endpoint)
    aws.setenv("AWS_ACCESS_KEY_ID", "key-id")
    aws.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    error, seconds = resume_at("s3://bucket/run")
    assert isinstance(error, ConnectionError), repr(error)
    assert (
        "Cannot resume from s3://bucket/run/checkpoints: listing its checkpoints failed with "
        "EndpointConnectionError" in str(error)
    )
    assert f"Check AWS_ENDPOINT_URL (AWS_ENDPOINT_URL is {stopped_endpoint})" in str(error)
    assert seconds < 20, seconds


def test_missing_credentials_name_the_variables_to_set(aws, s3_endpoint):
    aws.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    aws.delenv("AWS_ACCESS_KEY_ID", raising=False)
    aws.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    error, seconds = resume_at("s3://bucket/run")
    assert isinstance(error, PermissionError), repr(error)
    assert "listing its checkpoints failed with NoCredentialsError" in str(error)
    assert "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(error)
