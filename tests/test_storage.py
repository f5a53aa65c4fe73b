"""tracktrain.storage against real file systems: local directories, fsspec's memory://, and S3 (moto's server)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import fsspec
import pytest

from tracktrain import storage
from tracktrain.storage.check import check_writable
from tracktrain.storage.redaction import redact


@pytest.fixture
def memory_dir():
    url = f"memory://storage-test-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def test_open_filesystem_resolves_paths_and_urls(tmp_path, memory_dir):
    fs, path = storage.open_filesystem(tmp_path / "a.pt")
    assert storage.is_local(tmp_path) and path == str(tmp_path / "a.pt")
    assert storage.is_local(f"file://{tmp_path}")
    fs, path = storage.open_filesystem(f"{memory_dir}/a.pt")
    assert type(fs).__name__ == "MemoryFileSystem" and path.endswith("/a.pt")
    assert not storage.is_local(memory_dir)
    with pytest.raises(TypeError, match=r"path or an fsspec URL .* got int: 3"):
        storage.open_filesystem(3)


def test_local_dir_is_the_root_when_local_and_dot_tracktrain_otherwise(tmp_path, memory_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.local_dir("runs/exp1") == "runs/exp1"
    assert storage.local_dir(f"file://{tmp_path}/exp1") == f"{tmp_path}/exp1"  # a path, not a "file:" folder
    assert storage.local_dir(memory_dir) == storage.local_dir("s3://bucket/runs") == f"{tmp_path}/.tracktrain"


def test_join_keeps_the_protocol():
    assert storage.join("/runs/a", "x.pt") == "/runs/a/x.pt"
    assert storage.join(Path("/runs/a"), "x.pt") == "/runs/a/x.pt"
    assert storage.join("memory://runs", "x.pt") == "memory://runs/x.pt"
    assert storage.join("s3://bucket/runs/", "x.pt") == "s3://bucket/runs/x.pt"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_write_read_list_remove_round_trip(where, tmp_path, memory_dir):
    directory = str(tmp_path) if where == "local" else memory_dir
    storage.makedirs(directory)
    assert storage.isdir(directory)
    target = storage.join(directory, "b.pt")
    storage.write_bytes_atomic(target, b"first")
    storage.write_bytes_atomic(target, b"second, longer")  # replaces the whole file
    storage.write_bytes(storage.join(directory, "a.bin"), memoryview(b"in place"))
    assert storage.read_bytes(target) == b"second, longer"
    assert storage.read_bytes(storage.join(directory, "a.bin")) == b"in place"
    assert storage.exists(target)
    assert storage.listdir(directory) == ["a.bin", "b.pt"]

    storage.remove(target)
    assert not storage.exists(target)
    with pytest.raises(FileNotFoundError, match=r"No file at .*b\.pt to remove"):
        storage.remove(target)
    storage.remove(target, missing_ok=True)
    with pytest.raises(FileNotFoundError, match=r"No file at .*b\.pt"):
        storage.read_bytes(target)


def test_listdir_lists_only_files_and_reports_a_missing_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "z.pt").write_bytes(b"")
    (tmp_path / "sub" / "inner.pt").write_bytes(b"")
    assert storage.listdir(tmp_path) == ["z.pt"]
    with pytest.raises(FileNotFoundError, match="No directory at .*missing"):
        storage.listdir(tmp_path / "missing")


def test_atomic_write_into_a_missing_directory_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"the directory .*missing does not exist"):
        storage.write_bytes_atomic(tmp_path / "missing" / "a.pt", b"x")


def test_failed_commit_removes_the_temporary_file(tmp_path):
    # The final name is taken by a non-empty directory: the rename fails after all bytes were written.
    blocker = tmp_path / "a.pt"
    blocker.mkdir()
    (blocker / "keep").write_bytes(b"k")
    with pytest.raises(OSError):
        storage.write_bytes_atomic(blocker, b"x" * 1000)
    assert sorted(os.listdir(tmp_path)) == ["a.pt"]
    assert (blocker / "keep").read_bytes() == b"k"


def test_disk_full_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    """A write that fails part-way (here the file size limit, as a full disk would) changes nothing."""
    target = tmp_path / "a.pt"
    storage.write_bytes_atomic(target, b"old")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        with pytest.raises(OSError) as failure:
            storage.write_bytes_atomic(target, b"n" * (1024 * 1024))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert failure.value.errno == 27  # EFBIG: the write itself failed, part of the data was already written
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.pt"]


def test_object_store_round_trip(s3_bucket):
    directory = f"{s3_bucket}/run-{uuid.uuid4().hex[:8]}"
    storage.makedirs(directory)
    storage.write_bytes_atomic(storage.join(directory, "a.pt"), b"payload")
    storage.write_bytes_atomic(storage.join(directory, "b.pt"), b"other")
    assert storage.listdir(directory) == ["a.pt", "b.pt"]
    assert storage.read_bytes(storage.join(directory, "a.pt")) == b"payload"
    storage.remove(storage.join(directory, "a.pt"))
    assert storage.listdir(directory) == ["b.pt"]
    with pytest.raises(FileNotFoundError, match="No file at s3://"):
        storage.read_bytes(storage.join(directory, "a.pt"))


@pytest.fixture
def file_size_limit():
    """Writes past 64 KiB fail with EFBIG part-way through, as on a full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)


