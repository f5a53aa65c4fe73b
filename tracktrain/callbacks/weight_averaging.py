"""`WeightAveraging`, `EMA`, `SWA`: keep an averaged copy of the module's weights (`torch.optim.swa_utils`), evaluate
with it, checkpoint it, and hand it to the module at the end of fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, get_swa_multi_avg_fn, update_bn

from tracktrain.callbacks.base import Callback
from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.engine.events import Events

if TYPE_CHECKING:
    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["EMA", "SWA", "EMAWeightAveraging", "StochasticWeightAveraging", "WeightAveraging"]

MultiAvgFn = Callable[..., None]  # (averaged: list[Tensor], current: list[Tensor], n_averaged: Tensor), in place
AvgFn = Callable[..., torch.Tensor]  # (averaged: Tensor, current: Tensor, n_averaged: Tensor) -> the new average

# Strategies whose parameters are shards (DTensors) or stages on other ranks: one rank's module is not the model.
_UNSUPPORTED_STRATEGIES = ("fsdp", "tensor_parallel", "pipeline")


class _Weights(nn.Module):
    """The module's parameters and buffers, in `parameters()`/`buffers()` order, and nothing else: what
    `AveragedModel` deep-copies, instead of the LoopModule (its Trainer, hooks and compiled forward)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.params = nn.ParameterList(module.parameters())
        for index, buffer in enumerate(module.buffers()):
            self.register_buffer(f"buffer_{index}", buffer)


