#!/usr/bin/env python
"""Steps per second of `Trainer(compile=True)` next to `Trainer(compile=False)`, and of a hand-written loop over
the same model, eager and through `torch.compile`, in the same run: on the medium MLP and on a small transformer
(two `nn.TransformerEncoderLayer` blocks, d_model 128, 4 heads, sequences of 32, a classifier head).

Every variant trains a fresh copy of the same weights on the same batches with SGD. One sample is one fit's steps
per second from the start of its second epoch to its end: the first epoch, where torch.compile traces and builds
its kernels, stays out. One untimed warm-up fit of each variant, then `--repeats` rounds of one fit of each, in an
order shuffled per round.

    .venv/bin/python benchmarks/bench_compile.py --quick      # smoke test
    .venv/bin/python benchmarks/bench_compile.py              # the real run, 1-4 minutes on 2 cores (4
                                                              # compiles; inductor's disk cache may hold them)

What to read: "× vs" a variant's eager twin (paired per round) says what compile buys on this CPU; "× vs" the
hand-written loop in the same mode says what the Trainer costs around it. Timing never makes this script fail; it
exits with status 1 when a fit trained other weights than its eager twin beyond float tolerance (a compiled graph
may reorder float sums) or took the wrong number of steps.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness as h
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from workloads import LEARNING_RATE, EngineClock, Fit, bare_trainer, make_mlp, mlp_name, timed_epochs

from tracktrain import LoopModule

MLP_SIZES = (256, 512, 512, 10)
SEQUENCE, WIDTH, CLASSES = 32, 128, 10


# ------------------------------------------------------------------------------------------------- workloads
class SmallTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, dropout=0.0, batch_first=True) for _ in range(2)]
        )
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


@dataclass
class Workload:
    """A model's initial weights and a loader over fixed batches: every fit does the same arithmetic."""

    name: str
    build: Callable[[], nn.Module]
    loader: DataLoader
    initial: dict[str, torch.Tensor]

    @classmethod
    def make(cls, name: str, build: Callable[[], nn.Module], inputs: torch.Tensor, batch_size: int) -> Workload:
        targets = torch.randint(0, CLASSES, (len(inputs),), generator=torch.Generator().manual_seed(1))
        torch.manual_seed(0)
        initial = {key: value.clone() for key, value in build().state_dict().items()}
        return cls(name, build, DataLoader(TensorDataset(inputs, targets), batch_size=batch_size), initial)

    def fresh(self) -> nn.Module:
        net = self.build()
        net.load_state_dict(self.initial)
        return net


def workloads(batches: int) -> list[Workload]:
    generator = torch.Generator().manual_seed(0)
    return [
        Workload.make(
            mlp_name(MLP_SIZES),
            lambda: make_mlp(MLP_SIZES),
            torch.randn(32 * batches, MLP_SIZES[0], generator=generator),
            32,
        ),
        Workload.make(
            f"transformer 2 x (d{WIDTH}, 4 heads), seq {SEQUENCE}",
            SmallTransformer,
            torch.randn(16 * batches, SEQUENCE, WIDTH, generator=generator),
            16,
        ),
    ]


# -------------------------------------------------------------------------------------------------- variants
class Classifier(LoopModule):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


def tracktrain_fit(workload: Workload, epochs: int, compiled: bool) -> Fit:
    trainer = bare_trainer(max_epochs=epochs, compile=compiled)
    clock = EngineClock(trainer)
    net = workload.fresh()
    trainer.fit(Classifier(net), workload.loader)
    return Fit.timed(clock, trainer, net)


def hand_written_fit(workload: Workload, epochs: int, compiled: bool) -> Fit:
    """The loop a user writes: forward through the (compiled) model, cross-entropy, backward, SGD step."""
    net = workload.fresh()
    model = torch.compile(net) if compiled else net
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)

    def epoch(_: int) -> int:
        for inputs, targets in workload.loader:
            optimizer.zero_grad()
            F.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
        return len(workload.loader)

    seconds, cpu, timed, steps = timed_epochs(epochs, epoch)
    return Fit(seconds, timed, steps, net, cpu_seconds=cpu)


VARIANTS: dict[str, Callable[[Workload, int], Fit]] = {
    "tracktrain eager": lambda workload, epochs: tracktrain_fit(workload, epochs, compiled=False),
    "tracktrain compile=True": lambda workload, epochs: tracktrain_fit(workload, epochs, compiled=True),
    "hand-written eager": lambda workload, epochs: hand_written_fit(workload, epochs, compiled=False),
    "hand-written torch.compile": lambda workload, epochs: hand_written_fit(workload, epochs, compiled=True),
}
TWINS = {  # what each variant is compared with: its eager twin, and the hand-written loop in its mode
    "tracktrain eager": "hand-written eager",
    "tracktrain compile=True": ("tracktrain eager", "hand-written torch.compile"),
    "hand-written torch.compile": "hand-written eager",
}


# --------------------------------------------------------------------------------------------------- running
def check(workload: Workload, key: str, fit: Fit, reference: dict[str, torch.Tensor], steps: int, problems: list[str]):
    if fit.steps != steps:
        problems.append(f"{workload.name} / {key}: {fit.steps} steps, expected {steps}")
    trained = fit.net.state_dict()
    for name, value in reference.items():
        if not torch.allclose(trained[name], value, rtol=1e-4, atol=1e-5):
            problems.append(f"{workload.name} / {key}: {name} differs from the eager hand-written loop's")
            return


def measure(workload: Workload, args: Any, rng: Any, problems: list[str]) -> dict[str, list[float]]:
    """On the harness (the warm-up fit compiles): each variant's steps/s from its fits' second epoch on."""
    steps = args.epochs * args.batches
    reference = VARIANTS["hand-written eager"](workload, args.epochs).net.state_dict()

    def run(key: str) -> float:
        h.before_run(args.threads)
        fit = VARIANTS[key](workload, args.epochs)
        check(workload, key, fit, reference, steps, problems)
        return fit.timed_steps / fit.seconds

    return h.measure(list(VARIANTS), args.repeats, rng, run)


def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (5, 1, "timed fits per variant, after one warm-up fit"),
            "epochs": (3, 2, "epochs of a fit, the first not timed"),
            "batches": (30, 4, "batches per epoch"),
        },
        positive=["repeats", "batches"],
        at_least_two=["epochs"],
        lightning=False,
        stat_of="the fits",
    )
    rng = h.prepare(args)
    env = h.start(
        "torch.compile: tracktrain and a hand-written loop, eager and compiled",
        args,
        f"{args.repeats} timed fits per variant",
    )
    problems: list[str] = []
    rows = []
    cases = workloads(args.batches)
    h.freeze_garbage()
    for workload in cases:
        rows += h.compare(workload.name, measure(workload, args, rng, problems), TWINS, "steps/s", args.stat)
    h.report(rows)
    print(
        f"value: over {args.repeats} fits, steps from the 2nd epoch's start to the fit's end over that time "
        f"({(args.epochs - 1) * args.batches} steps per fit); the first epoch holds the compile, and the warm-up fit "
        "the first compile of each variant."
    )
    return h.finish(args, {"environment": env, "arguments": vars(args), "rows": rows}, problems)


if __name__ == "__main__":
    sys.exit(main())