def _arrow_local_filesystem():
    """fsspec's Arrow wrapper (the one HDFS uses) over the local disk: its pipe_file streams into the final name."""
    pyarrow_fs = pytest.importorskip("pyarrow.fs")
    from fsspec.implementations.arrow import ArrowFSWrapper

    return ArrowFSWrapper(pyarrow_fs.LocalFileSystem())


def test_commit_strategy_per_file_system(tmp_path):
    s3fs = pytest.importorskip("s3fs")
    strategy = storage.atomic_commit_strategy
    assert strategy(storage.open_filesystem(tmp_path)[0]) is storage.AtomicCommit.REPLACE_LOCAL_FILE
    assert strategy(fsspec.filesystem("memory")) is storage.AtomicCommit.SINGLE_PUT
    assert strategy(s3fs.S3FileSystem(anon=True)) is storage.AtomicCommit.SINGLE_PUT  # constructing connects nowhere
    assert strategy(fsspec.filesystem("dir", path=str(tmp_path))) is storage.AtomicCommit.REPLACE_LOCAL_FILE
    over_memory = fsspec.filesystem("dir", path="/somewhere", fs=fsspec.filesystem("memory"))
    assert strategy(over_memory) is storage.AtomicCommit.SINGLE_PUT
    simplecache = storage.open_filesystem(f"simplecache::file://{tmp_path}/a.pt")[0]
    assert strategy(simplecache) is storage.AtomicCommit.MOVE_TEMPORARY  # its mv is the local rename it wraps
    assert strategy(_arrow_local_filesystem()) is storage.AtomicCommit.MOVE_TEMPORARY


def test_a_file_system_without_an_atomic_commit_is_refused_before_writing():
    # HTTP's mv is fsspec's copy-then-delete fallback; the refusal comes before any request is made.
    pytest.importorskip("aiohttp")
    with pytest.raises(NotImplementedError, match=r"not available on HTTPFileSystem .* atomic=False"):
        storage.write_bytes_atomic("http://127.0.0.1:9/a.pt", b"x")


def test_dir_file_system_over_a_local_disk_keeps_the_old_file_when_a_write_fails_mid_stream(tmp_path, file_size_limit):
    """DirFileSystem.pipe_file opens the final name and streams into it; the commit must go around it."""
    fs = fsspec.filesystem("dir", path=str(tmp_path))
    storage.write_file_atomic(fs, "a.pt", b"old")
    assert (tmp_path / "a.pt").read_bytes() == b"old"
    with pytest.raises(OSError) as failure:
        storage.write_file_atomic(fs, "a.pt", b"n" * (1024 * 1024))
    assert failure.value.errno == 27  # EFBIG: part of the data had been written when it failed
    assert (tmp_path / "a.pt").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.pt"]


def test_move_temporary_commit_keeps_the_old_file_when_a_write_fails_mid_stream(tmp_path, file_size_limit):
    fs = _arrow_local_filesystem()
    target = f"{tmp_path}/a.pt"
    storage.write_file_atomic(fs, target, b"old")
    with pytest.raises(OSError, match="File too large"):
        storage.write_file_atomic(fs, target, b"n" * (1024 * 1024))
    assert (tmp_path / "a.pt").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.pt"]


def test_move_temporary_commit_replaces_the_file_and_leaves_nothing_else(tmp_path):
    fs = _arrow_local_filesystem()
    storage.write_file_atomic(fs, f"{tmp_path}/a.pt", b"first")
    storage.write_file_atomic(fs, f"{tmp_path}/a.pt", memoryview(b"second, longer"))
    assert (tmp_path / "a.pt").read_bytes() == b"second, longer"
    # The same commit through a URL: a caching wrapper over the local disk.
    storage.write_bytes_atomic(f"simplecache::file://{tmp_path}/b.pt", b"cached")
    assert (tmp_path / "b.pt").read_bytes() == b"cached"
    assert sorted(os.listdir(tmp_path)) == ["a.pt", "b.pt"]