class WeightAveraging(Callback):
    """Keeps an average of the module's weights (`torch.optim.swa_utils.AveragedModel`) on the module's device (or
    `device`),
    updated where `should_update` says: after an optimizer step (`step_idx`, from 0) or at an epoch's end
    (`epoch_idx`). Validation and test swap it into the module (and back), so logged `val_*` values are the
    average's; it rides in the Trainer's checkpoints (a resumed run ends with the same average, bit for bit); at the
    end of fit it is copied into the module, so the module saved or exported is the average.

    Args:
        multi_avg_fn: `multi_avg_fn(averaged, current, n_averaged)` updating lists of tensors in place (the fast
            path: `torch._foreach_*`; `get_ema_multi_avg_fn`, `get_swa_multi_avg_fn`). Default: the running mean.
        avg_fn: a per-tensor `avg_fn(averaged, current, n_averaged) -> tensor` instead (slower).
        use_buffers: average the buffers too (BatchNorm statistics); False: the average keeps the module's own.
        evaluate_averaged: validate and test with the averaged weights.
        copy_at_end: copy the averaged weights into the module when fit ends.
        device: where the average lives (Lightning's: `"cpu"` keeps it out of GPU memory; each update copies the
            weights there); None: the module's device.

    Override `should_update` for another schedule. Refuses `strategy="fsdp"`, "tensor_parallel" and "pipeline" (a
    rank holds part of the model); under DDP every rank's average is the same. A step costs one `torch._foreach`
    update per device and dtype.
    """

    def __init__(
        self,
        multi_avg_fn: MultiAvgFn | None = None,
        avg_fn: AvgFn | None = None,
        *,
        use_buffers: bool = True,
        evaluate_averaged: bool = True,
        copy_at_end: bool = True,
        device: torch.device | str | int | None = None,
    ) -> None:
        name = type(self).__name__
        self.device = None if device is None else torch.device(device)  # a bad one fails here, not at fit start
        if multi_avg_fn is not None and avg_fn is not None:
            raise ValueError(f"{name}: give multi_avg_fn or avg_fn, not both (multi_avg_fn is the faster one).")
        flags = {"use_buffers": use_buffers, "evaluate_averaged": evaluate_averaged, "copy_at_end": copy_at_end}
        for option, flag in flags.items():
            if not isinstance(flag, bool):
                raise TypeError(f"{name}({option}=...) must be True or False, got {flag!r}.")
        self.multi_avg_fn, self.avg_fn = multi_avg_fn, avg_fn
        self.use_buffers, self.evaluate_averaged, self.copy_at_end = use_buffers, evaluate_averaged, copy_at_end
        self.averaged_model: AveragedModel | None = None
        self._module: nn.Module | None = None  # the module the average is of
        self._latest_step = 0  # the global step last seen (an update, or a step should_update declined)
        self._latest_epoch = -1  # the training epoch whose end was last seen
        self._loaded: dict[str, Any] | None = None  # a checkpoint's state, until the fit builds the average
        self._backup: list[torch.Tensor] | None = None  # the module's own weights while the average is swapped in
        self._module_is_average = False  # the module holds the average (copied in at the end of fit)

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to average after optimizer step `step_idx` (0-based), or at the end of epoch `epoch_idx`;
        one of the two is given. Default: after every optimizer step."""
        return step_idx is not None

    # --------------------------------------------------------------------------------------------- the fit
    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        strategy = trainer.strategy.name
        if strategy in _UNSUPPORTED_STRATEGIES:
            raise ValueError(
                f"{type(self).__name__} averages whole parameters, but strategy={strategy!r} leaves each rank only "
                "a shard or a stage of the model: use strategy='ddp' or a single device."
            )
        device = self.device or next(module.parameters(), torch.empty(0)).device
        averaged = AveragedModel(_Weights(module), device, self.avg_fn, self.multi_avg_fn, self.use_buffers)
        self.averaged_model, self._module, self._module_is_average, self._backup = averaged, module, False, None
        state, self._loaded = self._loaded or {}, None  # a checkpoint's, or a new run's: the counters start over
        self._latest_step = int(state.get("latest_step", trainer.global_step))
        self._latest_epoch = int(state.get("latest_epoch", -1))
        if state:
            try:
                averaged.load_state_dict(state["averaged_model"])
            except RuntimeError as error:
                raise RuntimeError(
                    f"{type(self).__name__}: the checkpoint's averaged weights do not fit this module ({error}). "
                    "Resume with the module the checkpoint was written for."
                ) from error

    def on_train_batch_end(
        self, trainer: TrainerSurface, module: LoopModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step  # one int compare per batch: accumulation windows and manual steps alike
        if step > self._latest_step:
            self._catch_up(trainer, module)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._catch_up(trainer, module)

    def on_validation_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if trainer.fitting:  # the step an epoch's end flushed, and the epoch's own update, before validating
            self._catch_up(trainer, module)
        if self.evaluate_averaged:
            self._swap_in(module)

    def on_validation_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._swap_out(module)

    def on_test_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self.evaluate_averaged:
            self._swap_in(module)

    def on_test_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._swap_out(module)

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        self._swap_out(module)  # a failed validation leaves the module with its own weights

    def on_fit_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        # after the engine's end, where the last checkpoints were taken of the module's own (resumable) weights
        self._swap_out(module)
        if self.copy_at_end and self._has_average(module):
            self.finalize(trainer, module)
            with torch.no_grad():
                torch._foreach_copy_(self._tensors(module), self._averaged_tensors())
            self._module_is_average = True

    def finalize(self, trainer: TrainerSurface, module: LoopModule) -> None:
        """Before the average is copied into the module at the end of fit (`SWA` recomputes BatchNorm here)."""

    def _catch_up(self, trainer: TrainerSurface, module: LoopModule) -> None:
        step = trainer.global_step
        if step > self._latest_step:
            self._latest_step = step
            if self.should_update(step_idx=step - 1):
                self._update(module)
        if trainer.train_engine.last_event_name is Events.EPOCH_COMPLETED:
            epoch = trainer.current_epoch  # the epoch that just ended, counted from 0
            if epoch > self._latest_epoch:
                self._latest_epoch = epoch
                if self.should_update(epoch_idx=epoch):
                    self._update(module)

    def _update(self, module: nn.Module) -> None:
        self.averaged_model.update_parameters(module)  # type: ignore[union-attr]  # built at on_fit_start

    def _has_average(self, module: nn.Module) -> bool:
        averaged = self.averaged_model
        return averaged is not None and module is self._module and int(averaged.n_averaged) > 0

    def _tensors(self, module: nn.Module) -> list[torch.Tensor]:
        """What the average replaces: the parameters, and the buffers when they are averaged."""
        return [t.detach() for t in (*module.parameters(), *(module.buffers() if self.use_buffers else ()))]

    def _averaged_tensors(self) -> list[torch.Tensor]:
        assert self.averaged_model is not None
        return self._tensors(self.averaged_model.module)

    def _swap_in(self, module: nn.Module) -> None:
        """The average into the module, in place (the optimizer keeps its parameters); its own weights kept aside."""
        if self._backup is not None or self._module_is_average or not self._has_average(module):
            return
        current = self._tensors(module)
        with torch.no_grad():
            self._backup = [tensor.clone() for tensor in current]  # once per validation: not the hot path
            torch._foreach_copy_(current, self._averaged_tensors())

    def _swap_out(self, module: nn.Module) -> None:
        if self._backup is None:
            return
        with torch.no_grad():
            torch._foreach_copy_(self._tensors(module), self._backup)
        self._backup = None

    # ----------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        if self.averaged_model is None:  # before a fit: what was loaded, if anything
            return dict(self._loaded or {})
        averaged = self.averaged_model.state_dict()  # the checkpoint's saver snapshots the tensors (a copy)
        return {"latest_step": self._latest_step, "latest_epoch": self._latest_epoch, "averaged_model": averaged}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if "averaged_model" not in state_dict or "latest_step" not in state_dict:
            name = type(self).__name__
            raise KeyError(
                f"{name}.load_state_dict: got keys {sorted(state_dict)}; pass what {name}.state_dict() gave."
            )
        self._loaded = dict(state_dict)  # applied when the fit has built the average (checkpoints load first)


def _ema_multi_avg_fn(decay: float) -> MultiAvgFn:
    """EMA of float tensors with one `torch._foreach_lerp_` per device and dtype; integer buffers (BatchNorm's
    `num_batches_tracked`) follow the module's own value."""

    @torch.no_grad()
    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], n_averaged: torch.Tensor) -> None:
        if averaged[0].is_floating_point() or averaged[0].is_complex():
            torch._foreach_lerp_(averaged, current, 1.0 - decay)
        else:
            torch._foreach_copy_(averaged, current)

    return update


