"""One process of one fit of `bench_ft_ddp.py`, started by it as a script (each fit is new processes, as a replica
group is): the medium MLP of `workloads.py` trained by `Trainer(strategy=...)` for `--steps` optimizer steps, the
clock read at every step's end; what it measured is written to OUT as JSON.

    python benchmarks/ft_fits.py {ddp,ft_ddp,single} STEPS OUT [--sleep S] [--first-step-only] [--threads T]

ddp: one of the processes torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) describe; ft_ddp: one
replica group (TORCHFT_LIGHTHOUSE, TRACKTRAIN_FT_GROUP, TRACKTRAIN_FT_GROUPS); single: one process alone.
`--sleep`: seconds slept after each step (a running group that others join); `--first-step-only`: stop after the
first step (a group that joins, or a plain process's start-up).
"""

from __future__ import annotations

import argparse
import json
import time

STARTED = time.time()  # before torch is imported: this process's start, on the clock the parent reads too

import torch  # noqa: E402
from workloads import Classifier, ClassifierData  # noqa: E402

from tracktrain import Callback, Trainer  # noqa: E402

SIZES, BATCH, BATCHES = (256, 512, 512, 10), 64, 50  # the medium MLP of bench_trainer_overhead.py


class Clock(Callback):
    """Every step's end (perf_counter), the first one's wall-clock time and quorum size; stops where asked."""

    def __init__(self, strategy: object, sleep: float, first_only: bool) -> None:
        self.strategy = strategy
        self.sleep = sleep
        self.first_only = first_only
        self.ends: list[float] = []
        self.first_wall: float | None = None
        self.first_step = 0
        self.participants: float | None = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())
        if self.first_wall is None:
            self.first_wall, self.first_step = time.time(), trainer.global_step
            manager = getattr(self.strategy, "manager", None)
            self.participants = float(manager.num_participants()) if manager is not None else None
            if self.first_only:
                trainer.should_stop = True
        if self.sleep:
            time.sleep(self.sleep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategy", choices=["ddp", "ft_ddp", "single"])
    parser.add_argument("steps", type=int)
    parser.add_argument("out")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--first-step-only", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    data = ClassifierData(SIZES, BATCH, BATCHES, args.seed)
    module = Classifier(data.fresh_net())
    strategy: object = "auto"
    if args.strategy == "ft_ddp":
        from tracktrain.trainer.strategies import FTDDPStrategy

        strategy = FTDDPStrategy()  # its lighthouse and group from the environment
    elif args.strategy == "ddp":
        strategy = "ddp"
    clock = Clock(strategy, args.sleep, args.first_step_only)
    trainer = Trainer(
        strategy=strategy,
        max_steps=args.steps,
        max_epochs=None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    trainer.fit(module, data.loader)
    weights = [float(p.detach().double().sum()) for p in module.parameters()]
    result = {
        "started": STARTED,
        "first_step_wall": clock.first_wall,
        "first_step": clock.first_step,
        "participants": clock.participants,
        "ends": clock.ends,
        "global_step": trainer.global_step,
        "weights": weights,
        "threads": torch.get_num_threads(),
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
