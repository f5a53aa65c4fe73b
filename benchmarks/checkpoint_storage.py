"""Where `bench_checkpoint.py`'s fits save: a local directory, or a bucket on moto's S3 server, which runs in a
child process of its own (so that its request handling never holds this process's GIL, as a real S3 would not)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import uuid

from tracktrain_integrations.testing import free_port

LOCAL, S3 = "local", "s3"


class MotoServer:
    """moto's `ThreadedMotoServer` on 127.0.0.1 in a child process of its own (so its request handling never holds
    this process's GIL, as a real S3 would not), stopped by the PID started here. `environment` points boto / s3fs
    at it with fake credentials."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        code = (
            "import sys\nfrom moto.server import ThreadedMotoServer\n"
            f"server = ThreadedMotoServer(ip_address='127.0.0.1', port={self.port}, verbose=False)\n"
            "server.start()\nprint('ready', flush=True)\nsys.stdin.read()  # until the parent closes it\n"
            "server.stop()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""  # type: ignore[union-attr]
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"moto server did not start within {timeout} s (it printed {line!r})")

    @property
    def environment(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        try:
            process.stdin.close()  # type: ignore[union-attr]
            process.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the group of the PID started above
            except ProcessLookupError:
                pass
            process.wait(timeout)


class Storage:
    """Where the fits write: run directories under a local temporary directory, or under a bucket on moto."""

    def __init__(self, key: str, root: str) -> None:
        self.key = key
        self.root = root  # a local directory or "s3://bucket"
        import fsspec

        self.fs = fsspec.filesystem("s3") if key == S3 else fsspec.filesystem("file")

    def new_dir(self) -> str:
        name = f"run-{uuid.uuid4().hex[:10]}"
        return f"{self.root}/{name}" if self.key == S3 else os.path.join(self.root, name)

    def files(self, directory: str) -> dict[str, int]:
        """Name -> size of the files directly in `directory`."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return {}
        return {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in entries
            if entry["type"] == "file"
        }

    def read(self, url: str) -> bytes:
        return self.fs.cat_file(url)

    def join(self, directory: str, name: str) -> str:
        return f"{directory}/{name}" if self.key == S3 else os.path.join(directory, name)

    def remove(self, directory: str) -> None:
        self.fs.invalidate_cache()
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass


def start_s3(moto: MotoServer) -> Storage:
    """Start moto, point boto / s3fs at it (this process only) and make a bucket."""
    moto.start()
    os.environ.update(moto.environment)
    import fsspec
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # an instance made before would not know the endpoint
    bucket = f"tracktrain-bench-{uuid.uuid4().hex[:8]}"
    fsspec.filesystem("s3").mkdir(bucket)
    return Storage(S3, f"s3://{bucket}")
