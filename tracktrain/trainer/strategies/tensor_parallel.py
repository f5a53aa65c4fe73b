"""`TensorParallelStrategy`: the linear layers a plan names split over the ranks with DTensor's
`parallelize_module` — column-wise (each rank computes a slice of the outputs) or row-wise (a slice of the inputs,
the partial outputs summed) — so that a layer too large for one device is spread over several.

Every rank reads the same batches (tensor parallelism is not data parallelism): the loader's order is drawn from the
run's seed, the same on each rank, so the loss and the metrics are the same everywhere and every decision agrees.
Checkpoints are sharded (each rank writes its slices, `ShardedSaver`), and load on any number of ranks or whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.checkpoint.spool import Spool
from tracktrain.trainer.strategies.base import ParallelStrategy
from tracktrain.trainer.strategies.data_parallel import join_process_group, same_order_on_every_rank
from tracktrain.trainer.strategies.full_state import ShardedSaving, with_stand_ins

__all__ = ["TensorParallelStrategy", "apply_plan", "check_plan", "check_styles"]

#: the plan's words for DTensor's parallel styles
STYLES = ("colwise", "rowwise")


def check_plan(module: nn.Module, plan: Mapping[str, Any]) -> None:
    """ValueError naming what a tensor-parallel `plan` names that `module` does not have, and its linear layers."""
    names = dict(module.named_modules())
    missing = [name for name in plan if name not in names]
    if missing:
        linear = [name for name, child in names.items() if isinstance(child, nn.Linear)]
        raise ValueError(
            f"The tensor-parallel plan names {missing}, which the module does not have; its linear layers are {linear}."
        )


def apply_plan(module: nn.Module, mesh: Any, plan: Mapping[str, Any]) -> None:
    """Split the layers `plan` names over the ranks of the 1-D `mesh` (DTensor's `parallelize_module`)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(module, mesh, {name: styles[s]() if isinstance(s, str) else s for name, s in plan.items()})


def check_styles(plan: Any, owner: str) -> dict[str, Any]:
    """`plan` as a dict, each style checked; ValueError saying what a plan takes."""
    if not isinstance(plan, Mapping) or not plan:
        raise ValueError(
            f"{owner} takes a dict of submodule names to 'colwise' or 'rowwise', e.g. "
            f"{{'net.0': 'colwise', 'net.2': 'rowwise'}}; got {plan!r}."
        )
    for name, style in plan.items():
        if isinstance(style, str) and style not in STYLES:
            raise ValueError(
                f"{owner}: plan[{name!r}] = {style!r}: use 'colwise', 'rowwise', or a style of "
                "torch.distributed.tensor.parallel."
            )
    return dict(plan)


class TensorParallelStrategy(ParallelStrategy):
    """`Trainer(strategy=TensorParallelStrategy({"net.0": "colwise", "net.2": "rowwise"}))`.

    Args:
        plan: submodule name -> "colwise", "rowwise", or a `torch.distributed.tensor.parallel` style (e.g.
            `ColwiseParallel(output_layouts=Shard(1))`). The usual pair: a column-wise layer followed by a
            row-wise one, whose output is whole again on every rank (one all-reduce per pair).
        timeout: how long a collective waits for the other ranks before the run fails.
    """

    name = "tensor_parallel"
    steps_in_lockstep = True

    def __init__(self, plan: Mapping[str, Any], timeout: timedelta | None = None) -> None:
        super().__init__()
        self.plan = check_styles(plan, "TensorParallelStrategy(plan=...)")
        self.timeout = timeout
        self._sharded_saving = ShardedSaving(timeout)
        self._module: nn.Module | None = None

    def setup_environment(self, device: torch.device) -> torch.device:
        return join_process_group(device, self.timeout)

    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        from torch.distributed.device_mesh import init_device_mesh

        check_plan(module, self.plan)
        if not any(isinstance(parameter, torch.distributed.tensor.DTensor) for parameter in module.parameters()):
            device_type = next(module.parameters()).device.type
            apply_plan(module, init_device_mesh(device_type, (torch.distributed.get_world_size(),)), self.plan)
        # else a fit before this one split it: it goes on as it was
        self._module = module
        return module.train_step  # type: ignore[return-value]  # a LoopModule's

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        return same_order_on_every_rank(loader, self.name)

    def checkpoint_objects(self, objects: dict[str, Any]) -> dict[str, Any]:
        """The module and its optimizers as each rank's slices."""
        return objects if self._module is None else with_stand_ins(objects, self._module)

    def checkpoint_saver(self, url: str, summarize: Callable[[Any], Any], spool: Spool | None) -> FsspecSaver:
        return self._sharded_saving.saver(url, summarize)

    def teardown(self) -> None:
        """Every rank ends the fit together (a sharded save may still be committing)."""
        self.barrier()