class EMA(WeightAveraging):
    """Exponential moving average of the weights, after every `every_n_steps`-th optimizer step from step
    `start_step` on: `average = decay * average + (1 - decay) * weights` (the first update copies the weights).

    Args:
        decay: the weight of the old average, in (0, 1); 0.999 averages over about the last 1000 updates.
        start_step: the first optimizer step (0-based) to average after (warm-up steps before it are left out).
        every_n_steps: average after every n-th step.
        **options: `use_buffers`, `evaluate_averaged`, `copy_at_end`, as `WeightAveraging`.
    """

    def __init__(
        self,
        decay: float = 0.999,
        start_step: int = 0,
        every_n_steps: int = 1,
        **options: Any,
    ) -> None:
        if not is_real(decay) or isinstance(decay, bool) or not 0.0 < decay < 1.0:
            raise ValueError(
                f"EMA(decay=...) must be a number strictly between 0 and 1, got {decay!r}; typical values are 0.99 "
                "to 0.9999 (closer to 1 averages over more steps)."
            )
        _check_int("EMA(start_step=...)", start_step, 0)
        _check_int("EMA(every_n_steps=...)", every_n_steps, 1)
        super().__init__(multi_avg_fn=_ema_multi_avg_fn(float(decay)), **options)
        self.decay = float(decay)
        self.start_step = int(start_step)
        self.every_n_steps = int(every_n_steps)

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is None or step_idx < self.start_step:
            return False
        return (step_idx - self.start_step) % self.every_n_steps == 0


