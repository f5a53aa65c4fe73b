"""MLflowLogger against real MLflow: embedded sqlite stores and a real `mlflow server` (conftest.py) that the fault
tests stop and start again, or freeze. Runs are read back through MlflowClient and through the server's REST API.

No assert here times a call against a tight margin: that logging never waits for the server is shown by ordering
(every call returned while the server was frozen), and the wall-clock bounds left are liveness bounds, far above what
the behaviour takes and below what its breakage would (MLflow's client retrying a refused port for four minutes, or
a wait for a server that never comes back)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import tracktrain
from tests._waiting import eventually
from tracktrain import Trainer
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.loggers.base import CLOSE_TIMEOUT, CLOSE_TIMEOUT_VARIABLE
from tracktrain.loggers.delivery import read_spill
from tracktrain_integrations.testing import free_port

from ..trainer._tasks import Classifier, make_loader, quiet

tracking = pytest.importorskip("mlflow.tracking")
from tracktrain_integrations.mlflow import MLflowLogger  # noqa: E402
from tracktrain_integrations.mlflow_values import batches as mlflow_batches  # noqa: E402


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's own default artifact root is ./mlruns: never the repository's


def started(root, **kwargs) -> MLflowLogger:
    logger = MLflowLogger(**kwargs)
    logger.start(str(root))
    return logger


def steps_and_values(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((metric.step, metric.value) for metric in client.get_metric_history(run_id, key))


def rest(server, endpoint: str, **query) -> dict:
    """GET the tracking server's REST API, as any HTTP client would."""
    url = f"{server.url}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def rest_history(server, run_id: str, key: str) -> list[tuple[int, float]]:
    metrics = rest(server, "metrics/get-history", run_id=run_id, metric_key=key)["metrics"]
    return sorted((metric["step"], metric["value"]) for metric in metrics)


def rest_run(server, run_id: str) -> dict:
    """The run as REST returns it, with params and tags as dicts."""
    run = rest(server, "runs/get", run_id=run_id)["run"]
    data = run["data"]
    return {
        "info": run["info"],
        "params": {p["key"]: p["value"] for p in data.get("params", [])},
        "tags": {t["key"]: t["value"] for t in data.get("tags", [])},
        "metrics": {m["key"]: m["value"] for m in data.get("metrics", [])},
    }


def runs_of(client, experiment_name: str) -> list:
    return client.search_runs([client.get_experiment_by_name(experiment_name).experiment_id])


class Expected:
    """What a run must end up holding, kept as the test logs it through `logger`: every metric's (step, value)
    pairs, every param and every tag."""

    def __init__(self, logger: MLflowLogger) -> None:
        self.logger = logger
        self.metrics: dict[str, dict[int, float]] = {}
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}

    def steps(self, first: int, last: int) -> None:
        for step in range(first, last):
            values = {"loss": 1.0 / (step + 1), "acc": step / 100, "lr": 0.1 * 0.95**step}
            self.logger.log_metrics(values, step)
            for name, value in values.items():
                self.metrics.setdefault(name, {})[step] = value

    def hyperparams(self, **params) -> None:
        self.logger.log_hyperparams(params)
        self.params.update({name: str(value) for name, value in params.items()})

    def set_tags(self, **tags) -> None:
        self.logger.set_tags(tags)
        self.tags.update(tags)

    def differences(self, client) -> dict:
        """How the run, read back, differs from what was logged: per metric, the (step, value) pairs missing and
        those extra (or doubled); params missing, changed or extra; tags missing or changed. Empty: each metric's
        history, the params and the tags are exactly what was logged, once."""
        run_id = self.logger.run_id
        differences = {}
        for name, values in self.metrics.items():
            history, logged = steps_and_values(client, run_id, name), sorted(values.items())
            if history != logged:
                differences[f"metric {name}"] = {
                    "missing": [pair for pair in logged if pair not in history],
                    "extra": [pair for pair in history if pair not in logged or history.count(pair) > 1],
                }
        run = client.get_run(run_id)
        if run.data.params != self.params:
            differences["params"] = {
                "missing": {key: value for key, value in self.params.items() if run.data.params.get(key) != value},
                "extra": {key: value for key, value in run.data.params.items() if key not in self.params},
            }
        tags = {name: run.data.tags.get(name) for name in self.tags}
        if tags != self.tags:
            differences["tags"] = {
                name: {"logged": value, "held": tags[name]} for name, value in self.tags.items() if tags[name] != value
            }
        return differences


