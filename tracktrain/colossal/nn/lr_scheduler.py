"""Colossal-AI's `colossalai.nn.lr_scheduler`: its schedulers, each torch's scheduler of the same meaning (or torch's
`SequentialLR` of them for a warm-up or a flat start), taking Colossal-AI's arguments: `total_steps` second, as
every Colossal-AI scheduler does, counted in calls to `step()` (epochs or batches, as the script steps it).

The warm-up of the `...WarmupLR` schedulers raises the learning rate linearly over `warmup_steps` steps, step `i`
(from 0) at `(i + 1) / warmup_steps` of it, then hands over to the schedule that follows, which starts at the full
learning rate (Colossal-AI's `WarmupScheduler`); `LinearWarmupLR` has its own shape, as in Colossal-AI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.optim import Optimizer
from torch.optim import lr_scheduler as torch_schedulers

__all__ = [
    "CosineAnnealingLR",
    "CosineAnnealingWarmupLR",
    "ExponentialLR",
    "FlatAnnealingLR",
    "FlatAnnealingWarmupLR",
    "LambdaLR",
    "LinearWarmupLR",
    "MultiStepLR",
    "MultiStepWarmupLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "PolynomialWarmupLR",
    "StepLR",
]


def _steps(name: str, total_steps: Any, warmup_steps: Any = 0) -> None:
    for what, value in (("total_steps", total_steps), ("warmup_steps", warmup_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}({what}=...) must be a whole number of steps >= 0, got {value!r}.")


def _warmup(optimizer: Optimizer, warmup_steps: int) -> torch_schedulers.LRScheduler:
    """Step `i` of the warm-up at `(i + 1) / warmup_steps` of the learning rate (torch's `LinearLR`)."""
    return torch_schedulers.LinearLR(
        optimizer, start_factor=1 / warmup_steps, end_factor=1.0, total_iters=max(warmup_steps - 1, 1)
    )


def _flat(optimizer: Optimizer) -> torch_schedulers.LRScheduler:
    return torch_schedulers.ConstantLR(optimizer, factor=1.0, total_iters=0)


class _Sequence(torch_schedulers.SequentialLR):
    """Phases of `(scheduler, steps)`; a phase of 0 steps is left out (a warm-up of 0 steps starts at the full
    learning rate, as Colossal-AI's does)."""

    def __init__(
        self,
        optimizer: Optimizer,
        phases: Sequence[tuple[Callable[[], torch_schedulers.LRScheduler], int | None]],
        last_epoch: int,
    ) -> None:
        kept = [(make, steps) for make, steps in phases if steps is None or steps > 0]
        schedulers, milestones, at = [], [], 0
        for make, steps in kept:
            schedulers.append(make())
            if steps is not None:
                at += steps
                milestones.append(at)
        super().__init__(optimizer, schedulers, milestones[: len(schedulers) - 1], last_epoch=last_epoch)


class CosineAnnealingLR(torch_schedulers.CosineAnnealingLR):
    """Cosine annealing from the learning rate down to `eta_min` over `total_steps` steps (torch's)."""

    def __init__(self, optimizer: Optimizer, total_steps: int, eta_min: float = 0, last_epoch: int = -1) -> None:
        _steps("CosineAnnealingLR", total_steps)
        super().__init__(optimizer, total_steps, eta_min=eta_min, last_epoch=last_epoch)


class CosineAnnealingWarmupLR(_Sequence):
    """A linear warm-up of `warmup_steps`, then cosine annealing to `eta_min` over the rest of `total_steps`."""

    def __init__(
        self, optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        _steps("CosineAnnealingWarmupLR", total_steps, warmup_steps)
        super().__init__(
            optimizer,
            [
                (lambda: _warmup(optimizer, warmup_steps), warmup_steps),
                (lambda: torch_schedulers.CosineAnnealingLR(optimizer, total_steps - warmup_steps, eta_min), None),
            ],
            last_epoch,
        )


class FlatAnnealingLR(_Sequence):
    """The learning rate held for `pct_start` of `total_steps`, then cosine annealing to 0 over the rest."""

    def __init__(self, optimizer: Optimizer, total_steps: int, pct_start: float = 0.72, last_epoch: int = -1) -> None:
        _steps("FlatAnnealingLR", total_steps)
        if not 0.0 <= pct_start <= 1.0:
            raise ValueError(f"FlatAnnealingLR(pct_start=...) must be from 0.0 to 1.0, got {pct_start!r}.")
        flat = int(total_steps * pct_start)
        super().__init__(
            optimizer,
            [
                (lambda: _flat(optimizer), flat),
                (lambda: torch_schedulers.CosineAnnealingLR(optimizer, total_steps - flat), None),
            ],
            last_epoch,
        )


class FlatAnnealingWarmupLR(_Sequence):
    """A linear warm-up of `warmup_steps`, the learning rate held for `pct_start` of the rest, then cosine
    annealing to `eta_min`."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 0,
        pct_start: float = 0.72,
        eta_min: float = 0,
        last_epoch: int = -1,
    ) -> None:
        _steps("FlatAnnealingWarmupLR", total_steps, warmup_steps)
        if not 0.0 <= pct_start <= 1.0:
            raise ValueError(f"FlatAnnealingWarmupLR(pct_start=...) must be from 0.0 to 1.0, got {pct_start!r}.")
        flat = int((total_steps - warmup_steps) * pct_start)
        anneal = total_steps - warmup_steps - flat
        super().__init__(
            optimizer,
            [
                (lambda: _warmup(optimizer, warmup_steps), warmup_steps),
                (lambda: _flat(optimizer), flat),
                (lambda: torch_schedulers.CosineAnnealingLR(optimizer, anneal, eta_min), None),
            ],
            last_epoch,
        )


def _linear_warmup_factor(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        # a warm-up as long as the schedule (or longer, as Colossal-AI allows) leaves nothing to decay over
        return (total_steps - step) / (total_steps - warmup_steps) if total_steps > warmup_steps else 0.0

    return factor


class LinearWarmupLR(torch_schedulers.LambdaLR):
    """Step `i` of the first `warmup_steps` at `(i + 1) / (warmup_steps + 1)` of the learning rate, then down
    linearly to 0 at `total_steps` (Colossal-AI's shape, as torch's `LambdaLR`)."""

    def __init__(self, optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, last_epoch: int = -1) -> None:
        _steps("LinearWarmupLR", total_steps, warmup_steps)
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        super().__init__(optimizer, _linear_warmup_factor(total_steps, warmup_steps), last_epoch=last_epoch)


class MultiStepLR(torch_schedulers.MultiStepLR):
    """The learning rate times `gamma` at each of `milestones` (torch's; `total_steps` as in every Colossal-AI
    scheduler)."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        milestones: Sequence[int] | None = None,
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        _steps("MultiStepLR", total_steps)
        super().__init__(optimizer, list(milestones or ()), gamma=gamma, last_epoch=last_epoch)


class MultiStepWarmupLR(_Sequence):
    """A linear warm-up of `warmup_steps`, then the learning rate times `gamma` at each of `milestones` (counted
    from the start, warm-up included)."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 0,
        milestones: Sequence[int] | None = None,
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        _steps("MultiStepWarmupLR", total_steps, warmup_steps)
        if not milestones:
            raise ValueError(
                "MultiStepWarmupLR(milestones=...) needs at least one milestone, e.g. milestones=[30, 60]."
            )
        after = [milestone - warmup_steps for milestone in milestones if milestone >= warmup_steps]
        super().__init__(
            optimizer,
            [
                (lambda: _warmup(optimizer, warmup_steps), warmup_steps),
                (lambda: torch_schedulers.MultiStepLR(optimizer, after, gamma=gamma), None),
            ],
            last_epoch,
        )


class OneCycleLR(torch_schedulers.OneCycleLR):
    """torch's 1cycle policy over `total_steps`, peaking at each parameter group's learning rate."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float = 0.85,
        max_momentum: float = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 10000.0,
        last_epoch: int = -1,
    ) -> None:
        _steps("OneCycleLR", total_steps)
        super().__init__(
            optimizer,
            [group["lr"] for group in optimizer.param_groups],
            total_steps=total_steps,
            pct_start=pct_start,
            anneal_strategy=anneal_strategy,  # type: ignore[arg-type]
            cycle_momentum=cycle_momentum,
            base_momentum=base_momentum,
            max_momentum=max_momentum,
            div_factor=div_factor,
            final_div_factor=final_div_factor,
            last_epoch=last_epoch,
        )


def _polynomial_factors(
    optimizer: Optimizer, total_steps: int, end_lr: float, power: float
) -> list[Callable[[int], float]]:
    def factor_for(base_lr: float) -> Callable[[int], float]:
        def factor(step: int) -> float:
            remaining = (1 - min(step, total_steps) / total_steps) ** power
            return ((base_lr - end_lr) * remaining + end_lr) / base_lr

        return factor

    return [factor_for(group["lr"]) for group in optimizer.param_groups]


class PolynomialLR(torch_schedulers.LambdaLR):
    """From the learning rate down to `end_lr` over `total_steps` steps, as `(1 - step / total_steps) ** power`."""

    def __init__(
        self, optimizer: Optimizer, total_steps: int, end_lr: float = 0.0001, power: float = 1.0, last_epoch: int = -1
    ) -> None:
        _steps("PolynomialLR", total_steps)
        if end_lr < 0:
            raise ValueError(f"PolynomialLR(end_lr=...) must be >= 0, got {end_lr!r}.")
        if total_steps == 0:
            raise ValueError("PolynomialLR(total_steps=...) must be at least 1.")
        super().__init__(optimizer, _polynomial_factors(optimizer, total_steps, end_lr, power), last_epoch=last_epoch)


class PolynomialWarmupLR(_Sequence):
    """A linear warm-up of `warmup_steps`, then `PolynomialLR` over the rest of `total_steps`."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 0,
        end_lr: float = 0.0001,
        power: float = 1.0,
        last_epoch: int = -1,
    ) -> None:
        _steps("PolynomialWarmupLR", total_steps, warmup_steps)
        super().__init__(
            optimizer,
            [
                (lambda: _warmup(optimizer, warmup_steps), warmup_steps),
                (lambda: PolynomialLR(optimizer, total_steps - warmup_steps, end_lr=end_lr, power=power), None),
            ],
            last_epoch,
        )


class LambdaLR(torch_schedulers.LambdaLR):
    """torch's `LambdaLR` (`total_steps` as in every Colossal-AI scheduler)."""

    def __init__(self, optimizer: Optimizer, total_steps: int, lr_lambda: Any = None, last_epoch: int = -1) -> None:
        _steps("LambdaLR", total_steps)
        super().__init__(optimizer, lr_lambda, last_epoch=last_epoch)


class MultiplicativeLR(torch_schedulers.MultiplicativeLR):
    """torch's `MultiplicativeLR` (`total_steps` as in every Colossal-AI scheduler)."""

    def __init__(self, optimizer: Optimizer, total_steps: int, lr_lambda: Any = None, last_epoch: int = -1) -> None:
        _steps("MultiplicativeLR", total_steps)
        super().__init__(optimizer, lr_lambda, last_epoch=last_epoch)


class StepLR(torch_schedulers.StepLR):
    """torch's `StepLR` (`total_steps` as in every Colossal-AI scheduler)."""

    def __init__(
        self, optimizer: Optimizer, total_steps: int, step_size: int = 1, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        _steps("StepLR", total_steps)
        super().__init__(optimizer, step_size, gamma=gamma, last_epoch=last_epoch)


class ExponentialLR(torch_schedulers.ExponentialLR):
    """torch's `ExponentialLR` (`total_steps` as in every Colossal-AI scheduler)."""

    def __init__(self, optimizer: Optimizer, total_steps: int, gamma: float = 1.0, last_epoch: int = -1) -> None:
        _steps("ExponentialLR", total_steps)
        super().__init__(optimizer, gamma, last_epoch=last_epoch)
