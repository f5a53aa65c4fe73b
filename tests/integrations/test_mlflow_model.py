"""`tracktrain_integrations.mlflow_model.log_model` against real MLflow (an embedded sqlite store, which has a model
registry): after a fit with `MLflowLogger` and `ModelCheckpoint`, the best checkpoint's model lands in the fit's own
run with a signature and an input example, loads and predicts as that checkpoint does, is registered, and its
torch.export program, or its ONNX file, is kept beside it."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tracktrain import Trainer
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.checkpoint.state import read_checkpoint

from ..trainer._tasks import Classifier, make_loader, quiet

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from tracktrain_integrations.mlflow import MLflowLogger  # noqa: E402
from tracktrain_integrations.mlflow_model import EXPORT_ARTIFACTS, log_model  # noqa: E402


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's own default artifact root is ./mlruns: never the repository's


@pytest.fixture
def global_tracking_uri():
    """MLflow's global tracking URI as the test found it, set back at its end (`runs:/` URIs are read through it)."""
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    yield
    mlflow.set_tracking_uri(previous)


def _fit(tmp_path, sqlite_uri: str) -> tuple[Trainer, MLflowLogger, ModelCheckpoint, Classifier]:
    logger = MLflowLogger(tracking_uri=sqlite_uri, experiment_name=f"export-{time.time_ns()}", delivery="thread")
    callback = ModelCheckpoint(dirpath=str(tmp_path / "checkpoints"), monitor="val_loss", save_top_k=1)
    arguments = {**quiet(tmp_path, max_epochs=3), "enable_checkpointing": True}
    trainer = Trainer(**arguments, loggers=[logger], callbacks=[callback])
    module = Classifier()
    trainer.fit(module, make_loader(), make_loader(seed=1))
    return trainer, logger, callback, module


def _best_checkpoints_outputs(callback: ModelCheckpoint, x: torch.Tensor) -> torch.Tensor:
    expected = Classifier()
    expected.load_state_dict(read_checkpoint(callback.best_model_path)["model"])
    with torch.no_grad():
        want = expected(x)
        assert not torch.equal(want, Classifier()(x))  # the checkpoint is not the initial weights
    return want


