"""`FSDPStrategy`: fully sharded data parallelism with PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`).

Each rank holds a shard of every parameter, gradient and optimizer state; a block's parameters are gathered just
before its forward (and again for its backward) and its gradients reduce-scattered right after its backward.
Sharding by block keeps only one block gathered at a time: the peak memory of a rank is its shards plus the largest
block. The model is sharded before the optimizers are built, so they step the shards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.checkpoint.spool import Spool
from tracktrain.trainer.strategies.data_parallel import DataParallelStrategy, StepModule
from tracktrain.trainer.strategies.full_state import (
    FullModelState,
    FullOptimizerState,
    ShardedSaving,
    with_stand_ins,
)
from tracktrain.trainer.strategies.tensor_parallel import apply_plan, check_plan, check_styles

__all__ = ["AutoWrap", "FSDPStrategy", "blocks_to_shard"]

#: where a module keeps the sharded root around it, for its next fit (in its __dict__, not as a submodule: the
#: cycle module -> root -> module is freed with the module, which a table of modules would keep alive)
_SHARDED_ROOT_ATTRIBUTE = "_tracktrain_sharded_root"

#: which submodules get their own shard group: module classes, or a predicate over submodules
AutoWrap = Iterable[type[nn.Module]] | Callable[[nn.Module], bool] | None


class FSDPStrategy(DataParallelStrategy):
    """`strategy="fsdp"`: the module's blocks sharded over the ranks with FSDP2, the data sharded as under DDP.

    Args:
        auto_wrap: the blocks sharded (gathered, and freed) one at a time: module classes (e.g. your transformer
            block's), or a predicate `fn(submodule) -> bool`. Default: the elements of every `nn.ModuleList`
            (the layers of a transformer, as models write them). What no block holds is sharded with the root and
            gathered for the whole step.
        mixed_precision: FSDP2's `MixedPrecisionPolicy`. Default: from the Trainer's `precision=` — with
            "bf16-mixed" or "16-mixed" the parameters are gathered in that dtype (half the traffic) and gradients
            reduced in float32; with "32-true", no casting.
        offload_to_cpu: keep the shards, their gradients and the optimizer step on the CPU (CUDA only: frees the
            device's memory for activations at the cost of host-device copies).
        reshard_after_forward: free a block's gathered parameters after its forward (True, the least memory)
            or keep them for its backward (False, one all-gather less per block), or an int: reshard to groups of
            that many ranks (e.g. the ranks of one node).
        timeout: how long a collective waits for the other ranks before the run fails.
        tensor_parallel: a tensor-parallel plan (submodule name -> "colwise" or "rowwise", as
            `TensorParallelStrategy`'s) for 2-D parallelism: the ranks form a mesh of `tensor_parallel_size` columns,
            the plan's layers are split over each row's ranks, and FSDP shards over the columns (each rank reads the
            data shard of its row's index).
        tensor_parallel_size: how many ranks split each layer of the plan (the world size must be a multiple).
        state_dict_type: how checkpoints hold the model and optimizers. "sharded" (default): each rank writes its
            own shards (`torch.distributed.checkpoint`), in parallel, and no rank ever holds the full state; the
            checkpoint is a directory `<name>.dcp`. "full": rank 0 gathers the full state and writes one file, in
            the format of a single-device run's (memory of the whole model on rank 0).

    Either kind loads on any number of ranks (a sharded checkpoint saved on 2 ranks resumes on 1 or 4, each rank
    reading only its shards), and into a module without a Trainer (`Checkpoint.load_objects`); `tracktrain convert`
    turns a sharded checkpoint into one full file. Sharded checkpoints need a directory every rank can write and
    rank 0 can read whole: shared storage or an object store (`s3://...`).

    Gradient accumulation skips the reduce-scatter on all but a window's last batch (gradients accumulate
    unsharded in between, which needs a full copy of them per rank). Clipping by norm takes the norm over all
    shards.
    """

    name = "fsdp"

    def __init__(
        self,
        auto_wrap: AutoWrap = None,
        mixed_precision: MixedPrecisionPolicy | None = None,
        offload_to_cpu: bool = False,
        reshard_after_forward: bool | int = True,
        timeout: timedelta | None = None,
        state_dict_type: str = "sharded",
        tensor_parallel: Mapping[str, Any] | None = None,
        tensor_parallel_size: int = 2,
    ) -> None:
        super().__init__(timeout)
        if tensor_parallel is not None and state_dict_type != "sharded":
            raise ValueError("FSDPStrategy(tensor_parallel=...) saves sharded checkpoints: leave state_dict_type out.")
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"FSDPStrategy(tensor_parallel_size={tensor_parallel_size!r}) must be a positive integer.")
        if state_dict_type not in ("sharded", "full"):
            raise ValueError(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}) takes 'sharded' (each rank saves its shards) or "
                "'full' (rank 0 saves one file of the full state)."
            )
        if not isinstance(reshard_after_forward, (bool, int)):
            raise TypeError(
                f"FSDPStrategy(reshard_after_forward=...) takes True, False or a number of ranks, got "
                f"{reshard_after_forward!r}."
            )
        if not isinstance(reshard_after_forward, bool) and reshard_after_forward < 1:
            raise ValueError(f"FSDPStrategy(reshard_after_forward={reshard_after_forward}) must be at least 1 rank.")
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecisionPolicy):
            raise TypeError(
                "FSDPStrategy(mixed_precision=...) takes a torch.distributed.fsdp.MixedPrecisionPolicy, got "
                f"{type(mixed_precision).__name__}; or leave it out and set Trainer(precision='bf16-mixed')."
            )
        self.auto_wrap = auto_wrap
        self.mixed_precision = mixed_precision
        self.offload_to_cpu = offload_to_cpu
        self.reshard_after_forward = reshard_after_forward
        self.state_dict_type = state_dict_type
        self.tensor_parallel = (
            None if tensor_parallel is None else check_styles(tensor_parallel, "FSDPStrategy(tensor_parallel=...)")
        )
        self.tensor_parallel_size = tensor_parallel_size if tensor_parallel is not None else 1
        self._sharded_saving = ShardedSaving(timeout)
        self._wrapped: StepModule | None = None
        self._module: nn.Module | None = None

    # ---------------------------------------------------------------------------------------------- the model
    def compile_blocks(self, module: nn.Module) -> list[nn.Module] | None:
        """The blocks it shards, each compiled on its own. FSDP2's hooks around each sharded block run outside
        torch.compile (`torch._dynamo.disable`), so a compiled module whose forward calls sharded blocks breaks its
        graph at each of them, and fails outright with `fullgraph=True`; each block compiled on its own is one whole
        graph, with the hooks outside it (torchtitan's choice; `tests/trainer/test_compile.py` shows both)."""
        return blocks_to_shard(module, self.auto_wrap) or None

    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        """Shard each block, then the rest with the root: a `StepModule` around `module`, whose forward (the
        step) gathers what the blocks do not hold and sets up the gradients' reduction for each backward."""
        wrapped = module.__dict__.get(_SHARDED_ROOT_ATTRIBUTE)
        if wrapped is None:
            options: dict[str, Any] = {
                "mp_policy": self._mixed_precision(autocast_dtype),
                "offload_policy": self._offload_policy(),
            }
            if self.tensor_parallel is not None:  # 2-D: the plan over each row of the mesh, FSDP over its columns
                options["mesh"] = self._tensor_parallel_first(module)
            for block in blocks_to_shard(module, self.auto_wrap):
                fully_shard(block, reshard_after_forward=self.reshard_after_forward, **options)
            wrapped = StepModule(module)
            # the root is used again right away by backward: keeping it gathered saves one all-gather per step
            fully_shard(wrapped, reshard_after_forward=False, **options)
            module.__dict__[_SHARDED_ROOT_ATTRIBUTE] = wrapped
        # else a fit before this one sharded it (FSDP2 shards a module once): it goes on as it was sharded then
        self._wrapped, self._module = wrapped, module
        return wrapped

    def _tensor_parallel_first(self, module: nn.Module) -> Any:
        """Split the plan's layers over the "tp" dimension of a (data, tensor) mesh; returns the data dimension."""
        from torch.distributed.device_mesh import init_device_mesh

        assert self.tensor_parallel is not None
        size, world = self.tensor_parallel_size, self.world_size
        if world % size:
            raise ValueError(
                f"FSDPStrategy(tensor_parallel_size={size}) needs a world size that is a multiple of it, got {world}."
            )
        check_plan(module, self.tensor_parallel)
        device_type = next(module.parameters()).device.type
        mesh = init_device_mesh(device_type, (world // size, size), mesh_dim_names=("dp", "tp"))
        apply_plan(module, mesh["tp"], self.tensor_parallel)
        return mesh["dp"]

    def data_shard(self) -> tuple[int, int]:
        """With a tensor-parallel plan the ranks of one mesh row read the same shard: (rows, this rank's row)."""
        return self.world_size // self.tensor_parallel_size, self.global_rank // self.tensor_parallel_size

    @property
    def wrapped_model(self) -> StepModule | None:
        """The sharded root around the module being fit (an `FSDPModule`: `unshard()`, `reshard()`, ...)."""
        return self._wrapped

    def evaluation_forward(self, step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        wrapped = self._wrapped
        if wrapped is None:  # validate/test/predict without a fit: the module is not sharded
            return step
        assert isinstance(wrapped, FSDPModule)

        def forward(batch: Any, batch_idx: int) -> Any:
            output = wrapped(batch, batch_idx, step)
            # no backward follows to reshard the root (kept gathered after forward for the backward of training)
            wrapped.reshard()
            return output

        return forward

    def _mixed_precision(self, autocast_dtype: torch.dtype | None) -> MixedPrecisionPolicy:
        if self.mixed_precision is not None:
            return self.mixed_precision
        if autocast_dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=autocast_dtype, reduce_dtype=torch.float32)

    def _offload_policy(self) -> OffloadPolicy:
        if not self.offload_to_cpu:
            return OffloadPolicy()
        return CPUOffloadPolicy(pin_memory=torch.cuda.is_available())

    # ------------------------------------------------------------------------------------------- gradients
    def no_sync(self) -> contextlib.AbstractContextManager:
        return _gradient_sync_off(self._sharded_root())

    def reduce_gradients(self, module: nn.Module) -> None:
        raise RuntimeError(
            "strategy='fsdp' reduces gradients in the backward of an accumulation window's last batch, but this "
            "epoch ended after a window whose every batch ran without it: the train loader has no length, so its "
            "end showed only after its last batch. Give the loader a length (a Dataset with __len__, or "
            "Trainer(limit_train_batches=N)), or use accumulate_grad_batches=1 with this loader."
        )

    def _sharded_root(self) -> FSDPModule:
        assert isinstance(self._wrapped, FSDPModule), "setup_module() first"
        return self._wrapped

    # ----------------------------------------------------------------------------------------- checkpoints
    def checkpoint_objects(self, objects: dict[str, Any]) -> dict[str, Any]:
        """The module and its optimizers as each rank's shards ("sharded"), or in full, gathered on rank 0 ("full":
        a checkpoint of this fit is then a single-device checkpoint)."""
        if self._module is None:
            return objects
        if self.state_dict_type == "sharded":
            return with_stand_ins(objects, self._module)
        return with_stand_ins(objects, self._module, FullModelState, FullOptimizerState)

    def checkpoint_saver(self, url: str, summarize: Callable[[Any], Any], spool: Spool | None) -> FsspecSaver:
        """ "sharded": every rank writes its shards, with collectives of a process group of their own (made here,
        once, on every rank at the same point), so that a save in the background never meets the step's."""
        if self.state_dict_type == "full":
            return super().checkpoint_saver(url, summarize, spool)
        return self._sharded_saving.saver(url, summarize)


def blocks_to_shard(module: nn.Module, auto_wrap: AutoWrap) -> list[nn.Module]:
    """The submodules of `module` that `auto_wrap` picks, innermost first (FSDP2 shards children before parents)."""
    if auto_wrap is None:
        picked = [block for child in module.modules() if isinstance(child, nn.ModuleList) for block in child]
    elif callable(auto_wrap) and not isinstance(auto_wrap, type):
        picked = [child for child in module.modules() if child is not module and auto_wrap(child)]
    else:
        classes = (auto_wrap,) if isinstance(auto_wrap, type) else tuple(auto_wrap)
        if not classes or not all(isinstance(cls, type) and issubclass(cls, nn.Module) for cls in classes):
            raise TypeError(
                "FSDPStrategy(auto_wrap=...) takes nn.Module classes (your block's, e.g. [TransformerBlock]) or a "
                f"function of a submodule returning True for the blocks to shard, got {auto_wrap!r}."
            )
        picked = [child for child in module.modules() if child is not module and isinstance(child, classes)]
    order = {id(child): depth for child, depth in _depths(module)}
    return sorted(picked, key=lambda child: -order[id(child)])


def _depths(module: nn.Module, depth: int = 0) -> Iterator[tuple[nn.Module, int]]:
    yield module, depth
    for child in module.children():
        yield from _depths(child, depth + 1)


@contextlib.contextmanager
def _gradient_sync_off(root: FSDPModule) -> Iterator[None]:
    root.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)