class SWA(WeightAveraging):
    """Stochastic Weight Averaging (Izmailov et al., 2018): the running mean of the weights at the end of each
    training epoch from `swa_epoch_start` on, optionally with `SWALR` annealing the learning rate to `swa_lrs`; at
    the end of fit the BatchNorm statistics are recomputed for the averaged weights (`update_bn`) before they are
    copied into the module.

    Args:
        swa_epoch_start: the first epoch (0-based) whose end is averaged: an int, or a float in (0, 1), a fraction
            of `max_epochs`.
        swa_lrs: the learning rate(s) from `swa_epoch_start` on (one, or one per parameter group), reached over
            `annealing_epochs` epochs by `annealing_strategy` ("cos" or "linear"); None: the optimizer's own
            schedule goes on. SWALR steps at each epoch's end, after the module's own epoch schedulers: do not
            combine it with a per-step scheduler of your own.
        update_bn: at the end of fit, recompute BatchNorm statistics with one pass over the training data,
            `module(inputs)` (the module must have a `forward`), when the module has BatchNorm layers.
        **options: `use_buffers` (default False here: `update_bn` recomputes them), `evaluate_averaged`,
            `copy_at_end`, as `WeightAveraging`.
    """

    def __init__(
        self,
        swa_epoch_start: int | float = 0.8,
        swa_lrs: float | Sequence[float] | None = None,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        update_bn: bool = True,
        **options: Any,
    ) -> None:
        if isinstance(swa_epoch_start, bool) or not (
            (is_integral(swa_epoch_start) and swa_epoch_start >= 0)
            or (isinstance(swa_epoch_start, float) and 0.0 < swa_epoch_start < 1.0)
        ):
            raise ValueError(
                f"SWA(swa_epoch_start=...) must be an epoch (an integer >= 0) or a fraction of max_epochs (a float in "
                f"(0, 1)), got {swa_epoch_start!r}."
            )
        lrs = _learning_rates(swa_lrs)
        _check_int("SWA(annealing_epochs=...)", annealing_epochs, 0)
        if annealing_strategy not in ("cos", "linear"):
            raise ValueError(f'SWA(annealing_strategy=...) must be "cos" or "linear", got {annealing_strategy!r}.')
        if not isinstance(update_bn, bool):
            raise TypeError(f"SWA(update_bn=...) must be True or False, got {update_bn!r}.")
        super().__init__(multi_avg_fn=get_swa_multi_avg_fn(), **{"use_buffers": False, **options})
        self.swa_epoch_start, self.swa_lrs, self.update_bn = swa_epoch_start, lrs, update_bn
        self.annealing_epochs, self.annealing_strategy = int(annealing_epochs), annealing_strategy
        self._start_epoch = 0  # swa_epoch_start as an epoch, resolved when the fit starts
        self.scheduler: SWALR | None = None
        self._loaded_scheduler: dict[str, Any] | None = None

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return epoch_idx is not None and epoch_idx >= self._start_epoch

    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        start = self.swa_epoch_start
        if isinstance(start, float):
            if trainer.max_epochs is None:
                raise ValueError(
                    f"SWA(swa_epoch_start={start}) is a fraction of max_epochs, but the Trainer has none (max_steps "
                    "only): give swa_epoch_start as an epoch number."
                )
            start = int(start * trainer.max_epochs)  # 0.8 of 10 epochs: the ends of epochs 8 and 9 are averaged
        self._start_epoch = int(start)
        self.scheduler = None
        super().on_fit_start(trainer, module)
        if self._loaded_scheduler is not None:  # resumed after SWALR started: rebuild it as it was
            self._start_scheduler(trainer, self._loaded_scheduler)
            self._loaded_scheduler = None

    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self.swa_lrs is not None and self.scheduler is None and trainer.current_epoch >= self._start_epoch:
            self._start_scheduler(trainer, None)

    def on_train_epoch_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        super().on_train_epoch_end(trainer, module)
        if self.scheduler is not None:
            self.scheduler.step()

    def _start_scheduler(self, trainer: TrainerSurface, state: Mapping[str, Any] | None) -> None:
        lrs, optimizers = self.swa_lrs or [], trainer.optimizers
        groups = [len(optimizer.param_groups) for optimizer in optimizers]
        if len(optimizers) != 1 or len(lrs) not in (1, groups[0]):
            raise ValueError(
                f"SWA(swa_lrs={lrs}) anneals one optimizer, with one rate or one per parameter group; the module has "
                f"{len(optimizers)} optimizer(s) with {groups} groups. Fix swa_lrs, or give None and schedule yourself."
            )
        self.scheduler = SWALR(
            optimizers[0],
            swa_lr=lrs if len(lrs) > 1 else lrs[0],  # type: ignore[arg-type]  # SWALR takes one or a list
            anneal_epochs=self.annealing_epochs,
            anneal_strategy=self.annealing_strategy,  # type: ignore[arg-type]
        )
        if state is not None:  # its first step kept the resumed optimizer's rates (or set swa_lrs, as they are)
            self.scheduler.load_state_dict(dict(state))

    def finalize(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not self.update_bn or not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()):
            return
        averaged_buffers = [buffer.detach() for buffer in self.averaged_model.module.buffers()]  # type: ignore[union-attr]
        self._swap_in(module)  # the averaged parameters; BatchNorm's statistics recomputed for them, in the module
        try:
            update_bn(trainer.train_engine.state.dataloader or (), module, device=trainer.device)  # module(batch[0])
            with torch.no_grad():
                torch._foreach_copy_(averaged_buffers, [buffer.detach() for buffer in module.buffers()])
        finally:
            self._swap_out(module)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        scheduler = self.scheduler.state_dict() if self.scheduler is not None else self._loaded_scheduler
        if scheduler is not None:
            state["scheduler"] = scheduler
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._loaded_scheduler = state_dict.get("scheduler")