def test_move_temporary_commit_removes_the_temporary_when_the_move_fails(tmp_path):
    # The final name is taken by a non-empty directory: the temporary is written whole, then the rename fails.
    fs = _arrow_local_filesystem()
    blocker = tmp_path / "a.pt"
    blocker.mkdir()
    (blocker / "keep").write_bytes(b"k")
    with pytest.raises(OSError):
        storage.write_file_atomic(fs, str(blocker), b"x" * 1000)
    assert os.listdir(tmp_path) == ["a.pt"]
    assert os.listdir(blocker) == ["keep"]


# Bad input: every failure says which URL, what failed, and what to do.


def test_an_unknown_protocol_is_named_with_the_known_ones():
    for url in ("s4://bucket/runs", "simplecache::s4://bucket/runs"):
        with pytest.raises(ValueError) as failure:
            storage.open_filesystem(url)
        message = str(failure.value)
        assert f"Cannot open {url}: fsspec knows no protocol 's4'. Did you mean s3://?" in message
        assert "Known protocols include file, memory, s3, gs, az" in message
    with pytest.raises(ValueError, match="fsspec knows no protocol 's4'"):
        check_writable("s4://bucket/runs")  # before anything is attempted


def test_a_url_password_never_appears_in_an_error():
    with pytest.raises(ValueError) as failure:
        storage.open_filesystem("s4://user:hunter2-url-password@host/runs")
    assert "hunter2" not in str(failure.value)
    assert "s4://user:***@host/runs" in str(failure.value)


def test_secrets_are_hidden_from_error_texts(monkeypatch):
    """What every message of this module goes through before it is raised."""
    monkeypatch.setenv("SOME_SERVICE_API_TOKEN", "token-from-the-environment")
    monkeypatch.setitem(fsspec.config.conf, "gcs", {"project": "visible-project", "token": "token-from-fsspec-config"})
    fs = fsspec.filesystem("memory")
    monkeypatch.setattr(fs, "storage_options", {"client_kwargs": {"aws_secret_access_key": "secret-of-this-fs"}})
    text = (
        "failed: token-from-the-environment, token-from-fsspec-config, secret-of-this-fs, visible-project, "
        "https://user:url-password@host/a?X-Amz-Signature=abcdef&part=2"
    )
    assert redact(text, fs) == (
        "failed: ***, ***, ***, visible-project, https://user:***@host/a?X-Amz-Signature=***&part=2"
    )


@pytest.mark.parametrize(
    "url, package",
    [
        ("gs://bucket/runs", "gcsfs"),
        ("az://container/runs", "adlfs"),
        ("hf://datasets/someone/runs", "huggingface_hub"),
        ("sftp://user:hunter2-sftp-password@127.0.0.1/runs", "paramiko"),
    ],
)
def test_a_protocol_whose_driver_is_not_installed_names_the_package(url, package):
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(ImportError) as failure:
        storage.open_filesystem(url)
    message = str(failure.value)
    assert f"needs the package {package}, which is not installed" in message
    assert message.endswith(f"Install it: pip install {package}.") and failure.value.name == package
    assert "hunter2" not in message


# Blocks one import the way Python does for a package that is absent (a None entry in sys.modules), in a fresh
# interpreter, so that fsspec has not loaded the S3 driver yet.
_WITHOUT_MODULE = """
import sys
sys.modules[sys.argv[1]] = None
from tracktrain import storage
try:
    storage.open_filesystem("s3://bucket/runs")
except ImportError as error:
    print(type(error).__name__, error.name, error, sep="|")
"""


@pytest.mark.parametrize(
    "blocked, install",
    [
        ("s3fs", "pip install s3fs (or pip install 'tracktrain[s3]')"),  # the driver itself
        ("aiobotocore", "pip install aiobotocore"),  # a dependency of an installed driver
    ],
)
def test_a_missing_s3_driver_names_the_package_to_install(blocked, install):
    import subprocess
    import sys

    pytest.importorskip("s3fs")  # (so that the second case really is "s3fs installed, its dependency not")
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MODULE, blocked],
        cwd=Path(__file__).parents[1],  # the repository root, where `tracktrain` imports from
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kind, name, message = result.stdout.strip().split("|")
    assert (kind, name) == ("ImportError", blocked)
    assert message.startswith(f"Cannot open s3://bucket/runs: the s3:// protocol needs the package {blocked}")
    assert message.endswith(f"Install it: {install}.")


