"""Helpers for tests and benchmarks that start real services: `free_port()` and `MlflowServer`, a local
`mlflow server` in its own process group.

Only the standard library is imported here (the server runs as `python -m mlflow server` in a child process), so
the test suite and the benchmark scripts can both use this module without importing each other, and importing it
loads neither torch nor mlflow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

__all__ = ["MlflowServer", "free_port"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MlflowServer:
    """A local `mlflow server` on 127.0.0.1 (sqlite backend, local artifact store under `root`) in its own process
    group, stopped by the PID started here; `stop()` and `start()` again keep its port, database and artifacts."""

    def __init__(self, root: str | os.PathLike[str], port: int | None = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = self.root / "artifacts"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> float:
        """Start it and wait for /health; returns the seconds that took."""
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.artifacts),
        ]
        # the background job runner (a dozen huey processes) is not needed for tracking, triples the start-up and
        # would share the CPUs
        child_environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.root / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=child_environment, start_new_session=True
            )  # its own group: its uvicorn worker stops with it
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer {self.url}/health within {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group of the PID started above (the server and its worker), SIGKILL after `timeout`."""
        if self.process is None:
            return
        process, self.process = self.process, None
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout)
        deadline = time.monotonic() + timeout  # its worker may outlive it a moment; a restart needs the port
        while self._listening() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._listening():
            _signal_group(process.pid, signal.SIGKILL)  # the group still has a member: the worker

    def log_tail(self) -> str:
        return (self.root / "server.log").read_text(encoding="utf-8", errors="replace")[-3000:]

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0


def experiment_names(port: int, timeout: float, running: Callable[[], bool]) -> list[str] | None:
    """The experiments an MLflow server or UI on 127.0.0.1:`port` lists, through the REST API its web page calls,
    once it answers (within `timeout` seconds, while `running()`); None if it never did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running():
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search",
            data=b'{"max_results": 100}',
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return [experiment["name"] for experiment in json.loads(response.read())["experiments"]]
        except OSError:
            time.sleep(0.5)
    return None


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass  # the group is gone already
