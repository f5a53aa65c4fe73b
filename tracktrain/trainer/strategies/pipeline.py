"""`PipelineStrategy`: a `PipelineModule`'s stages on several ranks, each batch split into micro-batches that flow
through them (Colossal-AI's pipeline schedules, `tracktrain.engine.pipeline`), in the Trainer's loop.

Every rank reads the same batches (a pipeline is not data parallel): the loader's order is drawn from the run's
seed. The loss and the module's metrics are computed on the last stage and sent to every rank, so that each logs,
stops early and checkpoints alike. Each rank keeps only its stages: the others are dropped from its module (their
memory freed), its optimizer steps its own parameters. Checkpoints are sharded (`ShardedSaver`): each rank writes its
stages' parameters and optimizer state under their names in the whole model, so one reads back into a single-process
module (`read_checkpoint`, `tracktrain convert`), and a single-process checkpoint loads into the pipeline's ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.checkpoint.sharded import (
    GROUP_OF_KEY,
    PARAMETER_ORDER_KEY,
    StoredShards,
    by_parameter_name,
)
from tracktrain.checkpoint.sharded_saver import RankState
from tracktrain.checkpoint.spool import Spool
from tracktrain.engine.pipeline import PipelineSchedule, check_schedule_options
from tracktrain.trainer.pipeline_module import PipelineModule, split_pipeline_batch, stage_of_step
from tracktrain.trainer.strategies.base import ParallelStrategy
from tracktrain.trainer.strategies.data_parallel import join_process_group, same_order_on_every_rank
from tracktrain.trainer.strategies.full_state import ShardedSaving

__all__ = [
    "PipelineStrategy",
    "RemovedStage",
    "StagesOptimizerState",
    "StagesState",
    "check_stages",
    "drop_other_stages",
]

#: an optimizer's state keyed by parameter name, groups' options per parameter: no key of two ranks' stages collides
_BY_PARAMETER = StateDictOptions(flatten_optimizer_state_dict=True)


class RemovedStage(nn.Module):
    """Where a stage another rank runs was, in this rank's module."""

    def __init__(self, stage: int, rank: int) -> None:
        super().__init__()
        self.stage, self.rank = stage, rank

    def extra_repr(self) -> str:
        return f"stage={self.stage}, on rank {self.rank}"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"Stage {self.stage} of this module runs on rank {self.rank} under PipelineStrategy: this rank holds "
            "only its own stages. To run the whole model in one process, load a checkpoint of the run into a new "
            "module (tracktrain.checkpoint.state.read_checkpoint(path)['model'])."
        )


