"""Two real gloo processes: EarlyStopping stops both ranks together when only one asks, the trackers' values are
over both ranks' data, and only rank 0 writes the printed lines."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from tests import _processes
from tracktrain_integrations.testing import free_port

from .conftest import TinyModule, batches, logged_messages

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

# rank 1's value stops improving at its second validation; rank 0's keeps improving
SCRIPTS = {0: [1.0, 0.9, 0.8, 0.7, 0.6], 1: [1.0, 1.1, 1.2, 1.3, 1.4]}


def _worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from tracktrain.callbacks.early_stopping import EarlyStopping
    from tracktrain.callbacks.metric_printer import MetricPrinter
    from tracktrain.callbacks.metric_tracking import AccuracyTracker
    from tracktrain.distributed.logger import get_dist_logger
    from tracktrain.trainer import Trainer

    torch.set_num_threads(1)
    out = Path(out_dir)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=30)
    )
    try:
        logger = get_dist_logger("printer")
        logger.log_to_file(out)
        early_stopping = EarlyStopping("val_metric", patience=1)
        trainer = Trainer(
            max_epochs=5,
            enable_progress_bar=False,
            enable_checkpointing=False,
            default_root_dir=out,
            callbacks=[early_stopping, MetricPrinter(logger), AccuracyTracker()],
        )
        module = TinyModule(val_script=SCRIPTS[rank])
        trainer.fit(module, batches(2, seed=rank), batches(2, batch_size=3 + 4 * rank, seed=10 + rank))
        result = {
            "validations": module.validations,
            "stopped_epoch": early_stopping.stopped_epoch,
            "reason": early_stopping.stopping_reason.name,
            "val_accuracy": float(trainer.callback_metrics["val_accuracy"]),
            "weights": module.net.weight.detach().tolist(),
            "bias": module.net.bias.detach().tolist(),
        }
        (out / f"result_{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # leave as tracktrain.distributed.spawn's ranks do: under load, torch's process-group threads can still be
    # joinable at interpreter exit, which aborts a process whose work is done
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.importorskip("torch.multiprocessing")
    out = tmp_path_factory.mktemp("ranks")
    with _processes.stopped_on_exit("the callback tests' ranks"):  # a rank that hangs: its stack, then killed
        mp.spawn(_worker, args=(free_port(), str(out)), nprocs=2, join=True)
    return out


def results(out: Path) -> list[dict]:
    return [json.loads((out / f"result_{rank}.json").read_text()) for rank in (0, 1)]


def test_one_rank_asking_to_stop_stops_both_at_the_same_epoch(two_ranks):
    rank0, rank1 = results(two_ranks)
    assert rank1["reason"] == "PATIENCE_EXHAUSTED" and rank0["reason"] == "NOT_STOPPED"
    assert rank0["validations"] == rank1["validations"] == 2
    assert rank0["stopped_epoch"] == rank1["stopped_epoch"] == 1


def test_accuracy_is_over_both_ranks_validation_data(two_ranks):
    correct, total = 0, 0
    for rank, result in enumerate(results(two_ranks)):
        net = torch.nn.Linear(3, 2)
        with torch.no_grad():
            net.weight.copy_(torch.tensor(result["weights"]))
            net.bias.copy_(torch.tensor(result["bias"]))
            for x, y in batches(2, batch_size=3 + 4 * rank, seed=10 + rank):
                correct += int((net(x).argmax(1) == y).sum())
                total += len(y)
    assert total == 20
    assert results(two_ranks)[0]["val_accuracy"] == results(two_ranks)[1]["val_accuracy"] == correct / total


def test_only_rank_zero_writes_the_lines(two_ranks):
    rank0_lines = logged_messages(two_ranks / "rank_0.log")
    assert [line.split(" | ")[0] for line in rank0_lines] == ["Epoch 1/5", "Epoch 2/5"]
    assert all("val_metric=" in line and "val_accuracy=" in line for line in rank0_lines)
    assert (two_ranks / "rank_1.log").read_text() == ""
