"""A real MLflow tracking server for the integration tests: `mlflow server` on 127.0.0.1 with a sqlite backend and a
local artifact store, started in its own process group and stopped by that PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MlflowServer:
    """One `mlflow server`; `stop()` and `start()` again keep its port, database and artifacts."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = root / "artifacts"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> None:
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                   "--artifacts-destination", str(self.artifacts)]
        # the background job runner (a dozen huey processes) is not needed for tracking and triples the start-up
        environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.root / "server.log", "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                            start_new_session=True)  # its own group: its uvicorn worker stops with it
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer {self.url}/health within {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the server's process group (the group of the PID started above), SIGKILL after `timeout`."""
        if self.process is None:
            return
        process, self.process = self.process, None
        self._signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout)
        deadline = time.monotonic() + timeout  # its worker may outlive it a moment; a restart needs the port
        while self._listening() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._listening():
            self._signal_group(process.pid, signal.SIGKILL)  # the group still has a member: the worker

    def log_tail(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")[-3000:]

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    @staticmethod
    def _signal_group(pid: int, signum: int) -> None:
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One tracking server for the whole session (tests use their own experiments)."""
    pytest.importorskip("mlflow")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def start_mlflow_server(tmp_path: Path) -> Iterator[Callable[..., MlflowServer]]:
    """Starts servers of the test's own (to stop and restart them); all are stopped when the test ends."""
    pytest.importorskip("mlflow")
    servers: list[MlflowServer] = []

    def start(port: int | None = None) -> MlflowServer:
        root = tmp_path / f"mlflow-server-{len(servers)}"
        root.mkdir()
        server = MlflowServer(root, port)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()
