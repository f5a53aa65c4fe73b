"""A real MLflow tracking server for the integration tests: `mlflow server` on 127.0.0.1 with a sqlite backend and a
local artifact store, started in its own process group and stopped by that PID (`tracktrain_integrations.testing`'s
`MlflowServer`, which benchmarks/bench_logging.py starts too)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tracktrain_integrations.testing import MlflowServer


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


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One embedded store (with a model registry) per test module: creating a database takes MLflow ~2 s; tests use
    their own experiments (`experiment`)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow-sqlite') / 'mlflow.db'}"


@pytest.fixture
def experiment(request: pytest.FixtureRequest) -> str:
    """An experiment name of this test's own."""
    return f"{request.node.name}-{time.time_ns()}"