def test_the_best_checkpoint_is_logged_to_the_fits_run_with_a_signature_and_an_input_example(
    tmp_path, sqlite_uri, global_tracking_uri
):
    trainer, logger, callback, _ = _fit(tmp_path, sqlite_uri)
    client = MlflowClient(sqlite_uri)
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    x = torch.randn(6, 4)
    uri_before = mlflow.get_tracking_uri()

    # a fresh module: its own weights are the initial ones, the logged model must hold the best checkpoint's
    info = log_model(trainer, Classifier(), x)

    assert mlflow.get_tracking_uri() == uri_before  # MLflow's global URI was the logger's for the call only
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"  # the fit's run holds it and was not reopened
    assert info.run_id == logger.run_id and info.registered_model_version is None
    want = _best_checkpoints_outputs(callback, x)

    mlflow.set_tracking_uri(sqlite_uri)
    model_uri = f"runs:/{logger.run_id}/model"
    loaded = mlflow.pytorch.load_model(model_uri)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), want, rtol=0, atol=0)
    predicted = mlflow.pyfunc.load_model(model_uri).predict(x.numpy())
    np.testing.assert_array_equal(np.asarray(predicted), want.numpy())

    model_info = mlflow.models.get_model_info(model_uri)
    inputs, outputs = model_info.signature.inputs.to_dict(), model_info.signature.outputs.to_dict()
    assert inputs == [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": (-1, 4)}}]
    assert outputs == [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": (-1, 2)}}]
    local = mlflow.artifacts.download_artifacts(model_uri, dst_path=str(tmp_path / "downloaded"))
    example = mlflow.models.Model.load(local).load_input_example(local)
    np.testing.assert_array_equal(example, x.numpy())
    assert client.list_artifacts(logger.run_id, EXPORT_ARTIFACTS) == []  # export=False: no program


def test_a_registered_name_makes_a_model_version_and_export_keeps_the_program_in_the_run(
    tmp_path, sqlite_uri, global_tracking_uri
):
    trainer, logger, callback, fitted = _fit(tmp_path, sqlite_uri)
    name = f"classifier-{time.time_ns()}"
    x = torch.randn(6, 4)

    # the fitted module, which refers to its Trainer: the best checkpoint is loaded into a copy without it
    info = log_model(trainer, fitted, x, registered_model_name=name, export=True)
    assert fitted.trainer is trainer

    client = MlflowClient(sqlite_uri)
    want = _best_checkpoints_outputs(callback, x)
    (version,) = client.search_model_versions(f"name = '{name}'")
    assert version.run_id == logger.run_id and version.status == "READY"
    assert int(info.registered_model_version) == int(version.version) == 1
    mlflow.set_tracking_uri(sqlite_uri)
    registered = mlflow.pytorch.load_model(f"models:/{name}/1")
    assert type(registered) is Classifier and registered._trainer is None  # no Trainer pickled along
    with torch.no_grad():
        torch.testing.assert_close(registered(x), want, rtol=0, atol=0)

    program = client.download_artifacts(logger.run_id, f"{EXPORT_ARTIFACTS}/model.pt2", str(tmp_path / "pt2"))
    exported = torch.export.load(program).module()
    assert exported(torch.randn(3, 4)).shape == (3, 2)  # the batch dimension stayed free
    torch.testing.assert_close(exported(x), want, rtol=0, atol=0)


def test_onnx_keeps_a_checked_onnx_file_in_the_run_that_onnxruntime_runs(tmp_path, sqlite_uri):
    onnxruntime = pytest.importorskip("onnxruntime")
    trainer, logger, callback, fitted = _fit(tmp_path, sqlite_uri)
    x = torch.randn(6, 4)

    log_model(trainer, fitted, x, onnx=True)

    client = MlflowClient(sqlite_uri)
    listed = [artifact.path for artifact in client.list_artifacts(logger.run_id, EXPORT_ARTIFACTS)]
    assert listed == [f"{EXPORT_ARTIFACTS}/model.onnx"]  # export=False: no .pt2; small weights: no external data
    path = client.download_artifacts(logger.run_id, f"{EXPORT_ARTIFACTS}/model.onnx", str(tmp_path / "onnx"))
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (feed,) = session.get_inputs()
    for batch in (x, torch.randn(3, 4)):  # the example, and another batch size: the batch dimension stayed free
        (got,) = session.run(None, {feed.name: batch.numpy()})
        torch.testing.assert_close(
            torch.from_numpy(got), _best_checkpoints_outputs(callback, batch), rtol=1e-4, atol=1e-5
        )


def test_without_an_mlflow_logger_or_a_checkpoint_to_take_it_says_what_to_pass(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=1), loggers=False)
    with pytest.raises(ValueError, match=r"Trainer has 0 MLflowLogger\(s\).*loggers=\[MLflowLogger"):
        log_model(trainer, Classifier(), torch.randn(2, 4))

    logger = MLflowLogger(tracking_uri=f"sqlite:///{tmp_path / 'never.db'}")  # never started: no run
    with pytest.raises(RuntimeError, match=r"has no MLflow run yet.*after trainer\.fit"):
        log_model(logger, Classifier(), torch.randn(2, 4), checkpoint=None)

    started = SimpleNamespace(loggers=[logger], callbacks=[])  # a run and its URI, no ModelCheckpoint for "best"
    logger.resume("0" * 32)  # a run id, as a resumed fit has (the URI was given)
    with pytest.raises(ValueError, match=r"checkpoint='best'.*has 0 to choose from.*checkpoint=None"):
        log_model(started, Classifier(), torch.randn(2, 4))