class PipelineStrategy(ParallelStrategy):
    """`Trainer(strategy=PipelineStrategy(num_microbatches=4, schedule="1f1b"))` for a `PipelineModule`, under
    torchrun with as many processes as the module has stages (or a divisor of them with "interleaved_1f1b").

    Args:
        num_microbatches: how many micro-batches each batch is split into (its size must be a multiple: use
            `drop_last=True` where the last batch of an epoch is smaller).
        schedule: "gpipe", "1f1b" or "interleaved_1f1b" (several stages per rank, round robin).
        timeout: how long a collective waits for the other ranks before the run fails.
    """

    name = "pipeline"
    steps_in_lockstep = True

    def __init__(self, num_microbatches: int = 4, schedule: str = "1f1b", timeout: timedelta | None = None) -> None:
        super().__init__()
        check_schedule_options("PipelineStrategy", schedule, num_microbatches)
        self.num_microbatches = num_microbatches
        self.schedule = schedule
        self.timeout = timeout
        self._sharded_saving = ShardedSaving(timeout)
        self.pipeline: PipelineSchedule | None = None  # this rank's stages, from the first fit's setup_module
        self._module: PipelineModule | None = None
        self._parameter_names: list[str] = []  # the whole module's, in order: a single-process optimizer's order

    def setup_environment(self, device: torch.device) -> torch.device:
        return join_process_group(device, self.timeout)

    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        if not isinstance(module, PipelineModule):
            raise TypeError(
                f"PipelineStrategy runs a PipelineModule (tracktrain.trainer.PipelineModule), which declares its "
                f"stages and its loss; got {type(module).__name__}."
            )
        if autocast_dtype == torch.float16:
            raise ValueError(
                "PipelineStrategy with precision='16-mixed': the stages' backward runs inside the schedule, where "
                "a GradScaler cannot scale the loss; use precision='bf16-mixed'."
            )
        if self._module is not module:  # a later fit of the same module goes on with the stages it has
            if any(isinstance(child, RemovedStage) for child in module.modules()):
                raise ValueError(
                    f"This {type(module).__name__} was split over the ranks by another PipelineStrategy: fit it "
                    "again with the same strategy, or build a new module."
                )
            stages = list(module.pipeline_stages())
            check_stages(module, stages)
            self._parameter_names = [name for name, _ in module.named_parameters()]
            self.pipeline = PipelineSchedule(
                stages, self.num_microbatches, self.schedule, criterion=module.pipeline_loss
            )
            drop_other_stages(module, stages, self.pipeline)
            self._module = module
        return self._train_step

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        return {"schedule": self._running()}

    def evaluation_forward(self, step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        stage = stage_of_step(step)
        if stage is None:
            return self._predict_step
        return lambda batch, batch_idx: self._evaluation_step(batch, stage)

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        return same_order_on_every_rank(loader, self.name)

    def checkpoint_objects(self, objects: dict[str, Any]) -> dict[str, Any]:
        """The module and its optimizers as this rank's stages' state, under their names in the whole model."""
        if self._module is None:
            return objects
        module: nn.Module = self._module
        converted = dict(objects)
        if converted.get("model") is module:
            converted["model"] = StagesState(module)
        if "optimizers" in converted:
            converted["optimizers"] = [
                StagesOptimizerState(module, optimizer, self._parameter_names) for optimizer in converted["optimizers"]
            ]
        return converted

    def checkpoint_saver(self, url: str, summarize: Callable[[Any], Any], spool: Spool | None) -> FsspecSaver:
        return self._sharded_saving.saver(url, summarize)

    def teardown(self) -> None:
        """Every rank ends the fit together (a sharded save may still be committing)."""
        self.barrier()

    # ------------------------------------------------------------------------------------------- the steps
    def _running(self) -> PipelineSchedule:
        if self.pipeline is None:
            raise RuntimeError("PipelineStrategy: the module's stages are set up by the Trainer's fit first.")
        return self.pipeline

    def _train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = split_pipeline_batch(batch)
        output, loss = self._running().run(inputs, target)
        assert loss is not None
        self._log("train", loss, output, target)
        return loss

    def _evaluation_step(self, batch: Any, stage: str) -> torch.Tensor:
        """The batch forward through the stages (any size: an evaluation keeps every sample), its loss on the last
        stage's whole output, on every rank."""
        module, pipeline = self._module, self._running()
        assert module is not None
        inputs, target = split_pipeline_batch(batch)
        output = pipeline.run(inputs, forward_only=True)[0]
        loss = module.pipeline_loss(output, target) if pipeline.holds_last_stage else None
        loss = pipeline.from_last_stage(loss, inputs.device)
        self._log(stage, loss, output, target)
        return loss

    def _predict_step(self, batch: Any, batch_idx: int) -> Any:
        """The last stage's output on its rank, None on the others."""
        inputs = split_pipeline_batch(batch)[0] if isinstance(batch, (tuple, list)) else batch
        return self._running().run(inputs, forward_only=True)[0]

    def _log(self, stage: str, loss: torch.Tensor, output: Any, target: Any) -> None:
        module, pipeline = self._module, self._running()
        assert module is not None
        metrics: dict[str, Any] = {}
        if type(module).pipeline_metrics is not PipelineModule.pipeline_metrics:  # the same class on every rank
            if pipeline.holds_last_stage:
                with torch.no_grad():
                    metrics = {name: float(value) for name, value in module.pipeline_metrics(output, target).items()}
            shared = [metrics]
            torch.distributed.broadcast_object_list(shared, src=pipeline.last_stage_rank, group=pipeline.group)
            metrics = shared[0]
        module.log_step(stage, loss, metrics)


def check_stages(module: nn.Module, stages: list[nn.Module]) -> None:
    """ValueError unless `stages` are modules whose parameters are, together, every parameter of `module`, each in
    one stage (a parameter outside them would never train; one in two would train twice)."""
    if not stages or not all(isinstance(stage, nn.Module) for stage in stages):
        raise ValueError(
            f"{type(module).__name__}.pipeline_stages() must return the model's stages, a list of nn.Module, in "
            f"order; got {stages!r}."
        )
    owner: dict[int, int] = {}
    for index, stage in enumerate(stages):
        for parameter in stage.parameters():
            if id(parameter) in owner:
                raise ValueError(
                    f"A parameter is in stage {owner[id(parameter)]} and in stage {index} of "
                    f"{type(module).__name__}.pipeline_stages(): each parameter belongs to one stage (tied weights "
                    "are not supported by PipelineStrategy)."
                )
            owner[id(parameter)] = index
    outside = [name for name, parameter in module.named_parameters() if id(parameter) not in owner]
    if outside:
        raise ValueError(
            f"The parameters {outside} of {type(module).__name__} are in none of its pipeline_stages(): they would "
            "never train. Put them in a stage."
        )


def drop_other_stages(module: nn.Module, stages: list[nn.Module], pipeline: PipelineSchedule) -> None:
    """Replace, in `module`, each stage this rank does not run by a `RemovedStage` (the stage itself where it is a
    submodule, else its children: `split_stages`'s stages hold the model's children)."""
    places = {id(child): (parent, name) for parent in module.modules() for name, child in parent.named_children()}
    ranks = {index: index % pipeline.world_size for index in range(pipeline.num_stages)}
    for index, stage in enumerate(stages):
        if index in pipeline.stage_indices:
            continue
        parts = [stage] if id(stage) in places else list(stage.children())
        if not parts or any(id(part) not in places for part in parts):
            raise ValueError(
                f"Stage {index} of {type(module).__name__}.pipeline_stages() is not a part of the module (nor are "
                "its children): return the module's own submodules, e.g. split_stages(self.net, [...])."
            )
        for part in parts:
            parent, name = places[id(part)]
            setattr(parent, name, RemovedStage(index, ranks[index]))


class StagesState:
    """A checkpoint's stand-in for a pipeline rank's module: the state of its stages (plain tensors under their
    names in the whole model; no name is another rank's), loaded from a sharded checkpoint or from a whole one."""

    state_dict_has_side_effects = True
    loads_stored_shards = True

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def state_dict(self) -> dict[str, Any]:
        return RankState(self.module.state_dict())

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> None:
        own = self.module.state_dict()
        if isinstance(state_dict, StoredShards):
            state_dict = state_dict.load_into(own)  # this rank's names only, read in place
        else:  # a whole model's state (a single-process checkpoint): this rank's part of it
            missing = [name for name in own if name not in state_dict]
            if missing and strict:
                raise KeyError(f"The checkpoint has no {missing}, which this rank's stages hold.")
            state_dict = {name: value for name, value in state_dict.items() if name in own}
        self.module.load_state_dict(state_dict, strict=strict)


class StagesOptimizerState:
    """A checkpoint's stand-in for a pipeline rank's optimizer: its state keyed by parameter name, each parameter's
    group options beside it (torch's flattened optimizer state dict), so that no key is two ranks'; loads from a
    sharded checkpoint, or from a single-process one (keyed by index, in the whole module's parameter order)."""

    state_dict_has_side_effects = True
    loads_stored_shards = True

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, parameter_names: list[str]) -> None:
        self.module, self.optimizer, self.parameter_names = module, optimizer, parameter_names

    def state_dict(self) -> dict[str, Any]:
        names = {id(parameter): name for name, parameter in self.module.named_parameters()}
        layout = {
            f"{GROUP_OF_KEY}.{names[id(parameter)]}": index
            for index, group in enumerate(self.optimizer.param_groups)
            for parameter in group["params"]
        }
        flat = get_optimizer_state_dict(self.module, self.optimizer, options=_BY_PARAMETER)
        # with the groups and the whole model's order, one process rebuilds the state keyed by index
        return RankState({**flat, **layout, PARAMETER_ORDER_KEY: self.parameter_names})

    def load_state_dict(self, state_dict: Any) -> None:
        if isinstance(state_dict, StoredShards):
            own = state_dict.load_into(get_optimizer_state_dict(self.module, self.optimizer, options=_BY_PARAMETER))
            set_optimizer_state_dict(self.module, self.optimizer, own, options=_BY_PARAMETER)
            return
        by_name = by_parameter_name(state_dict, self.parameter_names)
        held = {name for name, _ in self.module.named_parameters()}
        groups = [
            {**group, "params": [name for name in group["params"] if name in held]} for group in by_name["param_groups"]
        ]
        state = {name: value for name, value in by_name["state"].items() if name in held}
        set_optimizer_state_dict(
            self.module, self.optimizer, {"state": state, "param_groups": [g for g in groups if g["params"]]}
        )