@pytest.mark.parametrize("where", ["local", "memory", "s3"])
def test_check_writable_creates_the_directory_and_leaves_nothing_behind(where, tmp_path, memory_dir, request):
    if where == "s3":
        directory = f"{request.getfixturevalue('s3_bucket')}/runs/exp1"
    else:
        directory = f"{tmp_path if where == 'local' else memory_dir}/runs/exp1"
    check_writable(directory)
    assert storage.isdir(directory) or where == "s3"  # object stores have no empty directories
    fs, path = storage.open_filesystem(directory)
    fs.invalidate_cache()
    assert fs.find(path.split("/runs")[0], withdirs=False) == []  # the probe file is gone


def _error_chain_text(error: BaseException) -> str:
    """Everything a traceback of `error` would print: its text and the texts of its causes and contexts."""
    texts = []
    while error is not None:
        texts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return "\n".join(texts)


@pytest.mark.parametrize("wrapper", ["", "simplecache::"])  # (through a wrapper too: its makedirs would create it)
def test_a_missing_bucket_is_reported_and_not_created(wrapper, s3_bucket, s3_admin, s3_secret):
    bucket = f"tracktrain-missing-{uuid.uuid4().hex[:12]}"
    url = f"{wrapper}s3://{bucket}/runs/exp1"
    with pytest.raises(FileNotFoundError) as failure:
        check_writable(url)
    assert str(failure.value) == (
        f"Cannot write to {url}: writing a probe file failed with FileNotFoundError: The specified bucket does not "
        f"exist. The bucket does not exist or is not visible. Create the bucket (aws s3 mb s3://{bucket}) or "
        "correct its name."
    )
    assert not s3_admin.exists(bucket)
    assert s3_secret not in _error_chain_text(failure.value)


@contextlib.contextmanager
def moto_checks_credentials(endpoint: str):
    """Inside, moto's server verifies each request's signature against its IAM users, as S3 does. Yields the
    (key id, secret) of a user allowed s3:*."""
    boto3 = pytest.importorskip("boto3")
    iam = boto3.client(
        "iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin", aws_secret_access_key="admin"
    )
    user = f"trainer-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    allow_s3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(allow_s3))
    key = iam.create_access_key(UserName=user)["AccessKey"]

    def check_after(unchecked_requests: float) -> None:  # moto's switch: how many requests pass unchecked
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=str(unchecked_requests).encode(),
            headers={"Content-Type": "text/plain"},  # (a form content type would hide the body from moto)
        )
        urllib.request.urlopen(request, timeout=10).close()

    check_after(0)
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        check_after(float("inf"))


