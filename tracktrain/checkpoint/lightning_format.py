"""Lightning's `.ckpt` files, read as tracktrain's checkpoints, so that a user moving over keeps their trained models:
`MyModule.load_from_checkpoint("epoch=9.ckpt")` (the weights and the `hyper_parameters` it saved), the evaluation
entry points' `ckpt_path`, and `fit(ckpt_path=...)`, which resumes what means the same here — the weights, each
optimizer's and LR scheduler's state, the global step and the position in the epochs — and says what it does not.

The file is read as plain data (`plain_data.load_plain`); Lightning 2.x writes its checkpoints so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LightningPosition", "from_lightning", "is_lightning_checkpoint"]


def is_lightning_checkpoint(states: Any) -> bool:
    """Whether `states` (a checkpoint as read) is a Lightning checkpoint: its weights under "state_dict", and the
    version that wrote it."""
    return isinstance(states, Mapping) and "state_dict" in states and "pytorch-lightning_version" in states


class LightningPosition:
    """Where the Lightning run was: `epochs_done` whole epochs, and `batches` of the epoch after them."""

    def __init__(self, epochs_done: int, batches: int) -> None:
        self.epochs_done, self.batches = epochs_done, batches

    def iteration(self, epoch_length: int) -> int:
        """The engine's iteration count at that point, for epochs of `epoch_length` batches."""
        return self.epochs_done * epoch_length + self.batches


def from_lightning(states: Mapping[str, Any]) -> tuple[dict[str, Any], LightningPosition, list[str]]:
    """A Lightning checkpoint as ours: the weights ("model"), the optimizers' and schedulers' states, and the Trainer's
    entry (global step, the module's hparams as its settings record them); where the run was; and what of it is not
    carried over (its callbacks' states, the random generators' and the data's position, an AMP scaler)."""
    fit_loop = (states.get("loops") or {}).get("fit_loop") or {}
    # an epoch counts as "processed" once all its batches ran (before its end hooks, which may save a checkpoint) and
    # "completed" after them: processed is the epochs done at any save
    epochs_done = _count(fit_loop, "epoch_progress", "processed", default=int(states.get("epoch", 0)))
    progress = fit_loop.get("epoch_loop.batch_progress") or {}
    batches = 0 if progress.get("is_last_batch") else _count(fit_loop, "epoch_loop.batch_progress", "completed", 0)
    ours: dict[str, Any] = {
        "model": dict(states["state_dict"]),
        "trainer": {
            "global_step": int(states.get("global_step", 0)),
            "settings": {"module": dict(states.get("hyper_parameters") or {})},
            "callbacks": {},
        },
    }
    if states.get("optimizer_states"):
        ours["optimizers"] = list(states["optimizer_states"])
    if states.get("lr_schedulers"):
        ours["lr_schedulers"] = list(states["lr_schedulers"])
    left = []
    if states.get("callbacks"):
        left.append(f"the callbacks' states ({', '.join(sorted(states['callbacks']))})")
    left.append("the random generators and the data's position (the next epoch's order is this run's)")
    for key, what in (("native_amp_scaling_state", "the AMP gradient scaler"), ("datamodule_hyper_parameters", None)):
        if key in states and what is not None:
            left.append(what)
    return ours, LightningPosition(epochs_done, batches), left


def _count(loop: Mapping[str, Any], key: str, field: str, default: int) -> int:
    current = ((loop.get(key) or {}).get("current") or {}).get(field)
    return default if current is None else int(current)