def _learning_rates(swa_lrs: Any) -> list[float] | None:
    """`SWA(swa_lrs=...)` as a list of positive finite floats (None: no SWALR), or a ValueError naming it."""
    if swa_lrs is None:
        return None
    lrs = [swa_lrs] if is_real(swa_lrs) else list(swa_lrs) if isinstance(swa_lrs, Sequence) else []
    if not lrs or any(not is_real(lr) or isinstance(lr, bool) or not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(
            f"SWA(swa_lrs=...) must be a positive learning rate, one per parameter group, or None (keep the "
            f"optimizer's schedule), got {swa_lrs!r}."
        )
    return [float(lr) for lr in lrs]


def _check_int(argument: str, value: Any, minimum: int) -> None:
    if not is_integral(value) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{argument} must be an integer >= {minimum}, got {value!r}.")


class StochasticWeightAveraging(SWA):
    """Lightning's `StochasticWeightAveraging(swa_lrs, swa_epoch_start=0.8, annealing_epochs=10,
    annealing_strategy="cos", avg_fn=None, device="cpu")`: `SWA` with Lightning's arguments (its average kept on the
    CPU by default, as Lightning's)."""

    def __init__(
        self,
        swa_lrs: float | Sequence[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AvgFn | None = None,
        device: torch.device | str | None = "cpu",
    ) -> None:
        options: dict[str, Any] = {"device": device}
        if avg_fn is not None:  # a per-tensor average instead of the running mean
            options.update(avg_fn=avg_fn)
        super().__init__(
            swa_epoch_start=swa_epoch_start,
            swa_lrs=swa_lrs,
            annealing_epochs=annealing_epochs,
            annealing_strategy=annealing_strategy,
            **options,
        )


class EMAWeightAveraging(EMA):
    """Lightning's `EMAWeightAveraging(device=None, use_buffers=True, decay=0.999, update_every_n_steps=1,
    update_starting_at_step=None, update_starting_at_epoch=None)`: `EMA` with Lightning's arguments; with
    `update_starting_at_epoch`, the average starts with that epoch (counted from 0)."""

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **options: Any,
    ) -> None:
        if update_starting_at_epoch is not None:
            _check_int("EMAWeightAveraging(update_starting_at_epoch=...)", update_starting_at_epoch, 0)
        super().__init__(
            decay=decay,
            start_step=update_starting_at_step or 0,
            every_n_steps=update_every_n_steps,
            device=device,
            use_buffers=use_buffers,
            **options,
        )
        self.update_starting_at_epoch = update_starting_at_epoch
        self._epoch = 0

    def on_train_epoch_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        self._epoch = trainer.current_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if self.update_starting_at_epoch is not None and self._epoch < self.update_starting_at_epoch:
            return False
        return super().should_update(step_idx, epoch_idx)
