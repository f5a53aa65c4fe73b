"""`tracktrain.contrib.engines.common`, Ignite's common training set-up: the same checkpoint files, running averages,
best-model files, early stopping and TensorBoard tags as Ignite 0.5.5's for the same run."""

from __future__ import annotations

import importlib
import os

import pytest
import torch

pytest.importorskip("ignite.contrib.engines.common")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def run(lib: str, folder):
    engine_module = importlib.import_module(f"{lib}.engine")
    common = importlib.import_module(f"{lib}.contrib.engines.common")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(5)]

    def step(engine, batch):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return {"loss": loss.item(), "twice": 2 * loss.item()}

    trainer = engine_module.Engine(step)
    evaluator = engine_module.Engine(lambda e, b: None)
    scores = iter([0.5, 0.7, 0.6, 0.4, 0.3, 0.2])
    evaluator.add_event_handler(engine_module.Events.COMPLETED, lambda e: e.state.metrics.update(acc=next(scores)))
    trainer.add_event_handler(engine_module.Events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
    common.setup_common_training_handlers(
        trainer,
        to_save={"model": model, "optimizer": optimizer},
        save_every_iters=4,
        output_path=str(folder / "training"),
        lr_scheduler=torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5),
        output_names=["loss", "twice"],
        with_pbars=False,
    )
    best = common.save_best_model_by_val_score(
        str(folder / "best"), evaluator, model, "acc", n_saved=2, trainer=trainer
    )
    stopping = common.add_early_stopping_by_val_score(2, evaluator, trainer, "acc")
    tb = common.setup_tb_logging(
        str(folder / "tb"), trainer, optimizer, evaluators={"val": evaluator}, log_every_iters=2
    )
    averages = []
    trainer.add_event_handler(
        engine_module.Events.ITERATION_COMPLETED, lambda e: averages.append(dict(e.state.metrics))
    )
    state = trainer.run(data, max_epochs=6)
    tb.close()
    return {
        "training": sorted(os.listdir(folder / "training")),
        "best": sorted(os.listdir(folder / "best")),
        "averages": [{k: float(v) for k, v in row.items()} for row in averages],
        "stopped_at": state.epoch,
        "stopping": (stopping.counter, stopping.best_score),
        "best_saved": [item.filename for item in best._saved],
        "lr": optimizer.param_groups[0]["lr"],
        "tb": scalars(folder / "tb"),
    }


def scalars(log_dir):
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_the_common_set_up_does_what_ignites_does(tmp_path):
    theirs = run("ignite", tmp_path / "ignite")
    ours = run("tracktrain", tmp_path / "tracktrain")
    for key in ("training", "best", "stopped_at", "stopping", "best_saved", "lr"):
        assert ours[key] == theirs[key], key
    assert len(ours["averages"]) == len(theirs["averages"]) == 20
    for mine, their in zip(ours["averages"], theirs["averages"]):
        assert mine == pytest.approx(their)
    assert sorted(ours["tb"]) == sorted(theirs["tb"])
    for tag, points in theirs["tb"].items():
        assert [s for s, _ in ours["tb"][tag]] == [s for s, _ in points], tag
        assert [v for _, v in ours["tb"][tag]] == pytest.approx([v for _, v in points]), tag


def test_what_the_common_set_up_refuses(tmp_path):
    from tracktrain.contrib.engines import common
    from tracktrain.engine import Engine
    from tracktrain.handlers import logger_utils

    trainer = Engine(lambda e, b: None)
    with pytest.raises(ValueError, match="output_path and save_handler are mutually exclusive"):
        common.setup_common_training_handlers(trainer, output_path="x", save_handler=lambda *a: None)
    with pytest.raises(ValueError, match="output_path or save_handler arguments should be also defined"):
        common.setup_common_training_handlers(trainer, to_save={"model": torch.nn.Linear(1, 1)})
    with pytest.warns(UserWarning, match="Train sampler argument will be ignored"):
        common.setup_common_training_handlers(
            trainer, train_sampler=torch.utils.data.DistributedSampler(list(range(4)), num_replicas=1, rank=0)
        )
    with pytest.raises(NotImplementedError, match="does not offer Ignite's Visdom logger: log to TensorBoard"):
        logger_utils.setup_visdom_logging(trainer)
    with pytest.raises(TypeError, match="Argument optimizers should be either a single optimizer"):
        logger_utils.setup_tb_logging(str(tmp_path), trainer, optimizers=3)
    from tracktrain.contrib.handlers import ProgressBar
    from tracktrain.handlers import ProgressBar as Ours

    assert ProgressBar is Ours