# ------------------------------------------------------------------------------------------ the embedded store
@pytest.mark.parametrize("delivery", ["process", "thread"])
def test_the_default_is_an_embedded_sqlite_file_in_the_root_dir_holding_the_whole_run(tmp_path, delivery):
    root = tmp_path / "root"
    logger = started(root, run_name="first", tags={"team": "vision"}, delivery=delivery)
    assert logger.tracking_uri == f"sqlite:///{root}/mlflow.db" and (root / "mlflow.db").exists()
    logger.log_hyperparams({"optimizer": {"lr": 0.1, "name": "sgd"}, "layers": [4, 2]})
    for step in range(1, 31):
        logger.log_metrics({"loss": 1.0 / step, "acc": step / 30}, step)
    logger.set_tags({"stage": "pretrain"})
    config = tmp_path / "config.yaml"
    config.write_text("lr: 0.1\n")
    logger.log_artifact(str(config), "configs")
    logger.finalize("FINISHED")

    assert logger.undelivered == 0 and not Path(logger.spill_path).exists()
    client = tracking.MlflowClient(logger.tracking_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"optimizer/lr": "0.1", "optimizer/name": "sgd", "layers": "[4, 2]"}
    assert steps_and_values(client, logger.run_id, "loss") == [(step, 1.0 / step) for step in range(1, 31)]
    assert steps_and_values(client, logger.run_id, "acc") == [(step, step / 30) for step in range(1, 31)]
    assert {key: run.data.tags[key] for key in ("team", "stage", "tracktrain.version", "mlflow.runName")} == {
        "team": "vision",
        "stage": "pretrain",
        "tracktrain.version": tracktrain.__version__,
        "mlflow.runName": "first",
    }
    assert [artifact.path for artifact in client.list_artifacts(logger.run_id, "configs")] == ["configs/config.yaml"]
    # the artifacts sit next to the database, not in the working directory
    (uploaded,) = (root / "mlartifacts").rglob("config.yaml")
    assert uploaded.read_text() == "lr: 0.1\n" and not (tmp_path / "mlruns").exists()
    # MLflow 3's UI opens the experiment as model training, not in its GenAI view
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_an_experiment_made_without_a_kind_gets_the_training_kind_and_a_chosen_kind_is_kept(sqlite_uri, tmp_path):
    client = tracking.MlflowClient(sqlite_uri)
    plain = client.create_experiment(f"plain-{uuid.uuid4().hex[:8]}")
    chosen = client.create_experiment(
        f"chosen-{uuid.uuid4().hex[:8]}", tags={"mlflow.experimentKind": "genai_development"}
    )
    for experiment_id in (plain, chosen):
        logger = MLflowLogger(experiment_name=client.get_experiment(experiment_id).name, tracking_uri=sqlite_uri)
        logger.start(str(tmp_path))
        logger.finalize("FINISHED")
    assert client.get_experiment(plain).tags["mlflow.experimentKind"] == "custom_model_development"
    assert client.get_experiment(chosen).tags["mlflow.experimentKind"] == "genai_development"


def test_a_second_logger_given_the_run_id_continues_the_same_run(sqlite_uri, experiment, tmp_path):
    first = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    for step in range(10):
        first.log_metrics({"loss": float(step)}, step)
    first.finalize("KILLED")
    client = tracking.MlflowClient(sqlite_uri)
    assert client.get_run(first.run_id).info.status == "KILLED"

    second = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment, run_id=first.run_id)
    assert second.run_id == first.run_id
    assert client.get_run(first.run_id).info.status == "RUNNING"  # running again from start()
    for step in range(10, 20):
        second.log_metrics({"loss": float(step)}, step)
    second.finalize("FINISHED")

    assert [run.info.run_id for run in runs_of(client, experiment)] == [first.run_id]
    assert steps_and_values(client, first.run_id, "loss") == [(step, float(step)) for step in range(20)]
    assert client.get_run(first.run_id).info.status == "FINISHED"


def test_values_mlflow_refuses_for_good_are_dropped_one_by_one_and_reported(sqlite_uri, experiment, tmp_path, caplog):
    first = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    first.log_hyperparams({"lr": 0.1, "epochs": 1})
    first.finalize("FINISHED")

    second = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment, run_id=first.run_id)
    second.log_hyperparams({"lr": 0.2, "epochs": 1, "batch_size": 8})  # MLflow params cannot change: lr is refused
    second.log_metrics({"loss": 0.5}, 3)
    with pytest.warns(UserWarning, match=r"MLflow refused 1 value\(s\) of run .*param lr='0.2' \(.*Changing param"):
        second.finalize("FINISHED")

    assert second.rejected == 1 and second.undelivered == 0
    # refused in the sender child, logged in this process under the logger's name
    (dropped,) = [record for record in caplog.records if "dropped" in record.getMessage()]
    assert dropped.name == "tracktrain_integrations.mlflow" and "param lr='0.2'" in dropped.getMessage()
    client = tracking.MlflowClient(sqlite_uri)
    run = client.get_run(first.run_id)
    assert run.data.params == {"lr": "0.1", "epochs": "1", "batch_size": "8"}  # the rest of its batch got through
    assert steps_and_values(client, first.run_id, "loss") == [(3, 0.5)]


