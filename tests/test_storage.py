"""tracktrain.storage against real file systems: local directories, fsspec's memory://, and S3 (moto's server)."""

from __future__ import annotations

import os
import resource
import signal
import uuid
from pathlib import Path

import fsspec
import pytest

from tracktrain import storage


S3_SECRET = "tracktrain-test-secret-never-stored"


@pytest.fixture
def memory_dir():
    url = f"memory://storage-test-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.fixture(scope="module")
def s3_bucket():
    """A real S3 API (moto's server on 127.0.0.1) reached through s3fs, with fsspec's normal configuration."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()
    try:
        bucket = f"tracktrain-test-{uuid.uuid4().hex[:8]}"  # moto keeps one backend per process, shared by servers
        fsspec.filesystem("s3").mkdir(bucket)
        yield f"s3://{bucket}"
    finally:
        S3FileSystem.clear_instance_cache()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def test_open_filesystem_resolves_paths_and_urls(tmp_path, memory_dir):
    fs, path = storage.open_filesystem(tmp_path / "a.pt")
    assert storage.is_local(tmp_path) and path == str(tmp_path / "a.pt")
    assert storage.is_local(f"file://{tmp_path}")
    fs, path = storage.open_filesystem(f"{memory_dir}/a.pt")
    assert type(fs).__name__ == "MemoryFileSystem" and path.endswith("/a.pt")
    assert not storage.is_local(memory_dir)
    with pytest.raises(TypeError, match=r"path or an fsspec URL .* got int: 3"):
        storage.open_filesystem(3)


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
