"""`Strategy`: how the Trainer spreads a fit over devices and processes — the one object that owns distribution.

A strategy wraps the model and the data, never the loop: the same `TrainingStep` runs under each. The Trainer
calls it in one fixed order (see `docs/architecture.md`):

1. `setup_environment(device)`: join the process group (if any); this process's device.
2. `setup_module(module)`: wrap the model — before the optimizers are built, so that they hold the parameters
   the wrapped model trains (a sharded model's shards); returns the step's forward (`evaluation_forward` gives
   the evaluation steps theirs).
3. `model_engine_options(optimizer)`: how the optimizer steps (gradient handlers, the step itself).
4. `distribute(loader)`: each loader as this process reads it (its shard).
5. Per step: `no_sync()` on batches whose gradients wait for their window's last one; `reduce_gradients` for a
   window flushed at an epoch's end.
6. At boundaries, the collectives: `any_rank`, `rank_zero_value`, `gather`, `gather_floats`, `check_same`,
   `reduce_tensor`, `async_any_rank` — every rank calls them at the same points, so none waits for a collective the
   others skipped. They are the only collectives the trainer and callbacks issue; beside them are the model's own
   (gradients, sharding) and the metrics' `compute()` (`tracktrain.metrics.distributed`, a layer below the trainer).
7. `check_schedule(...)`, then `setup_recovery(objects)`: once the optimizers exist, what a replica that rejoins a fault-tolerant fit copies
   from a live peer (the module, optimizers, schedulers, the Trainer's counters); nothing here.
8. `checkpoint_objects(objects)`: what a checkpoint saves of them (full state here).
9. `teardown()`: every rank ends the fit together.

The base's defaults are one process on one device; its collectives are `tracktrain.distributed.collectives`'s, which return
the local value when no process group is up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from tracktrain.checkpoint.savers import FsspecSaver, saver_for
from tracktrain.checkpoint.spool import Spool
from tracktrain.distributed import collectives as distributed
from tracktrain.distributed.ranks import rank_and_world_size

__all__ = ["SingleDeviceStrategy", "Strategy"]


class Strategy:
    """One process, one device (`strategy="single_device"`, also "auto"): the module's own `train_step`, the
    loaders as given, collectives that return the local value. Subclass it for other layouts."""

    name = "single_device"
    #: ranks run the same steps at the same time, so a flag can be exchanged every few steps (pre-emption)
    steps_in_lockstep = False

    # ------------------------------------------------------------------------------- process group and ranks
    @property
    def is_distributed(self) -> bool:
        """Whether this fit's ranks exchange anything (a process group is up)."""
        return distributed.is_distributed()

    @property
    def global_rank(self) -> int:
        return rank_and_world_size()[0]

    @property
    def world_size(self) -> int:
        return rank_and_world_size()[1]

    def setup_environment(self, device: torch.device) -> torch.device:
        """Join the process group (none here); returns this process's device."""
        return device

    # ------------------------------------------------------------------------------------ model and data
    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        """Wrap `module` for training, before its optimizers are built; returns `forward(batch, batch_idx)`.
        `autocast_dtype`: the Trainer's mixed precision (None: full precision), which a sharding strategy casts what
        it gathers to."""
        return module.train_step  # type: ignore[return-value]

    def compile_blocks(self, module: nn.Module) -> list[nn.Module] | None:
        """What `Trainer(compile=...)` compiles one by one before `setup_module` wraps `module`: None, the module
        whole (a sharding strategy names the blocks it shards)."""
        return None

    def evaluation_forward(self, step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        """`step` (the module's `eval_step`, `test_step` or `predict_step`) as it runs under this strategy."""
        return step

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        """How the ModelEngine steps under this strategy (gradient handlers, the optimizer step)."""
        return {}

    def zero_grad(self, zero: Callable[[], None]) -> None:
        """Where an accumulation window starts, before its first forward: `zero()` clears the gradients (the
        module's `optimizer_zero_grad`, by default `optimizer.zero_grad()`). A fault-tolerant strategy forms the
        step's quorum here first (and heals a rejoining replica group); the Trainer calls this only where a
        strategy overrides it."""
        zero()

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        """`loader` as this process reads it; `seed`: the run's data-order seed (a shuffling sampler's, the same on
        every rank)."""
        return loader

    # ------------------------------------------------------------------------------------------ gradients
    def no_sync(self) -> contextlib.AbstractContextManager:
        """The context of a batch whose gradients wait for its accumulation window's last batch."""
        return contextlib.nullcontext()

    def reduce_gradients(self, module: nn.Module) -> None:
        """Reduce gradients that backward left unreduced (a window whose every batch ran under `no_sync`)."""

    # ------------------------------------------------------------------------------------------ collectives
    # tracktrain.distributed.collectives's, the one implementation: the local value without a process group
    def any_rank(self, flag: bool) -> bool:
        """`flag` or-ed over the ranks."""
        return distributed.any_rank(flag)

    def rank_zero_value(self, value: Any) -> Any:
        """Rank 0's `value`, on every rank."""
        return distributed.rank_zero_value(value)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order."""
        return distributed.gather_objects(value)

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's `values` (as many on each), in rank order: one all-gather of a tensor, no pickling (the
        boundary decisions' exchange)."""
        return distributed.gather_floats(values)

    def reduce_tensor(self, value: torch.Tensor, op: str) -> torch.Tensor:
        """`value` reduced over the ranks by `op` ("sum", "max" or "min"), in its own shape, dtype and device."""
        return distributed.all_reduce_tensor(value, op)

    def async_any_rank(self) -> distributed.AsyncAnyRank:
        """A flag or-ed over the ranks without waiting: `exchange(value)` gives the previous exchange's answer and
        sends `value` (pre-emption, every few steps); `finish()` waits for the one in flight."""
        return distributed.AsyncAnyRank()

    def check_same(self, what: str, value: int) -> None:
        """Fail, naming `what`, if the ranks disagree on `value`."""
        distributed.check_same_on_all_ranks(what, value)

    def barrier(self) -> None:
        """Wait until every rank arrives here."""
        if distributed.is_distributed():
            torch.distributed.barrier()

    # -------------------------------------------------------------------------------- checkpoints, the end
    def setup_recovery(self, objects: dict[str, Any]) -> None:
        """Given once the fit's optimizers are built: the objects a checkpoint saves (`checkpoint_objects`'
        argument). A fault-tolerant strategy serves their state to a rejoining replica group and loads a peer's
        into them when this group rejoins; other strategies need nothing."""

    def step_values(self) -> dict[str, float]:
        """Values of the strategy's own published with the step's logged values (at `log_every_n_steps`), e.g. a
        fault-tolerant strategy's replica groups in the step; none here."""
        return {}

    def check_schedule(
        self, max_epochs: int | None, max_steps: int | None, scheduler_intervals: Sequence[str], accumulates: bool
    ) -> None:
        """Given once the optimizers exist, before the first step: the fit's limits, its LR schedulers' intervals
        ("step" / "epoch") and whether it accumulates gradients. A strategy whose processes may not share their
        epoch position (a healed replica group) refuses what would then make them diverge; nothing here."""

    def checkpoint_objects(self, objects: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint saves of `objects`: their full state, as they are (a sharded strategy gives
        objects that save and load their shards)."""
        return objects

    def checkpoint_saver(self, url: str, summarize: Callable[[Any], Any], spool: Spool | None) -> FsspecSaver:
        """The saver of a checkpoint directory at `url` (its files get manifests summarized by `summarize`;
        `spool`: where they wait while a remote store does not answer). Here one file, written by rank 0."""
        return saver_for(
            url,
            create_dir=True,
            require_empty=False,
            manifest=True,
            summarize=summarize,
            **({"spool": spool} if spool else {}),
        )

    def teardown(self) -> None:
        """The fit's end (every rank ends it together, where there are several)."""


class ParallelStrategy(Strategy):
    """The base of the strategies that run a fit over several processes (data, pipeline, tensor parallel, XLA), as
    Lightning's `ParallelStrategy` is: a program asks `isinstance(trainer.strategy, ParallelStrategy)` to split its
    batch size over the processes."""

    @property
    def num_processes(self) -> int:
        """The processes of this node (Lightning's: one per device; torchrun's `LOCAL_WORLD_SIZE`)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))


class SingleDeviceStrategy(Strategy):
    """One process, one device: `strategy="auto"` or `"single_device"`."""