def test_names_mlflow_rejects_are_renamed_the_same_way_each_time_with_one_warning(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    long_name = "x" * 300
    metrics = {"val/acc@1": 0.5, "loss|train": 1.0, "a//b/": 2.0, "../up": 3.0, long_name: 4.0, "fine/name:1": 5.0}
    with warnings.catch_warnings(record=True) as first_call:
        warnings.simplefilter("always")
        logger.log_metrics(metrics, 1)
    with warnings.catch_warnings(record=True) as second_call:
        warnings.simplefilter("always")
        logger.log_metrics(metrics, 2)
    logger.finalize("FINISHED")

    messages = [str(warning.message) for warning in first_call]
    assert len(messages) == 5 and second_call == []
    assert "metric name 'val/acc@1'" in messages[0] and "logged as 'val/acc_1'" in messages[0]
    assert all(warning.filename == __file__ for warning in first_call)  # points at the caller
    client = tracking.MlflowClient(sqlite_uri)
    logged = client.get_run(logger.run_id).data.metrics
    (long_key,) = [key for key in logged if key.startswith("xxx")]
    assert len(long_key) == 250 and long_key[-9] == "-"  # cut, with a hash of the full name
    assert set(logged) == {"val/acc_1", "loss_train", "a/b", "__/up", long_key, "fine/name:1"}
    assert steps_and_values(client, logger.run_id, "__/up") == [(1, 3.0), (2, 3.0)]


def test_numbers_of_any_type_are_logged_and_anything_else_fails_at_log_time(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    for value in ([1.0, 2.0], "0.5", torch.ones(2), None):
        with pytest.raises(TypeError, match=r"metric 'loss' must be a number, got .*loss/0, loss/1"):
            logger.log_metrics({"acc": 1.0, "loss": value}, 1)
    logger.log_metrics(
        {
            "int": 3,
            "numpy": np.float32(0.25),
            "tensor": torch.tensor(0.5),
            "nan": math.nan,
            "inf": math.inf,
            "minus_inf": -math.inf,
        },
        2,
    )
    logger.finalize("FINISHED")

    logged = tracking.MlflowClient(sqlite_uri).get_run(logger.run_id).data.metrics
    assert "acc" not in logged  # a call that raised queued nothing
    assert {key: logged[key] for key in ("int", "numpy", "tensor")} == {"int": 3.0, "numpy": 0.25, "tensor": 0.5}
    # as documented: NaN stays NaN, MLflow stores ±inf as the largest double
    assert math.isnan(logged["nan"])
    assert logged["inf"] == sys.float_info.max and logged["minus_inf"] == -sys.float_info.max


def test_long_values_are_cut_to_mlflows_limits_with_a_warning(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    with pytest.warns(UserWarning, match=r"hyperparameter 'prompt' is 7000 characters long; MLflow keeps 6000"):
        logger.log_hyperparams({"prompt": "p" * 7000})
    with pytest.warns(UserWarning, match=r"tag 'notes' is 9000 characters long; MLflow keeps 8000"):
        logger.set_tags({"notes": "n" * 9000})
    logger.finalize("FINISHED")
    run = tracking.MlflowClient(sqlite_uri).get_run(logger.run_id)
    assert run.data.params["prompt"] == "p" * 6000 and run.data.tags["notes"] == "n" * 8000


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
def test_a_sender_child_killed_mid_run_is_replaced_and_every_metric_arrives_once(sqlite_uri, experiment, tmp_path):
    import signal

    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    logger.sender_keep_warm = 0.0
    for step in range(50):
        logger.log_metrics({"loss": float(step)}, step)
    assert logger.flush(60)
    first = logger.sender_pid
    os.kill(first, signal.SIGKILL)
    for step in range(50, 100):
        logger.log_metrics({"loss": float(step)}, step)
    assert logger.flush(60)
    second = logger.sender_pid
    logger.finalize("FINISHED")

    assert second not in (None, first, os.getpid()) and not Path(f"/proc/{first}").exists()  # reaped
    client = tracking.MlflowClient(sqlite_uri)
    # a batch the dead child had in hand is sent again: MLflow keeps one copy of a value logged twice
    assert steps_and_values(client, logger.run_id, "loss") == [(step, float(step)) for step in range(100)]
    assert client.get_run(logger.run_id).info.status == "FINISHED"


def test_the_sender_child_does_not_import_torch(tmp_path):
    """`python -X importtime` in both processes (the variable reaches the child): a script that imports no torch
    leaves no torch import anywhere, though its records went through a child."""
    code = (
        "import os\n"
        "from tracktrain_integrations.mlflow import MLflowLogger\n"
        f"logger = MLflowLogger(tracking_uri='sqlite:///{tmp_path}/mlflow.db')\n"
        f"logger.start({str(tmp_path)!r})\n"
        "logger.log_metrics({'loss': 0.5}, 1)\n"
        "assert logger.flush(120)\n"
        "print(os.getpid(), logger.sender_pid, logger.run_id)\n"
        "logger.finalize('FINISHED')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    script, child, run_id = result.stdout.split()
    assert child not in ("None", script)
    imported = [
        line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    ]
    assert imported.count("mlflow.tracking") == 2  # the script's imports and the child's
    assert not [name for name in imported if name == "torch" or name.startswith("torch.")]
    history = tracking.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_metric_history(run_id, "loss")
    assert [(metric.step, metric.value) for metric in history] == [(1, 0.5)]


def test_credentials_in_the_tracking_uri_reach_the_sender_child_through_its_environment_only():
    logger = MLflowLogger(tracking_uri="http://alice:s%40cret@127.0.0.1:5000")
    assert logger._sender_environment() == {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": "s@cret"}
    assert "cret" not in json.dumps(logger._sender_header()) and "alice" not in json.dumps(logger._sender_header())
    assert MLflowLogger(tracking_uri="http://127.0.0.1:5000")._sender_environment() == {}


def test_batches_stay_within_mlflows_limits():
    """MLflow's own validators and its REST request encoding are the oracle: ≤100 params, ≤100 tags, ≤1000
    metrics, ≤1000 values and ≤1 MB of JSON per log_batch call, and nothing lost or reordered."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.protos.service_pb2 import LogBatch
    from mlflow.utils.proto_json_utils import message_to_json
    from mlflow.utils.validation import MAX_BATCH_LOG_REQUEST_SIZE, _validate_batch_log_limits

    params = [Param(f"param/{index}", "v" * 6000) for index in range(250)]
    tags = [RunTag(f"tag/{index}", "t" * 10) for index in range(150)]
    metrics = [Metric(f"metric/{index % 7}", float(index), 1_700_000_000_000, index) for index in range(2500)]
    batches = list(mlflow_batches(params, tags, metrics))
    for batch in batches:
        _validate_batch_log_limits(batch["metrics"], batch["params"], batch["tags"])
        request = LogBatch(
            run_id="0" * 32,
            metrics=[m.to_proto() for m in batch["metrics"]],
            params=[p.to_proto() for p in batch["params"]],
            tags=[t.to_proto() for t in batch["tags"]],
        )
        assert len(json.dumps(json.loads(message_to_json(request)))) <= MAX_BATCH_LOG_REQUEST_SIZE
    for kind, sent in (("params", params), ("tags", tags), ("metrics", metrics)):
        assert [entity for batch in batches for entity in batch[kind]] == sent
    assert len(batches) <= 8  # 1.5 MB of params in two 1 MB requests at least, 2800 values in three


def test_an_unreachable_server_at_start_fails_fast_naming_it_and_the_fixes(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(
        ConnectionError,
        match=rf"cannot reach the MLflow tracking server at {uri} .*mlflow server "
        r".*on_unreachable='queue'",
    ):
        started(tmp_path, tracking_uri=uri, request_timeout=1.0)
    # a liveness bound: request_timeout (1 s) and the start's own work, not the four minutes MLflow's client spends
    # retrying a refused port
    assert time.monotonic() - began < 60


def test_resuming_a_run_that_does_not_exist_fails_at_start(sqlite_uri, tmp_path):
    logger = MLflowLogger(tracking_uri=sqlite_uri)
    logger.resume("0" * 32)
    with pytest.raises(RuntimeError, match=rf"MLflow at {sqlite_uri} refused to open the run .*{'0' * 32}"):
        logger.start(str(tmp_path))


def test_a_deleted_experiment_fails_at_start_with_the_command_that_restores_it(sqlite_uri, experiment, tmp_path):
    client = tracking.MlflowClient(sqlite_uri)
    client.delete_experiment(client.create_experiment(experiment))
    with pytest.raises(ValueError, match=r"is deleted\. Restore it with `mlflow experiments restore --experiment-id"):
        started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)


def test_an_artifact_deleted_before_its_upload_is_reported(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    logger.log_artifact(str(tmp_path / "gone.yaml"), "configs")
    with pytest.warns(UserWarning, match=r"artifact .*gone\.yaml \(the file no longer exists\)"):
        logger.finalize("FINISHED")
    assert logger.rejected == 1 and logger.undelivered == 0


def test_a_checkpoint_retention_deleted_before_its_upload_is_skipped_without_a_word(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    logger.log_artifact(str(tmp_path / "checkpoint_4.pt"), "checkpoints")  # announced, then pruned by top-k
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logger.finalize("FINISHED")
    assert logger.rejected == 0 and logger.undelivered == 0


def test_bad_on_unreachable_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"on_unreachable=\.\.\.\) must be \"raise\" or \"queue\", got 'wait'"):
        MLflowLogger(on_unreachable="wait")


def test_without_mlflow_the_module_imports_and_the_logger_names_the_extra():
    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "import tracktrain_integrations.mlflow as module\n"
        "try:\n    module.MLflowLogger()\nexcept ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "MLflowLogger needs MLflow" in result.stdout and "pip install 'tracktrain[mlflow]'" in result.stdout


def test_a_run_that_cannot_reach_its_server_keeps_everything_in_the_spill_file(tmp_path):
    """on_unreachable="queue": training goes on, every call returns at once, and the end of the run waits
    close_timeout at most, leaving a spill file that names the server but not its credentials."""
    port = free_port()
    with pytest.warns(UserWarning, match=rf"server at http://127.0.0.1:{port} does not answer") as caught:
        logger = started(
            tmp_path,
            tracking_uri=f"http://alice:secret@127.0.0.1:{port}",
            on_unreachable="queue",
            request_timeout=0.5,
            close_timeout=1.0,
            experiment_name="offline",
            run_name="r1",
        )
    assert caught[0].filename == __file__ and logger.run_id is None
    logger.log_hyperparams({"lr": 0.1})
    for step in range(50):  # that these never wait for the network: the frozen-server test shows it by ordering
        logger.log_metrics({"loss": 1.0 / (step + 1)}, step)
    # liveness bounds: flush and finalize give up at their timeouts (0.2 s, close_timeout); waiting for a server that
    # never comes back, they would never return
    began = time.monotonic()
    assert logger.flush(0.2) is False and time.monotonic() - began < 30
    began = time.monotonic()
    with pytest.warns(
        UserWarning,
        match=r"51 records for mlflow .* within close_timeout \(1 s\).* with the run's end "
        r"\(FINISHED\).* python -m tracktrain.loggers.replay",
    ):
        logger.finalize("FINISHED")
    # one setting bounds the whole end: close_timeout, a second for the delivery thread, nothing more (no request to
    # mark the run ended: that is in the spill file); the margin is for a loaded machine
    assert time.monotonic() - began < 1.0 + 1.0 + 3.0 and logger.lost == 0

    header, records = read_spill(logger.spill_path)
    assert "secret" not in Path(logger.spill_path).read_text() and "alice" not in json.dumps(header)
    assert header["tracking_uri"] == f"http://127.0.0.1:{port}" and header["run_id"] is None
    assert header["experiment_name"] == "offline" and header["run_name"] == "r1"
    # and the run's end status last, for the replay to end the run with
    assert [record.kind for record in records] == ["params"] + ["metrics"] * 50 + ["status"]
    assert [record.step for record in records[1:-1]] == list(range(50))


def test_the_end_of_a_run_waits_ten_seconds_at_most_unless_told(monkeypatch):
    monkeypatch.delenv(CLOSE_TIMEOUT_VARIABLE, raising=False)
    assert MLflowLogger().close_timeout == CLOSE_TIMEOUT <= 10.0
    monkeypatch.setenv(CLOSE_TIMEOUT_VARIABLE, "3")
    assert MLflowLogger().close_timeout == 3.0 and MLflowLogger(close_timeout=1.5).close_timeout == 1.5
    monkeypatch.setenv(CLOSE_TIMEOUT_VARIABLE, "soon")
    with pytest.raises(ValueError, match=r"TRACKTRAIN_TRACKER_CLOSE_TIMEOUT='soon' must be a positive number"):
        MLflowLogger()


# ------------------------------------------------------------------------------------------------ a real server
def test_a_trainer_run_read_back_through_the_client_and_the_rest_api(mlflow_server, experiment, tmp_path):
    logger = MLflowLogger(
        tracking_uri=mlflow_server.url,
        experiment_name=experiment,
        run_name="e2e",
        tags={"team": "vision"},
        log_checkpoints=True,
    )
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, loggers=[logger], callbacks=[checkpoints]))
    trainer.fit(Classifier(), make_loader(), make_loader())
    assert logger.undelivered == 0 and logger.rejected == 0

    run = rest_run(mlflow_server, logger.run_id)
    assert run["info"]["status"] == "FINISHED" and run["info"]["run_name"] == "e2e"
    assert run["params"]["trainer/max_epochs"] == "2" and run["params"]["module/class"] == "Classifier"
    assert run["tags"]["team"] == "vision" and run["tags"]["tracktrain.version"] == tracktrain.__version__
    train_loss = rest_history(mlflow_server, logger.run_id, "train_loss")
    val_loss = rest_history(mlflow_server, logger.run_id, "val_loss")
    assert [step for step, _ in train_loss] == [4, 8, 12, 16]  # 8 optimizer steps per epoch, published every 4
    assert [step for step, _ in val_loss] == [8, 16]
    assert val_loss[-1][1] == pytest.approx(trainer.logged_metrics["val_loss"])
    assert run["metrics"]["train_loss"] == pytest.approx(trainer.logged_metrics["train_loss"])

    client = tracking.MlflowClient(mlflow_server.url)
    assert steps_and_values(client, logger.run_id, "train_loss") == train_loss
    assert client.get_run(logger.run_id).data.params == run["params"]
    listed = rest(mlflow_server, "artifacts/list", run_id=logger.run_id, path="checkpoints")["files"]
    assert sorted(file["path"] for file in listed) == ["checkpoints/checkpoint_16.pt", "checkpoints/checkpoint_8.pt"]
    query = urllib.parse.urlencode({"path": "checkpoints/checkpoint_16.pt", "run_uuid": logger.run_id})
    with urllib.request.urlopen(f"{mlflow_server.url}/get-artifact?{query}", timeout=30) as response:
        assert response.read() == (tmp_path / "ckpt" / "checkpoint_16.pt").read_bytes()
    assert len(list(mlflow_server.artifacts.rglob("checkpoint_*.pt"))) >= 2  # in the server's artifact store


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="freezes the server with SIGSTOP")
def test_logging_never_waits_for_a_frozen_server_and_every_record_arrives_when_it_thaws(
    mlflow_server, experiment, tmp_path
):
    """The server is frozen (SIGSTOP to its process group: connections are accepted, nothing answers), as a hung
    server is. Every log call returns while it is frozen; flush says the records wait; once it thaws, they all
    arrive. A log call that waited for the network would wait for the server's answer: until it thaws, which here
    happens only after the calls returned."""
    logger = MLflowLogger(tracking_uri=mlflow_server.url, experiment_name=experiment, request_timeout=120.0)
    logger.sender_keep_warm = 0.0  # its child ends with the run
    logger.start(str(tmp_path))
    expected = Expected(logger)
    expected.hyperparams(lr=0.1)
    expected.steps(0, 10)
    assert logger.flush(60)  # the run exists and the sender child is up
    group = mlflow_server.process.pid  # the server's own group (started in a new session): it and its worker
    os.killpg(group, signal.SIGSTOP)
    try:
        training = threading.Thread(
            target=lambda: (expected.steps(10, 210), expected.set_tags(stage="frozen")), daemon=True
        )
        training.start()
        training.join(60)  # a liveness bound: a call waiting on the frozen server would wait as long as it is frozen
        # ordering, not a stopwatch: every call returned while the server could not answer any request
        assert not training.is_alive()
        assert logger.flush(0.5) is False  # the records wait: flush does not claim they arrived
    finally:
        os.killpg(group, signal.SIGCONT)
    expected.steps(210, 220)
    delivered = logger.flush(60)
    logger.finalize("FINISHED")
    differences = expected.differences(tracking.MlflowClient(mlflow_server.url))
    assert (delivered, logger.lost, logger.undelivered, differences) == (True, 0, 0, {})


def test_a_fit_resumed_from_a_checkpoint_continues_the_same_run_and_step_axis(mlflow_server, experiment, tmp_path):
    first = MLflowLogger(tracking_uri=mlflow_server.url, experiment_name=experiment)
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    Trainer(**quiet(tmp_path, max_epochs=1, log_every_n_steps=4, loggers=[first], callbacks=[checkpoints])).fit(
        Classifier(), make_loader(), make_loader()
    )

    second = MLflowLogger(tracking_uri=mlflow_server.url, experiment_name=experiment)
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, loggers=[second]))
    # a resumed fit keeps the run's first params (MLflow cannot change one) and tags what changed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a raised max_epochs is how a run trains more: no warning
        trainer.fit(Classifier(), make_loader(), make_loader(), ckpt_path=checkpoints.best_model_path)

    assert second.run_id == first.run_id
    client = tracking.MlflowClient(mlflow_server.url)
    assert [run.info.run_id for run in runs_of(client, experiment)] == [first.run_id]
    assert [step for step, _ in rest_history(mlflow_server, first.run_id, "train_loss")] == [4, 8, 12, 16]
    run = rest_run(mlflow_server, first.run_id)
    assert run["info"]["status"] == "FINISHED"
    assert run["params"]["trainer/max_epochs"] == "1"
    assert run["tags"]["tracktrain.changed.trainer/max_epochs"] == "1 -> 2 (resumed at step 8)"


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_fit_that_raises_ends_its_run_failed_or_killed(sqlite_uri, experiment, tmp_path, error):
    class Breaks(Classifier):
        def train_step(self, batch, batch_idx):
            if self.trainer.global_step == 6:
                raise error("stop")
            return super().train_step(batch, batch_idx)

    logger = MLflowLogger(tracking_uri=sqlite_uri, experiment_name=experiment)
    with pytest.raises(error):
        Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, loggers=[logger])).fit(Breaks(), make_loader())
    client = tracking.MlflowClient(sqlite_uri)
    assert client.get_run(logger.run_id).info.status == ("FAILED" if error is RuntimeError else "KILLED")
    assert [step for step, _ in steps_and_values(client, logger.run_id, "train_loss")] == [4]


# ------------------------------------------------------------------------------------------------- fault tests
@pytest.mark.slow  # two server starts (~14 s); tests/test_loggers.py counts every record across an outage by default
def test_every_record_logged_across_a_server_outage_arrives_exactly_once(
    start_mlflow_server, tmp_path, caplog, monkeypatch
):
    """A real server is stopped mid-run (SIGTERM to the group of the PID that started it) while metrics, params and
    tags are logged, until the delivery has had a batch refused; then it is started again on the same port and
    database. Read back through MlflowClient, the run holds every metric's exact (step, value) history, every param
    and every tag: none lost, none doubled. flush() says False while records wait, True only once all of them are
    delivered. (A refused batch dropped instead of kept loses its records: the history, flush() and `lost` all say
    so.)"""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refused request fails at once (documented knob)
    server = start_mlflow_server()
    logger = MLflowLogger(tracking_uri=server.url, experiment_name="outage", close_timeout=60.0)
    logger.sender_keep_warm = 0.0  # its child ends with the run
    logger.start(str(tmp_path))
    expected = Expected(logger)
    expected.hyperparams(lr=0.1, batch_size=32)
    expected.set_tags(stage="warmup")
    expected.steps(0, 20)
    assert logger.flush(60)

    server.stop()
    expected.steps(20, 40)
    expected.hyperparams(epochs=4)
    expected.set_tags(stage="train")
    # the delivery sends these and is refused (training goes on): a refused batch is now the queue's to keep
    assert eventually(lambda: "mlflow is not taking records" in caplog.text, 60), caplog.text[-3000:]
    expected.steps(40, 60)  # more while the server is down, behind the refused batch
    assert logger.flush(0.5) is False  # the records wait: flush does not claim they arrived

    server.start()  # the same port and database
    expected.steps(60, 80)
    expected.set_tags(stage="done")
    delivered = logger.flush(60)
    logger.finalize("FINISHED")
    client = tracking.MlflowClient(server.url)
    differences = expected.differences(client)
    assert (delivered, logger.lost, logger.undelivered, logger.rejected, differences) == (True, 0, 0, 0, {})
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    assert [run.info.run_id for run in runs_of(client, "outage")] == [logger.run_id]


@pytest.mark.slow  # ~20 s: two server starts, and MLflow's client waits 4, then 8 s before retrying a request
def test_a_server_stopped_mid_run_and_started_again_receives_every_metric(start_mlflow_server, tmp_path):
    server = start_mlflow_server()
    logger = started(
        tmp_path,
        tracking_uri=server.url,
        experiment_name="faults",
        request_timeout=2.0,
        close_timeout=90.0,
        max_pending=16,
    )
    for step in range(20):
        logger.log_metrics({"loss": float(step), "lr": 0.1}, step)
    assert logger.flush(30)

    server.stop()
    for step in range(20, 60):  # training never waits for the tracker (shown by ordering: the frozen-server test)
        logger.log_metrics({"loss": float(step), "lr": 0.1}, step)
        time.sleep(0.02)
    began = time.monotonic()
    # records wait: flush says so, at its timeout (a liveness bound: a flush waiting for the server never returns)
    assert logger.flush(0.5) is False and time.monotonic() - began < 30
    assert Path(logger.spill_path).exists()  # more than max_pending waited: the oldest went to disk

    server.start()
    for step in range(60, 80):
        logger.log_metrics({"loss": float(step), "lr": 0.1}, step)
    logger.finalize("FINISHED")

    assert logger.undelivered == 0 and logger.lost == 0 and not Path(logger.spill_path).exists()
    assert rest_history(server, logger.run_id, "loss") == [(step, float(step)) for step in range(80)]
    assert rest_history(server, logger.run_id, "lr") == [(step, 0.1) for step in range(80)]
    assert rest_run(server, logger.run_id)["info"]["status"] == "FINISHED"


@pytest.mark.slow  # ~12 s: a server start and the replay process
def test_a_fit_with_the_server_down_throughout_completes_and_the_replay_command_delivers_it(
    start_mlflow_server, tmp_path
):
    port = free_port()
    logger = MLflowLogger(
        tracking_uri=f"http://127.0.0.1:{port}",
        experiment_name="down",
        on_unreachable="queue",
        request_timeout=1.0,
        close_timeout=2.0,
        log_checkpoints=True,
    )
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None)
    trainer = Trainer(**quiet(tmp_path, max_epochs=2, log_every_n_steps=4, loggers=[logger], callbacks=[checkpoints]))
    began = time.monotonic()
    with pytest.warns(UserWarning) as caught:
        trainer.fit(Classifier(), make_loader(), make_loader())
    messages = "\n".join(str(warning.message) for warning in caught)
    assert f"server at http://127.0.0.1:{port} does not answer" in messages
    assert f"could not be delivered within close_timeout (2 s); they are kept in {logger.spill_path}" in messages
    # a liveness bound: the start waits request_timeout (1 s), the end close_timeout (2 s), the fit trains; waiting
    # for the server instead, MLflow's client would retry the refused port for four minutes
    assert time.monotonic() - began < 120
    header, records = read_spill(logger.spill_path)
    assert sorted(record.step for record in records if "train_loss" in record.payload) == [4, 8, 12, 16]
    assert len([record for record in records if record.kind == "artifact"]) == 2

    server = start_mlflow_server(port)
    result = subprocess.run(
        [sys.executable, "-m", "tracktrain.loggers.replay", logger.spill_path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    sent = [record for record in records if record.kind != "status"]
    assert f"{len(sent)} records delivered" in result.stdout and not os.path.exists(logger.spill_path)

    client = tracking.MlflowClient(server.url)
    (run,) = runs_of(client, "down")  # created once, by the replay
    assert [step for step, _ in rest_history(server, run.info.run_id, "train_loss")] == [4, 8, 12, 16]
    assert rest_history(server, run.info.run_id, "val_loss")[-1][1] == pytest.approx(trainer.logged_metrics["val_loss"])
    assert rest_run(server, run.info.run_id)["params"]["trainer/max_epochs"] == "2"
    assert rest_run(server, run.info.run_id)["info"]["status"] == "FINISHED"  # ended by the replay, as fit ended
    listed = rest(server, "artifacts/list", run_id=run.info.run_id, path="checkpoints")["files"]
    assert len(listed) == 2


@pytest.mark.slow  # ~10 s: a server start
def test_a_run_started_while_its_server_is_down_is_created_once_when_it_answers(
    start_mlflow_server, tmp_path, monkeypatch
):
    """on_unreachable="queue" with MLflow's own retries off (the documented knob): the background thread creates
    the run as soon as the server answers, and delivery goes on at once."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    port = free_port()
    with pytest.warns(UserWarning, match="does not answer"):
        logger = started(
            tmp_path,
            tracking_uri=f"http://127.0.0.1:{port}",
            experiment_name="late",
            on_unreachable="queue",
            close_timeout=60.0,
        )
    for step in range(20):
        logger.log_metrics({"loss": float(step)}, step)
    assert logger.run_id is None

    server = start_mlflow_server(port)
    for step in range(20, 40):
        logger.log_metrics({"loss": float(step)}, step)
    began = time.monotonic()
    assert logger.flush(30) and time.monotonic() - began < 5  # flush wakes the waiting thread: no backoff to sit out
    logger.finalize("FINISHED")

    client = tracking.MlflowClient(server.url)
    (run,) = runs_of(client, "late")
    assert run.info.run_id == logger.run_id and run.info.status == "FINISHED"
    assert rest_history(server, logger.run_id, "loss") == [(step, float(step)) for step in range(40)]


# ----------------------------------------------------------------------------------------------- the final model
@pytest.fixture
def mlflow_tracking_uri():
    """Sets MLflow's global tracking URI for `mlflow.pytorch.load_model` and restores it (the logger never sets it)."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None

    def use(uri: str) -> None:
        mlflow.set_tracking_uri(uri)

    yield use
    mlflow.set_tracking_uri(previous)


def test_the_trained_module_is_logged_loadable_and_registered_as_a_new_version(
    sqlite_uri, experiment, tmp_path, mlflow_tracking_uri
):
    import mlflow.pytorch

    module = Classifier()
    Trainer(**quiet(tmp_path, max_epochs=2)).fit(module, make_loader())  # the module now refers to its Trainer
    name = f"classifier-{experiment}"
    runs = []
    for _ in range(2):  # the second run adds version 2 to the registered model the first one created
        logger = started(
            tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment, log_model=True, registered_model_name=name
        )
        logger.log_metrics({"loss": 0.5}, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # it succeeds without a warning of its own
            warnings.filterwarnings("ignore", module="mlflow")
            logger.log_final_model(module)
        logger.finalize("FINISHED")
        runs.append(logger.run_id)

    client = tracking.MlflowClient(sqlite_uri)
    assert client.get_run(runs[0]).info.status == "FINISHED"
    assert steps_and_values(client, runs[0], "loss") == [(1, 0.5)]
    files = {artifact.path for artifact in client.list_artifacts(runs[0], "model")}
    assert {"model/MLmodel", "model/data"} <= files
    mlflow_tracking_uri(sqlite_uri)
    loaded = mlflow.pytorch.load_model(f"runs:/{runs[0]}/model")
    assert type(loaded) is Classifier and loaded._trainer is None  # the Trainer stayed out of the saved model
    x = torch.randn(16, 4)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), module(x), rtol=0, atol=0)
    # the copy was saved, not the module: it still has its Trainer and its parameters
    assert module._trainer is not None and all(p.requires_grad for p in module.parameters())

    versions = sorted(client.search_model_versions(f"name = '{name}'"), key=lambda version: int(version.version))
    assert [(int(version.version), version.run_id) for version in versions] == [(1, runs[0]), (2, runs[1])]
    assert versions[0].source == f"runs:/{runs[0]}/model"
    registered = mlflow.pytorch.load_model(f"models:/{name}/1")
    with torch.no_grad():
        torch.testing.assert_close(registered(x), module(x), rtol=0, atol=0)


def test_without_log_model_nothing_is_saved(sqlite_uri, experiment, tmp_path):
    logger = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment)
    logger.log_final_model(Classifier())
    logger.finalize("FINISHED")
    assert tracking.MlflowClient(sqlite_uri).list_artifacts(logger.run_id) == []


def test_a_model_that_cannot_be_saved_warns_and_the_run_still_ends_finished(sqlite_uri, experiment, tmp_path):
    module = Classifier()
    module.lock = threading.Lock()  # neither copied nor pickled
    logger = started(
        tmp_path,
        tracking_uri=sqlite_uri,
        experiment_name=experiment,
        log_model=True,
        registered_model_name=f"never-{experiment}",
    )
    with pytest.warns(UserWarning, match=r"could not log the trained Classifier to MLflow run .*log_model=False"):
        logger.log_final_model(module)
    logger.finalize("FINISHED")
    client = tracking.MlflowClient(sqlite_uri)
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    assert client.list_artifacts(logger.run_id, "model") == []
    assert client.search_registered_models(f"name = 'never-{experiment}'") == []


def test_registering_needs_log_model():
    with pytest.raises(ValueError, match="registered_model_name='m'.*log_model=True"):
        MLflowLogger(registered_model_name="m")


# ------------------------------------------------------------------------------------------------ system metrics
SYSTEM_METRICS = {
    "system/cpu_utilization_percentage",
    "system/system_memory_usage_megabytes",
    "system/system_memory_usage_percentage",
    "system/disk_usage_percentage",
    "system/network_receive_megabytes",
}


class SlowClassifier(Classifier):
    """Long enough a fit for several samples at a short interval."""

    def train_step(self, batch, batch_idx):
        time.sleep(0.02)
        return super().train_step(batch, batch_idx)


def test_system_metrics_are_sampled_while_training_at_the_global_step(sqlite_uri, experiment, tmp_path):
    logger = MLflowLogger(
        tracking_uri=sqlite_uri, experiment_name=experiment, log_system_metrics=True, system_metrics_interval=0.2
    )
    trainer = Trainer(**quiet(tmp_path, max_epochs=3, log_every_n_steps=1, loggers=[logger]))
    trainer.fit(SlowClassifier(), make_loader())  # 24 steps of > 20 ms: about 3 samples
    assert logger.undelivered == 0
    client = tracking.MlflowClient(sqlite_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert SYSTEM_METRICS <= set(run.data.metrics)  # the names MLflow's "System metrics" tab shows
    memory = client.get_metric_history(logger.run_id, "system/system_memory_usage_megabytes")
    assert len(memory) >= 2 and all(sample.value > 0 for sample in memory)
    steps = [sample.step for sample in sorted(memory, key=lambda sample: sample.timestamp)]
    assert steps == sorted(steps) and 0 < steps[-1] <= 24  # on the training curves' axis
    cpu = client.get_metric_history(logger.run_id, "system/cpu_utilization_percentage")
    assert all(0.0 <= sample.value <= 100.0 for sample in cpu) and max(sample.value for sample in cpu) > 0


def test_system_metrics_follow_mlflows_own_switch_unless_told(sqlite_uri, experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "true")
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.1")
    on = started(tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment, delivery="thread")
    off = started(
        tmp_path, tracking_uri=sqlite_uri, experiment_name=experiment, delivery="thread", log_system_metrics=False
    )
    time.sleep(0.35)
    for logger in (on, off):
        logger.log_metrics({"loss": 1.0}, 1)
        logger.finalize("FINISHED")
    client = tracking.MlflowClient(sqlite_uri)
    assert SYSTEM_METRICS <= set(client.get_run(on.run_id).data.metrics)
    assert set(client.get_run(off.run_id).data.metrics) == {"loss"}


def test_a_bad_system_metrics_interval_is_refused_at_construction():
    with pytest.raises(
        ValueError, match=r"system_metrics_interval=\.\.\.\) must be a positive number of seconds, got 0"
    ):
        MLflowLogger(log_system_metrics=True, system_metrics_interval=0)


def test_system_metrics_without_psutil_name_the_install_at_construction(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # as if it were not installed
    for name in [name for name in sys.modules if name.startswith("mlflow.system_metrics.metrics.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"needs psutil .*pip install psutil, or pip install 'tracktrain\[mlflow\]'"):
        MLflowLogger(log_system_metrics=True)
    MLflowLogger(log_system_metrics=False)  # without them, nothing needs psutil


def test_a_resume_records_changed_settings_as_tags_and_a_finished_rerun_leaves_the_run_alone(
    sqlite_uri, experiment, tmp_path
):
    def fit(max_epochs, clip):
        logger = MLflowLogger(tracking_uri=sqlite_uri, experiment_name=experiment)
        checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt")
        trainer = Trainer(
            **quiet(
                tmp_path,
                max_epochs=max_epochs,
                log_every_n_steps=4,
                loggers=[logger],
                callbacks=[checkpoints],
                resume="auto",
                gradient_clip_val=clip,
            )
        )
        trainer.fit(Classifier(), make_loader())
        return logger.run_id

    client = tracking.MlflowClient(sqlite_uri)
    run_id = fit(1, clip=None)
    with pytest.warns(UserWarning, match=r"changed settings: trainer/gradient_clip_val: None -> 1.0"):
        assert fit(2, clip=1.0) == run_id  # the same run continues
    run = client.get_run(run_id)
    assert run.data.params["trainer/max_epochs"] == "1"  # params stay the run's first settings ...
    assert run.data.tags["tracktrain.changed.trainer/max_epochs"] == "1 -> 2 (resumed at step 8)"  # ... tags say
    assert run.data.tags["tracktrain.changed.trainer/gradient_clip_val"] == "None -> 1.0 (resumed at step 8)"
    history = steps_and_values(client, run_id, "train_loss")
    assert [step for step, _ in history] == [4, 8, 12, 16]

    finished = client.get_run(run_id)
    fit(2, clip=1.0)  # already finished: nothing reaches the run
    again = client.get_run(run_id)
    assert again.info.end_time == finished.info.end_time and again.info.status == "FINISHED"
    assert steps_and_values(client, run_id, "train_loss") == history
    assert len(runs_of(client, experiment)) == 1


def test_two_seeded_runs_get_names_that_tell_them_apart(sqlite_uri, tmp_path):
    """MLflow's own name generator draws from Python's `random`, which a seeded run has set: same seed, same name."""
    import random

    client = tracking.MlflowClient(sqlite_uri)
    names = []
    for attempt in range(2):
        random.seed(0)
        logger = MLflowLogger(experiment_name="names", tracking_uri=sqlite_uri)
        logger.start(str(tmp_path / str(attempt)))
        logger.finalize("FINISHED")
        names.append(client.get_run(logger.run_id).data.tags["mlflow.runName"])
    assert names[0] != names[1]
    assert all(re.fullmatch(r"names-\d{8}-\d{6}-[0-9a-f]{6}", name) for name in names), names


def test_without_a_set_interval_a_short_run_gets_a_sample_every_second_and_a_long_one_about_100():
    from tracktrain_integrations.mlflow_system_metrics import SystemMetricsSampler, adaptive_interval

    assert [adaptive_interval(seconds) for seconds in (0, 50, 100, 1000, 6000, 86400)] == [1, 1, 1, 10, 60, 60]
    samples: list[int] = []
    sampler = SystemMetricsSampler(lambda metrics, step: samples.append(step), lambda: 7)  # no interval: adaptive
    sampler.start()
    time.sleep(3.5)
    sampler.stop()
    assert len(samples) >= 4 and set(samples) == {7}  # 3 in 3.5 s, and the last one at stop (10 s gave 1)
