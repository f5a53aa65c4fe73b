"""The Colossal-AI example from the seed (engine + trainer + hooks + test interval + progress display) runs as
written apart from its imports, on real data (scikit-learn's digits) with real hooks writing real files."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

pytest.importorskip("tensorboard")


def test_seed_example_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # ---- the imports: the only lines that differ from the seed ------------------------------------------------
    import tracktrain.colossal as colossalai
    from tracktrain.colossal import MultiTimer, Trainer, get_dist_logger, hooks
    from tracktrain.colossal.nn.metric import Accuracy

    features, labels = load_digits(return_X_y=True)
    dataset = TensorDataset(torch.tensor(features / 16.0, dtype=torch.float32), torch.tensor(labels))
    train_dataset, test_dataset = torch.utils.data.random_split(
        dataset, [1400, 397], generator=torch.Generator().manual_seed(0)
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)
    train_dataloader = colossalai.get_dataloader(train_dataset, shuffle=True, batch_size=64)
    test_dataloader = colossalai.get_dataloader(test_dataset, batch_size=256)
    NUM_EPOCHS = 3

    # ---- the seed, as written --------------------------------------------------------------------------------
    engine, train_dataloader, test_dataloader, _ = colossalai.initialize(
        model, optimizer, criterion, train_dataloader, test_dataloader
    )

    timer = MultiTimer()
    logger = get_dist_logger()

    # if you want to save log to file
    logger.log_to_file("./logs/")

    trainer = Trainer(engine=engine, timer=timer, logger=logger)

    hook_list = [
        hooks.LossHook(),
        hooks.LRSchedulerHook(lr_scheduler=lr_scheduler, by_epoch=False),
        hooks.AccuracyHook(accuracy_func=Accuracy()),
        hooks.TensorboardHook(log_dir="./tb_logs", ranks=[0]),
        hooks.LogMetricByEpochHook(logger),
        hooks.LogMemoryByEpochHook(logger),
        hooks.LogTimingByEpochHook(timer, logger),
        hooks.SaveCheckpointHook(checkpoint_dir="./ckpt"),
    ]

    trainer.fit(
        train_dataloader=train_dataloader,
        epochs=NUM_EPOCHS,
        test_dataloader=test_dataloader,
        test_interval=1,
        hooks=hook_list,
        display_progress=True,
    )

    # ---- what it did -----------------------------------------------------------------------------------------
    log = (tmp_path / "logs" / "rank_0.log").read_text()
    epochs = re.findall(r"Epoch (\d)/3 \|.*train_loss_avg=([\d.]+).*val_accuracy=([\d.]+)", log)
    assert [int(e[0]) for e in epochs] == [1, 2, 3], log
    assert float(epochs[-1][2]) > 0.9  # an MLP on digits
    assert float(epochs[-1][1]) < float(epochs[0][1])
    assert "throughput/samples_per_sec=" in log and "memory/rss_mb=" in log, log
    assert len(list((tmp_path / "ckpt").glob("*.pt"))) == NUM_EPOCHS
    assert list((tmp_path / "tb_logs" / "rank_0").glob("events.out.tfevents.*"))
    steps = trainer.cur_step
    assert steps == NUM_EPOCHS * 22  # 1400 / 64 -> 22 batches per epoch
    assert lr_scheduler.last_epoch == steps  # stepped once per optimizer step (by_epoch=False)
    assert trainer.metrics["lr"] == pytest.approx(optimizer.param_groups[0]["lr"])


def test_trainer_needs_the_model_engine():
    from tracktrain.colossal import Trainer

    with pytest.raises(TypeError, match="takes the ModelEngine from tracktrain.colossal.initialize"):
        Trainer(engine=nn.Linear(2, 2))


def test_lr_scheduler_hook_state_rides_in_the_checkpoints(tmp_path, monkeypatch):
    from tracktrain.colossal import Trainer, hooks, initialize

    monkeypatch.chdir(tmp_path)  # Colossal-AI's Trainer writes its logs under the working directory

    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    engine, *_ = initialize(model, optimizer, nn.CrossEntropyLoss())
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
    Trainer(engine).fit(
        data,
        epochs=2,
        hooks=[
            hooks.LRSchedulerHook(scheduler, by_epoch=True),
            hooks.SaveCheckpointHook(checkpoint_dir=str(tmp_path / "ckpt")),
        ],
    )
    saved = torch.load(sorted((tmp_path / "ckpt").glob("*.pt"))[-1], weights_only=False)
    state = saved["trainer"]["callbacks"]["LRSchedulerHook"]["scheduler"]
    assert state["last_epoch"] == 2 and state["_last_lr"] == [0.25]


def test_unsupported_hook_arguments_are_refused_not_ignored():
    from tracktrain.colossal import MultiTimer, get_dist_logger, hooks

    with pytest.raises(ValueError, match=r"LogTimingByEpochHook\(interval=2\) is not supported"):
        hooks.LogTimingByEpochHook(MultiTimer(), get_dist_logger(), interval=2)


def test_hooks_run_in_order_of_their_priority_as_colossal_ai_sorts_them(tmp_path, monkeypatch):
    """Colossal-AI's trainer sorts its hooks by `priority` (lower first, stable); the facade hands them to the
    Trainer in that order, and within a phase the Trainer runs them in the order given."""
    from tracktrain.colossal import Trainer, hooks, initialize

    monkeypatch.chdir(tmp_path)
    calls: list[str] = []

    class Tagged(hooks.BaseHook):
        def __init__(self, tag: str, priority: int) -> None:
            super().__init__(priority)
            self.tag = tag

        def after_train_epoch(self, trainer):
            calls.append(self.tag)

    model = nn.Linear(4, 2)
    engine, *_ = initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss())
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))]
    given = [Tagged("ten", 10), Tagged("one", 1), Tagged("default", 0), Tagged("one-again", 1)]
    Trainer(engine).fit(data, epochs=1, hooks=given)
    assert calls == ["default", "one", "one-again", "ten"]
