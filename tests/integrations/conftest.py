"""A real MLflow tracking server for the integration tests: `mlflow server` on 127.0.0.1 with a sqlite backend and a
local artifact store, started in its own process group and stopped by that PID (benchmarks/_common.py's
`MlflowServer`, which bench_logging.py starts too)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _load_benchmark_common():
    """benchmarks/_common.py, loaded by its path: the benchmarks are scripts, not a package, and their `_common` stays
    off sys.path (it imports no torch, tracktrain or mlflow at module level)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "_common.py"
    spec = importlib.util.spec_from_file_location("tracktrain_benchmarks_common", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_common = _load_benchmark_common()
MlflowServer = _common.MlflowServer
free_port = _common.free_port


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
