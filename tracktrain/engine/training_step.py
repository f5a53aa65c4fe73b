"""`TrainingStep`: the one training step, used by `create_supervised_trainer` and the `Trainer` alike.

Per batch: zero the gradients where an accumulation window starts, run the engine's schedule (forward and loss
under autocast, backward of the loss divided by the window's size), and where the window ends take the
optimizer step (`ModelEngine.step`: gradient handlers, unscale, clip, step, scaler update). The callers only
say how a batch becomes a loss, and how windows are counted:

- `IterationWindows`, Ignite's rule: windows of consecutive iterations of the whole run, across epoch ends.
- `EpochWindows`, Lightning's rule: windows counted from each epoch's first batch; the epoch's last batch ends
  the last window, short or not. An epoch whose end shows only after its last batch (a loader without a length)
  leaves that window open: `flush()` steps it at the epoch's end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from tracktrain.engine.engine import Engine
    from tracktrain.engine.model_engine import ModelEngine

__all__ = ["AccumulationWindows", "EpochWindows", "IterationWindows", "TrainingStep"]


class AccumulationWindows(Protocol):
    """Where gradient-accumulation windows start and end, and how many batches they hold (`size_at`), read from the
    engine's state."""

    def size_at(self, engine: Engine) -> int: ...

    def starts(self, engine: Engine) -> bool: ...

    def ends(self, engine: Engine) -> bool: ...


class IterationWindows:
    """Ignite's windows: `size` consecutive iterations of the run (a window may span an epoch's end)."""

    def __init__(self, size: int = 1) -> None:
        self.size = size

    def size_at(self, engine: Engine) -> int:
        return self.size

    def starts(self, engine: Engine) -> bool:
        return (engine.state.iteration - 1) % self.size == 0

    def ends(self, engine: Engine) -> bool:
        return engine.state.iteration % self.size == 0


class EpochWindows:
    """Lightning's windows: `size` batches counted from each epoch's start; an epoch's last batch ends one. `size`:
    a number, or the number for each epoch (counted from 0; Lightning's `GradientAccumulationScheduler`)."""

    def __init__(self, size: int | Callable[[int], int] = 1) -> None:
        self._size_of = size if callable(size) else (lambda epoch: size)

    def size_at(self, engine: Engine) -> int:
        return self._size_of(max(engine.state.epoch - 1, 0))

    def starts(self, engine: Engine) -> bool:
        return _batch_in_epoch(engine) % self.size_at(engine) == 0

    def ends(self, engine: Engine) -> bool:
        position = _batch_in_epoch(engine) + 1
        return position % self.size_at(engine) == 0 or position == engine.state.epoch_length


def _batch_in_epoch(engine: Engine) -> int:
    epoch_length = engine.state.epoch_length
    iteration = engine.state.iteration - 1
    return iteration % epoch_length if epoch_length else iteration


