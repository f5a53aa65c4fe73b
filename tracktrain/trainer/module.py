"""`LoopModule`: the model and what one step of training, validation, testing and prediction does with it."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from tracktrain.distributed import ranks
from tracktrain.trainer.hparams import AttributeDict, HyperparametersMixin
from tracktrain.trainer.lightning_names import reduction_of, refuse_log_arguments

if TYPE_CHECKING:
    from tracktrain.trainer.surface import ModuleHost

__all__ = ["LoopModule", "checked_loss", "loss_in_output"]

_Module = TypeVar("_Module", bound="LoopModule")


_STEPS = ("train_step", "eval_step", "test_step", "predict_step")


def _takes_batch_idx(step: Callable[..., Any]) -> bool:
    """Whether `step(self, batch, batch_idx, ...)` may be called with a batch index: its signature has a second
    positional parameter after `self`, or `*args`."""
    try:
        parameters = list(inspect.signature(step).parameters.values())[1:]  # after self
    except (TypeError, ValueError):  # a builtin or a callable without a signature: called as it is
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _called_with_batch_only(step: Callable[..., Any]) -> Callable[..., Any]:
    def called(self: Any, batch: Any, *indices: Any, **_: Any) -> Any:  # batch_idx, dataloader_idx: not taken
        return step(self, batch)

    called.__name__, called.__qualname__, called.__doc__ = step.__name__, step.__qualname__, step.__doc__
    called.__module__ = step.__module__
    return called


def loss_in_output(output: Any) -> tuple[torch.Tensor | None, str]:
    """The loss in a `train_step` output (the output itself, or its "loss" entry) and, when there is none, what
    the output was instead, for the error message."""
    loss = output.get("loss") if isinstance(output, Mapping) else output
    if isinstance(loss, torch.Tensor):
        return loss, ""
    found = f"a dict without 'loss' (keys {sorted(output)})" if isinstance(output, Mapping) else repr(output)[:100]
    return None, found


def checked_loss(output: Any) -> torch.Tensor | None:
    """The loss `train_step` returned under automatic optimization, or an error saying what is wrong with it; None
    for None (Lightning's: the batch is skipped, no backward and no optimizer step)."""
    if output is None:
        return None
    loss, found = loss_in_output(output)
    if loss is None:
        raise ValueError(
            f"train_step must return the loss (a scalar tensor) or a dict with it under 'loss'; it returned {found}. "
            "To skip the batch's optimizer step return None; to step yourself set automatic_optimization = False."
        )
    if loss.numel() != 1:
        raise ValueError(
            f"train_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar. Reduce it (e.g. .mean())."
        )
    if not loss.requires_grad:
        raise ValueError(
            "train_step returned a loss that does not require grad (computed under torch.no_grad(), detached, or "
            "from no trainable parameter), so there is nothing to backpropagate."
        )
    return loss


class LoopModule(HyperparametersMixin, nn.Module):
    """Subclass it: write `train_step`, `configure_optimizers` and (to validate) `eval_step`; a `Trainer` runs it.

    .. code-block:: python

        class Classifier(LoopModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Linear(64, 10)

            def train_step(self, batch, batch_idx):
                x, y = batch
                loss = F.cross_entropy(self.net(x), y)
                self.log("train_loss", loss, prog_bar=True)
                return loss

            def eval_step(self, batch, batch_idx):
                x, y = batch
                self.log("val_loss", F.cross_entropy(self.net(x), y))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)


        Trainer(max_epochs=5).fit(Classifier(), train_loader, val_loader)

    With `automatic_optimization = False`, `train_step` does the optimization itself with `self.optimizers()`,
    `self.backward(loss)` and `self.clip_gradients(...)` (two optimizers for a GAN, for instance).

    The lifecycle hooks (`on_fit_start`, `on_train_epoch_end`, `on_before_backward`, ...) are those of
    `tracktrain.callbacks.Callback` without the `trainer, module` arguments; each is an Engine event, and only
    the ones a subclass overrides are attached.
    """

    automatic_optimization: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A step defined without `batch_idx` (Lightning calls each step with the arguments its signature takes:
        `def train_step(self, batch)`) is given the Trainer's arguments and passes on the ones it takes; decided
        here, once per class, so that no step call inspects a signature."""
        super().__init_subclass__(**kwargs)
        for name in _STEPS:
            step = cls.__dict__.get(name)
            if callable(step) and not _takes_batch_idx(step):
                setattr(cls, name, _called_with_batch_only(step))

    def __init__(self) -> None:
        super().__init__()
        self._trainer: ModuleHost | None = None
        self._hparams = AttributeDict()  # save_hyperparameters() / hparams: HyperparametersMixin's

    # ----------------------------------------------------------------------------------- the steps (override)
    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor | Mapping[str, Any] | None:
        """One training step: return the loss (a scalar tensor) or a dict with it under "loss". With manual
        optimization, return what you like (or nothing)."""
        raise NotImplementedError(f"{type(self).__name__} must define train_step(self, batch, batch_idx).")

    def eval_step(self, batch: Any, batch_idx: int) -> Any:
        """One validation step; log the metrics with `self.log` (aggregated over the whole loader)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no eval_step(self, batch, batch_idx); define it to validate or test."
        )

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """One test step; by default the same as `eval_step`."""
        return self.eval_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """One prediction step; by default `self(batch)`."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer; a list of them; `(optimizers, schedulers)`; or a dict (or a list of dicts)
        `{"optimizer": opt, "lr_scheduler": scheduler or {"scheduler": s, "interval": "step" | "epoch",
        "frequency": n, "monitor": "val_loss"}}`."""
        raise NotImplementedError(f"{type(self).__name__} must define configure_optimizers(self).")

    def configure_callbacks(self) -> Sequence[Any] | Any:
        """`Callback`s this module needs (one, or a list), added by each `fit`/`validate`/`test`/`predict`: one
        replaces a callback of the same type given to the Trainer; checkpointing ones (`ModelCheckpoint`) run after
        the others. (Typed `Any` as `Callback`'s module imports this one; the Trainer checks each is a Callback.)"""
        return []

    @classmethod
    def load_from_checkpoint(
        cls: type[_Module],
        checkpoint_path: str | os.PathLike,
        map_location: str | torch.device | None = None,
        strict: bool = True,
        **hparams_overrides: Any,
    ) -> _Module:
        """The module a Trainer's checkpoint holds, as Lightning's: built from the hparams it saved (updated with
        `hparams_overrides`), its weights loaded (`strict`: every key must match), moved to `map_location`, in eval
        mode. `checkpoint_path`: a file or sharded `.dcp` directory, a local path or fsspec URL (`s3://...`).
        Called on `LoopModule` itself, it builds the class the checkpoint records."""
        from tracktrain.trainer.module_loading import load_module

        return load_module(cls, checkpoint_path, map_location, strict, hparams_overrides, base=LoopModule)

    # --------------------------------------------------------------------------------------- the trainer side
    @property
    def trainer(self) -> ModuleHost:
        """The Trainer running this module: its extension surface, and what the module's own methods call on it
        (`tracktrain.trainer.surface`)."""
        if self._trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer; pass it to Trainer.fit() first.")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: ModuleHost | None) -> None:
        """Attach the module to `trainer` (each of its entry points does), or detach it (None)."""
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        """Where the module's weights are (its first parameter's or buffer's device; the CPU without any)."""
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            return tensor.device
        return torch.device("cpu")

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes of the run (0 without torch.distributed)."""
        return ranks.global_rank()

    @property
    def local_rank(self) -> int:
        """This process's rank on its machine (torchrun's LOCAL_RANK; 0 without it)."""
        return ranks.local_rank()

    @property
    def example_input_array(self) -> Any:
        """Lightning's: an input the module runs on (a tensor, a tuple of positional inputs, a dict of keyword ones):
        the model summary shows each layer's input and output sizes from it, `TensorBoardLogger(log_graph=True)`
        traces the graph on it, and the export functions take it when given no example. None: none."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self.__dict__["_example_input_array"] = example

    @property
    def logger(self) -> Any:
        """Lightning's `self.logger`: the Trainer's first logger (`self.logger.experiment.add_image(...)`,
        `self.logger.log_hyperparams(...)`), None outside a Trainer or without loggers."""
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """Lightning's `self.loggers`: the Trainer's loggers (none outside a Trainer)."""
        return list(self._trainer.loggers) if self._trainer is not None else []

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print`, on the process of global rank 0 only (the others would print the same lines again)."""
        if ranks.global_rank() == 0:
            print(*args, **kwargs)

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (0 outside a Trainer)."""
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """The training epoch being run, counted from 0 (0 outside a Trainer)."""
        return self._trainer.current_epoch if self._trainer is not None else 0

    def log(
        self,
        name: str,
        value: torch.Tensor | float,
        *,
        prog_bar: bool = False,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce: str = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
        reduce_fx: str | Callable[..., Any] | None = None,
        logger: bool | None = None,
        **lightning: Any,
    ) -> None:
        """Log a scalar. Defaults: in `train_step` per step only; in evaluation steps and hooks per epoch only.

        Per-epoch values are reduced over the epoch with `reduce` ("mean" weighted by `batch_size`, by default
        the batch's length; "sum", "max", "min"; Lightning's `reduce_fx`, a name or `torch.mean`/`sum`/`max`/`min`,
        is the same) and, with `sync_dist`, across processes. A value logged both per step and per epoch appears
        as `name_step` and `name_epoch`. Under several evaluation loaders a step's value is named
        `name/dataloader_idx_N` (not with `add_dataloader_idx=False`). `logger=False`: in `callback_metrics` (for
        callbacks, the progress bar) but neither published to the loggers nor in `logged_metrics` or what
        `validate()`/`test()` return, as in Lightning. Values stay tensors: they are read from the
        device only when they are published (every `log_every_n_steps`), shown or read (`logged_metrics`). Outside a Trainer this does
        nothing. Lightning's other arguments of `log` are refused, naming what to use.
        """
        if lightning:
            refuse_log_arguments(lightning)
        if reduce_fx is not None:
            reduce = reduction_of(reduce_fx, reduce)
        if self._trainer is not None:
            self._trainer.metric_log.log(
                name,
                value,
                prog_bar,
                on_step,
                on_epoch,
                reduce,
                sync_dist,
                batch_size,
                add_dataloader_idx,
                logger is not False,
            )

    def log_dict(self, metrics: Mapping[str, torch.Tensor | float], **options: Any) -> None:
        """`log` each entry of `metrics` with the same options."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log_dict needs a mapping of name -> value, got {type(metrics).__name__}.")
        for name, value in metrics.items():
            self.log(name, value, **options)

    # ---------------------------------------------------------------------------------- manual optimization
    def optimizers(self) -> Any:
        """The optimizer from `configure_optimizers` (a list when there are several). Under
        precision="16-mixed" each is a `ScaledOptimizer`, whose `step()` goes through the GradScaler."""
        optimizers = self.trainer.manual_optimizers
        return optimizers[0] if len(optimizers) == 1 else list(optimizers)

    def lr_schedulers(self) -> Any:
        """The LR scheduler(s) from `configure_optimizers` (None, one, or a list); step them yourself under manual
        optimization."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Lightning's: only `optimizer`'s parameters take gradients until `untoggle_optimizer` (a GAN's generator step
        leaves the discriminator's alone): every other optimizer's parameters get `requires_grad=False`, and their
        previous flags are kept to restore."""
        optimizer = getattr(optimizer, "optimizer", optimizer)  # a ScaledOptimizer's own
        if self.__dict__.get("_toggled") is not None:
            raise RuntimeError(
                "toggle_optimizer: an optimizer is toggled already; call untoggle_optimizer(...) first (Lightning "
                "toggles one at a time too)."
            )
        own = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
        others = [getattr(other, "optimizer", other) for other in self.trainer.optimizers]
        kept: dict[int, tuple[torch.Tensor, bool]] = {}
        for other in others:
            for group in other.param_groups:
                for parameter in group["params"]:
                    if id(parameter) not in own and id(parameter) not in kept:
                        kept[id(parameter)] = (parameter, parameter.requires_grad)
                        parameter.requires_grad = False
        self.__dict__["_toggled"] = (optimizer, kept)

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Undo `toggle_optimizer(optimizer)`: the other optimizers' parameters get their `requires_grad` back."""
        toggled = self.__dict__.get("_toggled")
        if toggled is None or toggled[0] is not getattr(optimizer, "optimizer", optimizer):
            raise RuntimeError("untoggle_optimizer(optimizer): that optimizer is not toggled (toggle_optimizer first).")
        for parameter, requires_grad in toggled[1].values():
            parameter.requires_grad = requires_grad
        self.__dict__["_toggled"] = None

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """Lightning's: `toggle_optimizer(optimizer)` for the `with` block, untoggled after it (also on an error)."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate `loss` the way the Trainer's precision and strategy need (scaled under fp16)."""
        self.trainer.running_model_engine.backward(loss)

    def manual_backward(self, loss: torch.Tensor) -> None:
        """Lightning's name for `backward(loss)` under manual optimization: the same call."""
        self.backward(loss)

    # ------------------------------------------------------------------------ automatic optimization's hooks
    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Under automatic optimization, the step at an accumulation window's end (Lightning's hook): override it
        to change what happens around the step (a learning-rate warm-up). `optimizer_closure` runs the batch
        (`train_step`, zeroing, backward); `optimizer.step(closure=optimizer_closure)` runs it, then the Trainer's
        step (gradient clipping, the GradScaler, the optimizer's own step). Call it (or `super().optimizer_step`)
        exactly as Lightning's hook does."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Under automatic optimization, how the gradients are zeroed where an accumulation window starts
        (Lightning's hook; default `optimizer.zero_grad()`)."""
        optimizer.zero_grad()

    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
    ) -> None:
        """Clip the gradients of `optimizer`'s parameters: by total norm ("norm") or element value ("value")."""
        if gradient_clip_algorithm not in ("norm", "value"):
            raise ValueError(f'gradient_clip_algorithm must be "norm" or "value", got {gradient_clip_algorithm!r}.')
        if gradient_clip_val is None or gradient_clip_val == 0:
            return
        optimizer = getattr(optimizer, "optimizer", optimizer)  # a ScaledOptimizer's own optimizer
        model_engine = self.trainer.running_model_engine
        model_engine.unscale_gradients(optimizer)
        if gradient_clip_algorithm == "norm":
            model_engine.clip_gradients(optimizer, max_norm=gradient_clip_val)
        else:
            model_engine.clip_gradients(optimizer, max_value=gradient_clip_val)

    # ------------------------------------------------------------------ lifecycle hooks (override as needed)
    def on_fit_start(self) -> None: ...

    def on_fit_end(self) -> None: ...

    def on_sanity_check_start(self) -> None: ...

    def on_sanity_check_end(self) -> None: ...

    def on_train_start(self) -> None: ...

    def on_train_end(self) -> None: ...

    def on_train_epoch_start(self) -> None: ...

    def on_train_epoch_end(self) -> None: ...

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None: ...

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...

    def on_validation_start(self) -> None: ...

    def on_validation_end(self) -> None: ...

    def on_validation_epoch_start(self) -> None: ...

    def on_validation_epoch_end(self) -> None: ...

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_test_start(self) -> None: ...

    def on_test_end(self) -> None: ...

    def on_test_epoch_start(self) -> None: ...

    def on_test_epoch_end(self) -> None: ...

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_predict_start(self) -> None: ...

    def on_predict_end(self) -> None: ...

    def on_predict_epoch_start(self) -> None: ...

    def on_predict_epoch_end(self) -> None: ...

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_before_backward(self, loss: torch.Tensor) -> None: ...

    def on_after_backward(self) -> None: ...

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    def on_exception(self, exception: BaseException) -> None: ...
