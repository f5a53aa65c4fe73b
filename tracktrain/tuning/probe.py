"""What both finders share: a temporary Trainer built from the user's settings, and the module, optimizers and random
generators put back as they were once a sweep or a trial is over."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from tracktrain.rng import get_rng_states, set_rng_states
from tracktrain.trainer.callback import Callback, CallbackPhase
from tracktrain.trainer.module import LoopModule
from tracktrain.trainer.optimizers import parse_optimizers
from tracktrain.trainer.surface import ModuleHost, TrainerSurface
from tracktrain.trainer.trainer import Trainer

__all__ = ["OptimizerSnapshot", "check_trainer_and_module", "probe_trainer", "restored"]


def check_trainer_and_module(owner: str, trainer: Any, module: Any) -> None:
    if not isinstance(trainer, Trainer):
        raise TypeError(
            f"{owner}(trainer=...) needs a tracktrain.Trainer, got {type(trainer).__name__}: {trainer!r:.80}."
        )
    if not isinstance(module, LoopModule):
        raise TypeError(
            f"{owner}(module=...) needs a LoopModule (its configure_optimizers gives the optimizer to tune), got "
            f"{type(module).__name__}; wrap a plain model in a LoopModule first."
        )


def probe_trainer(
    trainer: Trainer, callbacks: Sequence[Callback], max_steps: int, limit_train_batches: int | None = None
) -> Trainer:
    """A Trainer that runs the same step as `trainer` (precision, accumulation, clipping, device, strategy,
    activation checkpointing, compile, seed) for `max_steps` optimizer steps, with `callbacks` only: no progress
    bar, no checkpoints, no loggers, no resume, no model summary, so it writes nothing. Non-finite losses are the point of a sweep:
    they are skipped (no optimizer step on them) rather than raised."""
    limit = trainer.limits["fit"] if limit_train_batches is None else limit_train_batches
    return Trainer(
        max_steps=max_steps,
        accumulate_grad_batches=trainer.accumulate_grad_batches,
        gradient_clip_val=trainer.gradient_clip_val,
        gradient_clip_algorithm=trainer.gradient_clip_algorithm,
        limit_train_batches=limit,
        log_every_n_steps=max_steps + 1,  # nothing is published: there are no loggers to publish to
        callbacks=list(callbacks),
        loggers=False,
        seed=trainer.seed,
        deterministic=trainer.deterministic,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,  # each trial would log it again
        default_root_dir=trainer.default_root_dir,
        precision=trainer.precision,
        strategy=trainer.strategy,
        accelerator=trainer.device.type,
        resume=None,
        nonfinite="skip_step",
        activation_checkpointing=trainer.activation_checkpointing,
        compile=trainer.compile if trainer.compile is not None else False,
    )


class OptimizerSnapshot(Callback):
    """Keeps a copy of the optimizers' and LR schedulers' states as the fit starts (after `configure_optimizers`),
    so that `restore` can put back an optimizer the module keeps between fits (one built once and returned each
    time); a fresh one per fit is rebuilt by the next fit anyway."""

    phase = CallbackPhase.FIRST  # before any other hook touches the optimizers (and first among those given)

    def __init__(self) -> None:
        self._saved: list[tuple[Any, dict[str, Any]]] = []

    def on_fit_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if self._saved:  # several fits (the batch-size trials): the state before the first one counts
            return
        objects: list[Any] = list(trainer.optimizers)
        objects += [config.scheduler for config in trainer.lr_scheduler_configs]
        self._saved = [(obj, copy.deepcopy(obj.state_dict())) for obj in objects]

    def restore(self) -> None:
        for obj, state in self._saved:
            obj.load_state_dict(state)


@contextmanager
def restored(module: LoopModule, snapshot: OptimizerSnapshot) -> Iterator[None]:
    """Run the body with the module's optimizers without their LR schedulers, then put back the module's
    parameters and buffers (bit for bit), its train/eval mode, the
    Trainer it was attached to, the optimizers' states (`snapshot`) and the random generators (python, numpy,
    torch: a sweep draws batches and dropout masks, and building a seeded Trainer reseeds them)."""
    weights = {name: tensor.detach().clone() for name, tensor in module.state_dict(keep_vars=True).items()}
    training = module.training
    rng_states = get_rng_states()
    try:
        attached: ModuleHost | None = module.trainer
    except RuntimeError:  # not attached to any Trainer yet
        attached = None
    own = module.__dict__.get("configure_optimizers")  # one set on the instance, to put back
    configure = own if own is not None else module.configure_optimizers
    # the searches step the optimizer alone: a scheduler would change the rates a sweep sets, and one that monitors
    # a validation value finds none in a fit without validation
    module.configure_optimizers = lambda: parse_optimizers(configure())[0]  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del module.configure_optimizers
        else:
            module.configure_optimizers = own  # type: ignore[method-assign]
        with torch.no_grad():
            module.load_state_dict(weights)
        module.train(training)
        module.trainer = attached
        snapshot.restore()
        set_rng_states(rng_states)