class TrainingStep:
    """Runs one batch of training on `model_engine` (see the module's description).

    Args:
        model_engine: the model, optimizer and precision; its `schedule` runs forward and backward.
        forward: `forward(engine, batch)` computes the step's output, the loss in it (called under autocast).
        loss_of: the loss in `forward`'s output (default: the output itself).
        windows: how accumulation windows are counted (default: no accumulation).
        no_sync: a context for the batches whose gradients the window's last batch will use (DDP skips its
            all-reduce there).
        accept_loss: `accept_loss(loss)` False skips that batch's backward and its window's optimizer step (a
            non-finite loss whose gradients would be NaN).
        on_optimizer_step: called after each window's step (skipped or not), e.g. to count it.
        reduce_gradients: reduces the gradients of a window flushed at an epoch's end, whose every batch ran
            under `no_sync`.
        zero_grad: `zero_grad(engine)` zeroes the gradients where a window starts (default
            `model_engine.zero_grad()`; Lightning's `optimizer_zero_grad` hook).
        optimizer_step: `optimizer_step(engine, closure, step)` takes a window's last batch in hand (Lightning's
            `optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)` hook): `closure()` runs the batch (the
            window's zeroing when it starts one, forward, backward) and returns its loss, `step()` steps
            `model_engine`; it must call `closure` at least once (an optimizer such as LBFGS calls it again).
    """

    def __init__(
        self,
        model_engine: ModelEngine,
        forward: Callable[[Engine, Any], Any],
        loss_of: Callable[[Any], torch.Tensor | None] | None = None,
        windows: AccumulationWindows | None = None,
        *,
        no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
        accept_loss: Callable[[torch.Tensor], bool] | None = None,
        on_optimizer_step: Callable[[], None] | None = None,
        reduce_gradients: Callable[[], None] | None = None,
        zero_grad: Callable[[Engine], None] | None = None,
        optimizer_step: Callable[[Engine, Callable[[], Any], Callable[[], None]], None] | None = None,
    ) -> None:
        self.model_engine = model_engine
        self.forward = forward
        self.loss_of = loss_of or _itself
        self.windows = windows or IterationWindows(1)
        self.no_sync = no_sync or contextlib.nullcontext
        self.accept_loss = accept_loss
        self.on_optimizer_step = on_optimizer_step
        self.reduce_gradients = reduce_gradients
        self.zero_grad = zero_grad or (lambda engine: model_engine.zero_grad())
        self.optimizer_step = optimizer_step
        self.pending_batches = 0  # batches whose gradients wait for the window's step
        self._skip_window = False  # a batch of the window was refused by accept_loss

    def __call__(self, engine: Engine, batch: Any) -> Any:
        windows, model_engine = self.windows, self.model_engine
        size = windows.size_at(engine)
        forward = lambda: self.forward(engine, batch)  # noqa: E731
        if self.optimizer_step is not None and windows.ends(engine):
            return self._hand_to_optimizer_step(engine, forward, size)
        if size == 1:  # no accumulation: every batch is a whole window (no window arithmetic, no context)
            self.zero_grad(engine)
            output, backpropagated = model_engine.schedule.forward_backward(
                model_engine, forward, self.loss_of, 1, self.accept_loss
            )
            self._skip_window |= not backpropagated
            self.pending_batches += 1
            self._step()
            return output
        if windows.starts(engine):
            self.zero_grad(engine)
        ends = windows.ends(engine)
        with contextlib.nullcontext() if ends else self.no_sync():
            output, backpropagated = model_engine.schedule.forward_backward(
                model_engine, forward, self.loss_of, size, self.accept_loss
            )
        self._skip_window |= not backpropagated
        self.pending_batches += 1
        if ends:
            self._step()
        return output

    def _hand_to_optimizer_step(self, engine: Engine, forward: Callable[[], Any], size: int) -> Any:
        """A window's last batch under an `optimizer_step` hook: the hook runs the batch (the closure) and steps."""
        model_engine, starts = self.model_engine, self.windows.starts(engine)
        outputs: list[Any] = []

        def closure() -> Any:
            if starts or size == 1:
                self.zero_grad(engine)
            output, backpropagated = model_engine.schedule.forward_backward(
                model_engine, forward, self.loss_of, size, self.accept_loss
            )
            self._skip_window = not backpropagated if size == 1 else self._skip_window or not backpropagated
            outputs.append(output)
            return self.loss_of(output)

        def step() -> None:
            if not self._skip_window:
                model_engine.step()

        assert self.optimizer_step is not None
        self.optimizer_step(engine, closure, step)
        if not outputs:
            raise RuntimeError(
                "optimizer_step did not run its optimizer_closure, so the batch's train_step never ran. Call "
                "optimizer.step(closure=optimizer_closure) in it (or super().optimizer_step(...)), as in Lightning."
            )
        self.reset()
        if self.on_optimizer_step is not None:
            self.on_optimizer_step()
        return outputs[-1]

    def flush(self) -> None:
        """Step the window an epoch left open (see `EpochWindows`), its gradients reduced first."""
        if self.pending_batches:
            if self.reduce_gradients is not None:
                self.reduce_gradients()
            self._step()

    def reset(self) -> None:
        """Forget a window in progress (a new fit starts with none)."""
        self.pending_batches = 0
        self._skip_window = False

    def _step(self) -> None:
        if not self._skip_window:
            self.model_engine.step()
        self.reset()
        if self.on_optimizer_step is not None:
            self.on_optimizer_step()


def _itself(output: Any) -> Any:
    return output