def test_rejected_credentials_are_reported_without_the_secret(s3_bucket, s3_endpoint, s3_secret, monkeypatch):
    from s3fs import S3FileSystem

    wrong_secret = "wrong-secret-must-not-be-shown"
    url = f"{s3_bucket}/runs/exp1"

    def failure_with(key_id: str, secret: str, via_fsspec_config: bool = False) -> PermissionError:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        if via_fsspec_config:  # storage options from fsspec's configuration, which win over the environment
            monkeypatch.setitem(fsspec.config.conf, "s3", {"key": key_id, "secret": wrong_secret})
        S3FileSystem.clear_instance_cache()
        with pytest.raises(PermissionError) as failure:
            check_writable(url)
        text = _error_chain_text(failure.value)
        assert wrong_secret not in text and s3_secret not in text
        return failure.value

    with moto_checks_credentials(s3_endpoint) as (key_id, secret):
        unknown_key = str(failure_with("never-issued-key-id", wrong_secret))
        assert unknown_key.startswith(
            f"Cannot write to {url}: writing a probe file failed with PermissionError: The AWS Access Key Id you "
            "provided does not exist in our records. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
        assert "allow s3:PutObject, s3:GetObject and s3:DeleteObject on the bucket" in unknown_key

        assert "signature we calculated does not match" in str(failure_with(key_id, wrong_secret))
        assert "signature we calculated does not match" in str(failure_with(key_id, secret, via_fsspec_config=True))
        monkeypatch.delitem(fsspec.config.conf, "s3")

        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # and with the right ones, the same check passes
        S3FileSystem.clear_instance_cache()
        check_writable(url)


def test_missing_credentials_are_reported(s3_bucket, monkeypatch, tmp_path):
    from s3fs import S3FileSystem

    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata lookup on a developer machine
    S3FileSystem.clear_instance_cache()
    with pytest.raises(PermissionError) as failure:
        check_writable(f"{s3_bucket}/runs")
    assert str(failure.value).startswith(
        f"Cannot write to {s3_bucket}/runs: writing a probe file failed with NoCredentialsError: Unable to locate "
        "credentials. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    )


@pytest.fixture
def closed_port():
    """A 127.0.0.1 port that refuses connections: bound, never listening, so no other test can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_wrong_endpoint_fails_at_once(s3_bucket, closed_port, s3_secret, monkeypatch):
    from s3fs import S3FileSystem

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's default, 5 attempts with backoff, takes 7-9 s here
    S3FileSystem.clear_instance_cache()
    start = time.monotonic()
    with pytest.raises(ConnectionError) as failure:
        check_writable(f"{s3_bucket}/runs")
    assert time.monotonic() - start < 5
    message = str(failure.value)
    assert message.startswith(
        f"Cannot write to {s3_bucket}/runs: writing a probe file failed with EndpointConnectionError: Could not "
        f'connect to the endpoint URL: "http://127.0.0.1:{closed_port}/'
    )
    assert f"Check AWS_ENDPOINT_URL (AWS_ENDPOINT_URL is http://127.0.0.1:{closed_port}) and that the server" in message
    assert s3_secret not in _error_chain_text(failure.value)


def test_a_silent_endpoint_is_given_up_on_at_the_timeout(s3_bucket, monkeypatch):
    """A server that accepts connections and never answers: s3fs alone would wait for minutes."""
    from s3fs import S3FileSystem

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshakes; nobody ever reads
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        S3FileSystem.clear_instance_cache()
        start = time.monotonic()
        with pytest.raises(TimeoutError) as failure:
            check_writable(f"{s3_bucket}/runs", timeout=1.0)
        assert time.monotonic() - start < 5
    assert str(failure.value).startswith(
        f"Cannot write to {s3_bucket}/runs: writing a probe file failed with FSTimeoutError. No answer within 1 s. "
        "Check AWS_ENDPOINT_URL (AWS_ENDPOINT_URL is http://127.0.0.1:"
    )


def _check_writable_without_root(directory: str) -> tuple[str, str]:
    """(exception name, message) of `check_writable(directory)` in a process that may not write where
    it is not allowed to: this one, or a forked child with the `nobody` user's ids when this one runs as root."""

    def check() -> tuple[str, str]:
        try:
            check_writable(directory)
        except OSError as error:
            return type(error).__name__, str(error)
        return "", ""

    if os.geteuid() != 0:
        return check()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, check, report through the pipe, and leave without running pytest's exit
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(check()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as report:
        result = report.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(result))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX permissions")
def test_a_read_only_directory_is_reported():
    # In /tmp (any user may pass through it) rather than under tmp_path (only its owner may).
    directory = tempfile.mkdtemp(prefix="tracktrain-read-only-")
    os.chmod(directory, 0o555)
    try:
        kind, message = _check_writable_without_root(directory)
        assert kind == "PermissionError"
        assert message.startswith(
            f"Cannot write to {directory}: writing a probe file failed with PermissionError: [Errno 13] Permission "
            f"denied: '{directory}/.tracktrain-write-probe-"
        )
        assert message.endswith("Choose a directory this user may write to, or change its permissions.")
        kind, message = _check_writable_without_root(f"{directory}/runs")
        assert kind == "PermissionError" and "creating the directory failed with PermissionError" in message
        assert os.listdir(directory) == []
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(directory)


@pytest.mark.parametrize(
    "variable, text, words",
    [
        (
            "TRACKTRAIN_STORAGE_CONNECT_TIMEOUT",
            "soon",
            "must be a positive number of seconds; unset it for the default",
        ),
        ("TRACKTRAIN_STORAGE_READ_TIMEOUT", "-3", "must be a positive number of seconds"),
        ("TRACKTRAIN_STORAGE_ATTEMPTS", "2.5", "must be a positive whole number; unset it for the default (3)"),
        ("TRACKTRAIN_STORAGE_ATTEMPTS", "nan", "must be a positive whole number"),
    ],
)
def test_a_bad_storage_setting_names_the_variable_its_value_and_the_default(monkeypatch, variable, text, words):
    monkeypatch.setenv(variable, text)
    with pytest.raises(ValueError, match=re.escape(f"{variable}={text!r} {words}")):
        storage.storage_timeouts()


def test_storage_settings_from_the_environment_are_used(monkeypatch):
    monkeypatch.setenv("TRACKTRAIN_STORAGE_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_ATTEMPTS", "7")
    connect, _, attempts = storage.storage_timeouts()
    assert (connect, attempts) == (2.5, 7)
