"""The variants `bench_logging.py` times: the module that logs 5 metrics at every step (and Lightning's twin), one
fit of each framework with a given logger, and the list of variants with the trackers installed here."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import workloads
from logging_trackers import Delivery, Trackers, tracktrain_delivery
from torch import nn
from workloads import (
    LEARNING_RATE,
    ClassifierData,
    EngineClock,
    bare_trainer,
    lightning_clock,
    lightning_trainer,
    lightning_twin,
)

from tracktrain import LoopModule

TRACKTRAIN, LIGHTNING = "tracktrain", "lightning"


# ------------------------------------------------------------------------------------------- the modules
def five_metrics(logits: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    """What both modules log at every step: 0-d tensors (each framework reads them when it publishes)."""
    logits = logits.detach()
    return {
        "loss": loss.detach(),
        "accuracy": (logits.argmax(dim=1) == targets).float().mean(),
        "logit_mean": logits.mean(),
        "logit_std": logits.std(),
        "logit_max": logits.max(),
    }


class LoggingCode:
    """Cross-entropy classifier that logs the 5 metrics in every training step, for both frameworks (tracktrain's
    `LoggingClassifier`, Lightning's `lightning_twin` of it)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.log_dict(five_metrics(logits, y, loss))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


class LoggingClassifier(LoggingCode, LoopModule):
    """tracktrain's module."""


@dataclass
class Fit(workloads.Fit):
    """`Fit` (timed to the last iteration) and `tail_seconds` from there to the return of `fit` (the loggers deliver
    what is queued and close their runs)."""

    tail_seconds: float = 0.0
    delivery: Delivery | None = None

    @property
    def iterations_per_second(self) -> float:
        return self.timed_steps / self.seconds


@dataclass
class Variant:
    """`fit(workload, epochs, run_dir)` trains a fresh copy of the network with this variant's logger."""

    key: str
    framework: str
    logger: str  # as shown in the table
    fit: Callable[[ClassifierData, int, str], Fit]
    needs_server: bool = False

    @property
    def is_baseline(self) -> bool:
        return self.logger == "none"


# ------------------------------------------------------------------------------------------------ variants
def tracktrain_fitter(make_logger: Callable[[str], Any] | None) -> Callable[[ClassifierData, int, str], Fit]:
    """A fit of the Trainer with the logger `make_logger(run_dir)` builds (none when None)."""

    def fit(workload: ClassifierData, epochs: int, run_dir: str) -> Fit:
        logger = make_logger(run_dir) if make_logger is not None else None
        loggers = [logger] if logger is not None else False
        trainer = bare_trainer(max_epochs=epochs, log_every_n_steps=1, loggers=loggers, default_root_dir=run_dir)
        clock = EngineClock(trainer)
        net = workload.fresh_net()
        trainer.fit(LoggingClassifier(net), workload.loader)
        returned = time.perf_counter()
        delivery = tracktrain_delivery(logger)
        return Fit.timed(clock, trainer, net, tail_seconds=returned - clock.end, delivery=delivery)

    return fit


def lightning_fitter(
    lightning: Any, tracking_uri: Callable[[], str] | None
) -> Callable[[ClassifierData, int, str], Fit]:
    """A fit of Lightning's Trainer with its `MLFlowLogger` on `tracking_uri()` (no logger when None)."""
    module_class = lightning_twin(LoggingCode, lightning)

    def fit(workload: ClassifierData, epochs: int, run_dir: str) -> Fit:
        logger = uri = None
        if tracking_uri is not None:
            from lightning.pytorch.loggers import MLFlowLogger

            uri = tracking_uri()
            logger = MLFlowLogger("bench-lightning", tracking_uri=uri)
        clock = lightning_clock(lightning)
        trainer = lightning_trainer(
            lightning,
            max_epochs=epochs,
            log_every_n_steps=1,
            logger=logger if logger is not None else False,
            callbacks=[clock],
            default_root_dir=run_dir,
        )
        net = workload.fresh_net()
        trainer.fit(module_class(net), train_dataloaders=workload.loader)
        returned = time.perf_counter()
        delivery = Delivery("mlflow", uri, logger.run_id) if logger is not None else None
        return Fit.timed(clock, trainer, net, tail_seconds=returned - clock.end, delivery=delivery)

    return fit


def make_variants(
    trackers: Trackers, lightning: Any, available: dict[str, bool], thread_delivery: bool = False
) -> list[Variant]:
    """Every variant whose libraries are installed; the mlflow and wandb loggers are imported here, lazily. With
    `thread_delivery`, tracktrain's MLflow and W&B loggers also run with `delivery="thread"` (keys ending -thread)."""
    from tracktrain.loggers import CSVLogger

    variants = [
        Variant("tracktrain/none", TRACKTRAIN, "none", tracktrain_fitter(None)),
        Variant("tracktrain/csv", TRACKTRAIN, "CSVLogger", tracktrain_fitter(lambda run_dir: CSVLogger(run_dir))),
    ]
    deliveries = [("", None), ("-thread", "thread")] if thread_delivery else [("", None)]
    if available["mlflow"]:
        from tracktrain_integrations.mlflow import MLflowLogger

        for suffix, delivery in deliveries:
            shown = f", delivery={delivery!r}" if delivery else ""
            options = {"experiment_name": "bench-tracktrain", **({"delivery": delivery} if delivery else {})}
            variants += [
                Variant(
                    f"tracktrain/mlflow-sqlite{suffix}",
                    TRACKTRAIN,
                    f"MLflowLogger, embedded sqlite{shown}",
                    tracktrain_fitter(lambda run_dir, o=options: MLflowLogger(tracking_uri=trackers.sqlite_uri, **o)),
                ),
                Variant(
                    f"tracktrain/mlflow-server{suffix}",
                    TRACKTRAIN,
                    f"MLflowLogger, local server{shown}",
                    tracktrain_fitter(lambda run_dir, o=options: MLflowLogger(tracking_uri=trackers.server_uri, **o)),
                    needs_server=True,
                ),
            ]
    if available["wandb"]:
        from tracktrain_integrations.wandb import WandbLogger

        for suffix, delivery in deliveries:
            shown = f", delivery={delivery!r}" if delivery else ""
            variants.append(
                Variant(
                    f"tracktrain/wandb-offline{suffix}",
                    TRACKTRAIN,
                    f"WandbLogger, offline{shown}",
                    tracktrain_fitter(
                        lambda run_dir, d=delivery: WandbLogger(
                            project="bench-logging", mode="offline", save_dir=run_dir, delivery=d
                        )
                    ),
                )
            )
    if lightning is not None:
        variants.append(Variant("lightning/none", LIGHTNING, "none", lightning_fitter(lightning, None)))
        if available["mlflow"]:
            variants += [
                Variant(
                    "lightning/mlflow-sqlite",
                    LIGHTNING,
                    "MLFlowLogger, embedded sqlite",
                    lightning_fitter(lightning, lambda: trackers.sqlite_uri),
                ),
                Variant(
                    "lightning/mlflow-server",
                    LIGHTNING,
                    "MLFlowLogger, local server",
                    lightning_fitter(lightning, lambda: trackers.server_uri),
                    needs_server=True,
                ),
            ]
    return variants


def select(variants: list[Variant], wanted: str | None) -> list[Variant]:
    """The variants whose key contains one of the comma-separated `wanted` words, plus each framework's baseline."""
    if not wanted:
        return variants
    words = [word for word in wanted.split(",") if word]
    chosen = [variant for variant in variants if any(word in variant.key for word in words)]
    frameworks = {variant.framework for variant in chosen}
    return [
        variant
        for variant in variants
        if variant in chosen or (variant.is_baseline and variant.framework in frameworks)
    ]
