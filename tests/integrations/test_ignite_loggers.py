"""Ignite's tracker loggers (`tracktrain.handlers.tensorboard_logger`, `.mlflow_logger`, `.wandb_logger`) as faces
over tracktrain's: the same engine run logged through Ignite 0.5.5's logger and through ours lands the same names,
steps and values in real TensorBoard event files, a real MLflow store and real offline W&B runs, read back with each
tracker's own reader; the faces are our queued loggers, so a tracker outage loses nothing."""

from __future__ import annotations

import importlib
import os
import time

import pytest
import torch

from tests.integrations.test_mlflow import eventually
from tracktrain.engine import Engine, Events

ignite_engine = pytest.importorskip("ignite.engine")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def training(engine_cls, events):
    """A tiny deterministic training engine and an evaluator that logs at the trainer's epochs."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.05}], lr=0.1)
    data = [torch.full((2, 3), float(i)) for i in range(4)]

    def step(engine, batch):
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    trainer = engine_cls(step)
    evaluator = engine_cls(lambda e, b: None)

    @evaluator.on(events.COMPLETED)
    def metrics(engine):
        engine.state.metrics.update(accuracy=0.25 * trainer.state.epoch, nested={"a": 1.0, "b": [2.0, 3.0]})

    trainer.add_event_handler(events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
    return model, optimizer, trainer, evaluator, data


def attach(module, logger, events, model, optimizer, trainer, evaluator):
    logger.attach_output_handler(
        trainer, events.ITERATION_COMPLETED(every=2), tag="training", output_transform=lambda loss: {"loss": loss}
    )
    logger.attach_opt_params_handler(trainer, events.ITERATION_STARTED, optimizer=optimizer)
    logger.attach_output_handler(
        evaluator,
        events.COMPLETED,
        tag="validation",
        metric_names="all",
        global_step_transform=module.global_step_from_engine(trainer),
    )
    if hasattr(module, "WeightsScalarHandler"):
        logger.attach(trainer, module.WeightsScalarHandler(model), events.ITERATION_COMPLETED)
        logger.attach(trainer, module.GradsScalarHandler(model, reduction=torch.sum), events.ITERATION_COMPLETED)
        logger.attach(trainer, module.GradsHistHandler(model), events.EPOCH_COMPLETED)


def run_both(make_logger, module_name):
    """The same run logged through Ignite's logger and through ours; each logger's (what make_logger returns)."""
    loggers = {}
    for lib, engine_module in (("ignite", ignite_engine), ("tracktrain", importlib.import_module("tracktrain.engine"))):
        module = importlib.import_module(f"{lib}.handlers.{module_name}")
        model, optimizer, trainer, evaluator, data = training(engine_module.Engine, engine_module.Events)
        logger = make_logger(module, lib)
        attach(module, logger, engine_module.Events, model, optimizer, trainer, evaluator)
        trainer.run(data, max_epochs=2)
        logger.close()
        loggers[lib] = logger
    return loggers


def scalars(log_dir):
    accumulator = event_accumulator.EventAccumulator(str(log_dir), size_guidance={"histograms": 0})
    accumulator.Reload()
    values = {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }
    return values, sorted(accumulator.Tags()["histograms"])


def test_tensorboard_event_files_hold_what_ignites_logger_writes(tmp_path):
    run_both(lambda module, lib: module.TensorboardLogger(log_dir=tmp_path / lib, flush_secs=1), "tensorboard_logger")
    (ignite_scalars, ignite_histograms), (ours, our_histograms) = (
        scalars(tmp_path / "ignite"),
        scalars(tmp_path / "tracktrain"),
    )
    assert sorted(ours) == sorted(ignite_scalars)
    assert {"training/loss", "lr/group_1", "validation/nested/b/1", "weights_norm/weight", "grads_sum/bias"} <= set(
        ours
    )
    for tag in ignite_scalars:
        assert [step for step, _ in ours[tag]] == [step for step, _ in ignite_scalars[tag]], tag
        assert [value for _, value in ours[tag]] == pytest.approx([value for _, value in ignite_scalars[tag]]), tag
    assert our_histograms == ignite_histograms == ["grads/bias", "grads/weight"]


def test_tensorboard_logger_takes_summary_writers_arguments_only(tmp_path, monkeypatch):
    from tracktrain.handlers.tensorboard_logger import TensorboardLogger

    with pytest.raises(TypeError, match=r"SummaryWriter does not take: \['bogus'\]"):
        TensorboardLogger(log_dir=tmp_path, bogus=1)
    monkeypatch.chdir(tmp_path)
    logger = TensorboardLogger(comment="-x")
    logger.writer.add_text("note", "hello")
    logger.close()
    (run,) = os.listdir(tmp_path / "runs")
    assert run.endswith("-x")  # SummaryWriter's default folder


def mlflow_history(uri):
    from mlflow import tracking

    client = tracking.MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "Default"]
    (run,) = client.search_runs([experiment.experiment_id])
    return (
        client,
        run,
        {
            key: [
                (m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
            ]
            for key in run.data.metrics
        },
    )


@pytest.mark.slow  # ~15 s: two MLflow stores, and our logger's sender child (test_mlflow_logger_offers... is fast)
def test_mlflow_store_holds_what_ignites_logger_logs(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uris = {lib: f"sqlite:///{tmp_path / lib}.db" for lib in ("ignite", "tracktrain")}
    monkeypatch.chdir(tmp_path)

    def make(module, lib):
        logger = module.MLflowLogger(tracking_uri=uris[lib])
        logger.log_params({"lr": 0.1, "model": "linear"})
        return logger

    run_both(make, "mlflow_logger")
    _, ignite_run, ignite_history = mlflow_history(uris["ignite"])
    client, run, history = mlflow_history(uris["tracktrain"])
    assert sorted(history) == sorted(ignite_history)
    assert {"training loss", "lr group_1", "validation accuracy", "validation nested b 1"} <= set(history)
    for key, expected in ignite_history.items():
        assert [step for step, _ in history[key]] == [step for step, _ in expected], key
        assert [value for _, value in history[key]] == pytest.approx([value for _, value in expected]), key
    assert run.data.params == ignite_run.data.params == {"lr": "0.1", "model": "linear"}
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


@pytest.mark.slow  # ~8 s: a store, and the sender child our MLflow logger delivers through
def test_mlflow_logger_offers_the_runs_calls_by_name(tmp_path):
    pytest.importorskip("mlflow")
    from tracktrain.handlers.mlflow_logger import MLflowLogger
    from tracktrain_integrations.mlflow import MLflowLogger as QueuedMLflowLogger

    with MLflowLogger(tracking_uri=f"sqlite:///{tmp_path}/m.db") as logger:
        assert isinstance(logger.tracker, QueuedMLflowLogger)  # our delivery, spill file included
        logger.set_tag("stage", "test")
        logger.log_metric("x", 2.0, step=3)
        with pytest.raises(AttributeError, match="has no 'log_figure'.*offers log_params"):
            _ = logger.log_figure
    from mlflow import tracking

    run = tracking.MlflowClient(f"sqlite:///{tmp_path}/m.db").get_run(logger.run_id)
    assert run.data.tags["stage"] == "test" and run.data.metrics == {"x": 2.0}


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for variable in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


@pytest.mark.slow  # ~15 s: two offline W&B runs, each read back by W&B's own reader in a subprocess
def test_wandb_runs_hold_what_ignites_logger_logs(offline_wandb):
    from tests.integrations._wandb_runs import read_run

    loggers = run_both(
        lambda module, lib: module.WandBLogger(project=f"p-{lib}", dir=str(offline_wandb / lib), config={"lr": 0.1}),
        "wandb_logger",
    )
    runs = {}
    for lib in loggers:
        (run_dir,) = (offline_wandb / lib / "wandb").glob("offline-run-*")
        runs[lib] = read_run(run_dir)

    def rows(run):
        return {row["_step"]: {k: v for k, v in row.items() if k != "_step"} for row in run["history"]}

    ours, theirs = rows(runs["tracktrain"]), rows(runs["ignite"])
    assert sorted(ours) == sorted(theirs)
    for step, row in theirs.items():
        assert sorted(ours[step]) == sorted(row), step
        for key, value in row.items():
            assert ours[step][key] == pytest.approx(value), (step, key)
    assert "training/loss" in ours[2] and "lr/group_1" in ours[1]
    assert runs["tracktrain"]["exit_code"] == 0


def test_wandb_logger_refuses_what_it_would_ignore(offline_wandb):
    from tracktrain.handlers.wandb_logger import OutputHandler, WandBLogger

    with pytest.raises(TypeError, match="by keyword"):
        WandBLogger("project")
    with pytest.raises(ValueError, match="init=False"):
        WandBLogger(init=False)
    with pytest.raises(ValueError, match="drop reinit"):
        WandBLogger(reinit=True)
    with pytest.warns(UserWarning, match="sync argument"):
        OutputHandler("t", metric_names="all", sync=True)


@pytest.mark.slow  # ~20 s: two server starts, and MLflow's client waits before retrying
def test_an_mlflow_outage_mid_run_loses_nothing(start_mlflow_server, tmp_path, monkeypatch):
    """Ignite's MLflowLogger talks to MLflow in the training loop (an outage fails the run); ours queues, so a
    server stopped mid-run and started again receives every value."""
    from tracktrain.handlers.mlflow_logger import MLflowLogger

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = start_mlflow_server()
    logger = MLflowLogger(tracking_uri=server.url)
    engine = Engine(lambda e, batch: torch.tensor(float(e.state.iteration)))
    logger.attach_output_handler(engine, Events.ITERATION_COMPLETED, tag="t", output_transform=lambda x: {"x": x})

    @engine.on(Events.ITERATION_COMPLETED(once=20))
    def outage():
        server.stop()

    @engine.on(Events.ITERATION_COMPLETED(once=40))
    def back():
        server.start()

    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda: time.sleep(0.01))
    engine.run(range(60), max_epochs=1)
    logger.close()
    from mlflow import tracking

    client = tracking.MlflowClient(server.url)
    assert eventually(lambda: len(client.get_metric_history(logger.run_id, "t x")) == 60, 30)
    history = sorted((m.step, m.value) for m in client.get_metric_history(logger.run_id, "t x"))
    assert history == [(step, float(step)) for step in range(1, 61)]
