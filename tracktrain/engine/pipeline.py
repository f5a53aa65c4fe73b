"""Pipeline schedules: each batch split into micro-batches that flow through a model's stages, one or more stages
per rank (Colossal-AI's pipeline schedules, on `torch.distributed.pipelining`).

    stages = split_stages(model, ["block2"])              # nn.Sequential children, cut before "block2": 2 stages
    schedule = PipelineSchedule(stages, num_microbatches=4, schedule="1f1b")
    engine = ModelEngine(schedule.local_model, optimizer_over(schedule.local_model), criterion, schedule=schedule)
    output, label, loss = engine.execute_schedule(iter(loader))   # every rank; loss on every rank
    engine.step()

Every rank reads the same batches (the pipeline is not data parallel): the first stage takes the inputs, the last one
the labels, and the loss of the last stage is sent to every rank, so that each can log it and decide alike. The
gradients are those of the mean loss over the whole batch (each micro-batch's loss is scaled by their number), as
one process computes them on the whole batch: the batch size must be a multiple of `num_microbatches`.

Schedules: "gpipe" (all forwards, then all backwards), "1f1b" (one forward, one backward: fewer activations held),
"interleaved_1f1b" (several stages per rank, round robin: a smaller bubble).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tracktrain.engine.batches import split_batch
from tracktrain.engine.schedule import ScheduledEngine

__all__ = ["SCHEDULES", "PipelineSchedule", "check_schedule_options", "split_stages"]

#: the schedule names `PipelineSchedule` takes, and whether each runs several stages per rank
SCHEDULES = {"gpipe": False, "1f1b": False, "interleaved_1f1b": True}


def split_stages(model: nn.Module, split_points: Sequence[str]) -> list[nn.Module]:
    """`model`'s children in order, cut before each child named in `split_points`: one `nn.Sequential` per stage,
    whose children keep their names (a stage's state dict has the whole model's keys for its part). For models whose
    forward calls their children one after the other (an `nn.Sequential`, a stack of blocks)."""
    names = [name for name, _ in model.named_children()]
    unknown = [point for point in split_points if point not in names]
    if unknown or not split_points:
        raise ValueError(
            f"split_stages: {unknown or 'no split points'} — split points are names of the model's children, "
            f"before which a new stage starts: one of {names[1:]}."
        )
    positions = [names.index(point) for point in split_points]
    if positions != sorted(set(positions)) or positions[0] == 0:
        raise ValueError(
            f"split_stages: split points {list(split_points)} must be distinct children in the model's order, not "
            f"its first child: the children are {names}."
        )
    bounds = [0, *positions, len(names)]
    children = list(model.named_children())
    return [nn.Sequential(OrderedDict(children[start:end])) for start, end in zip(bounds, bounds[1:])]


def check_schedule_options(owner: str, schedule: str, num_microbatches: int) -> None:
    """ValueError naming `owner` for a schedule name or micro-batch count a pipeline does not take."""
    if schedule not in SCHEDULES:
        raise ValueError(f"{owner}(schedule={schedule!r}) takes one of {sorted(SCHEDULES)}.")
    if not isinstance(num_microbatches, int) or isinstance(num_microbatches, bool) or num_microbatches < 1:
        raise ValueError(f"{owner}(num_microbatches={num_microbatches!r}) must be a positive integer.")


class PipelineSchedule:
    """Runs each batch through `stages` (every stage of the model, in order), this rank's stages being those
    `stage_indices` names: stage `r` on rank `r`, or with "interleaved_1f1b" stages `r, r + W, r + 2W, ...` of `W`
    ranks.

    Args:
        stages: the model's stages, in order (`split_stages`), the same on every rank.
        num_microbatches: how many micro-batches each batch is split into (along its first dimension).
        schedule: "gpipe", "1f1b" or "interleaved_1f1b".
        group: the ranks of the pipeline (default: all of them).
        criterion: the loss of one micro-batch, on the last stage (default: the ModelEngine's criterion).
    """

    uses_pipeline = True

    def __init__(
        self,
        stages: Sequence[nn.Module],
        num_microbatches: int,
        schedule: str = "1f1b",
        group: dist.ProcessGroup | None = None,
        criterion: Callable[[Any, Any], torch.Tensor] | None = None,
    ) -> None:
        check_schedule_options("PipelineSchedule", schedule, num_microbatches)
        if not dist.is_initialized():
            raise RuntimeError(
                "PipelineSchedule runs stages on several ranks: start the processes with torchrun (or "
                "tracktrain.distributed.spawn) and join the process group first."
            )
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        interleaved = SCHEDULES[schedule]
        count = len(stages)
        if interleaved and (count % self.world_size or count < 2 * self.world_size):
            raise ValueError(
                f"PipelineSchedule(schedule={schedule!r}) runs several stages per rank: give a multiple of the "
                f"{self.world_size} ranks, at least {2 * self.world_size} stages (got {count})."
            )
        if not interleaved and count != self.world_size:
            raise ValueError(
                f"PipelineSchedule(schedule={schedule!r}) runs one stage per rank: give {self.world_size} stages, one "
                f"for each rank (got {count}), or use schedule='interleaved_1f1b' for several per rank."
            )
        self.schedule_name = schedule
        self.num_microbatches = num_microbatches
        self.num_stages = count
        self.stage_indices = list(range(self.rank, count, self.world_size))
        self.local_model = nn.ModuleList([stages[index] for index in self.stage_indices])
        #: the loss of one micro-batch, `criterion(output, target)`, on the last stage (ModelEngine's criterion)
        self.criterion = criterion
        #: an accumulation window's batches: each micro-batch's loss divided by it (set for one step)
        self.loss_divisor = 1
        # one per batch shape, with or without the loss (the stages exchange buffers of the shapes they saw first)
        self._schedules: dict[tuple[Any, ...], Any] = {}

    @property
    def holds_first_stage(self) -> bool:
        return 0 in self.stage_indices

    @property
    def holds_last_stage(self) -> bool:
        return self.num_stages - 1 in self.stage_indices

    @property
    def last_stage_rank(self) -> int:
        """The global rank of the process holding the last stage (where the loss and the outputs are)."""
        return (
            dist.get_global_rank(self.group, (self.num_stages - 1) % self.world_size)
            if self.group
            else ((self.num_stages - 1) % self.world_size)
        )

    def forward_backward_step(
        self,
        model_engine: ScheduledEngine,
        data_iter: Iterator[Any],
        forward_only: bool = False,
        return_loss: bool = True,
        return_output_label: bool = True,
    ) -> tuple[Any, Any, torch.Tensor | None]:
        """Colossal-AI's `execute_schedule` over the stages: the next `(inputs, label)` batch of `data_iter`, split in
        micro-batches, forward (and backward unless `forward_only`) through every stage, the loss by the engine's
        criterion. Returns `(output, label, loss)`: the loss (the mean over the micro-batches) on every rank when
        `return_loss`, the output (the last stage's, whole batch) on the rank holding the last stage, None
        elsewhere."""
        inputs, label = split_batch(
            next(data_iter), "execute_schedule", "A pipeline's first stage takes the inputs, its last the labels."
        )
        if model_engine.criterion is not None:
            self.criterion = model_engine.criterion
        if self.criterion is None:
            raise ValueError("A pipeline computes the loss on its last stage: pass criterion= to ModelEngine.")
        output, loss = self.run(inputs, label, forward_only=forward_only)
        if not (return_loss or not forward_only):
            loss = None
        if not return_output_label:
            return None, None, loss
        return output, label, loss

    def forward_backward(
        self,
        model_engine: ScheduledEngine,
        forward: Callable[[], Any],
        loss_of: Callable[[Any], torch.Tensor],
        loss_divisor: int = 1,
        accept_loss: Callable[[torch.Tensor], bool] | None = None,
    ) -> tuple[Any, bool]:
        """The Trainer's step (`TrainingStep`): `forward()` runs the batch through the stages with `run` (forward and
        backward: `PipelineStrategy`'s training step) and returns its loss, each micro-batch's loss divided by
        `loss_divisor` (an accumulation window's batches add up to one step). `accept_loss` can only refuse the
        window's optimizer step: the schedule has run the backward already. Returns `(output, backpropagated)`."""
        self.loss_divisor = loss_divisor
        try:
            if model_engine.autocast_dtype is None and model_engine.param_dtype is None:
                output = forward()
            else:
                with model_engine.autocast():
                    output = forward()
        finally:
            self.loss_divisor = 1
        # the batch's loss, detached: the schedule has run the backward, `loss_of`'s check of a graph does not apply
        return output, accept_loss is None or accept_loss(output)

    def run(
        self, inputs: torch.Tensor, target: Any = None, forward_only: bool = False
    ) -> tuple[Any, torch.Tensor | None]:
        """One batch through every stage: `inputs` into the first, `target` and `criterion` on the last (no loss
        without a target: prediction). Backward too unless `forward_only`. Returns `(output, loss)`: the last
        stage's output on its rank (None elsewhere), the mean micro-batch loss on every rank.

        A prediction (forward only, no target) takes a batch of any size: it is padded to a multiple of
        `num_microbatches` with copies of its last row, whose outputs are dropped."""
        size = len(inputs)
        with_loss = target is not None
        if size % self.num_microbatches:
            if with_loss or not forward_only:
                raise ValueError(
                    f"A batch of {size} does not split into {self.num_microbatches} equal micro-batches: use a batch "
                    "size that is a multiple of num_microbatches (drop_last=True for the last one of an epoch)."
                )
            padding = self.num_microbatches - size % self.num_microbatches
            padded = torch.cat([inputs, inputs[-1:].expand(padding, *inputs.shape[1:])])
            output, _ = self.run(padded, forward_only=True)
            return (output[:size] if output is not None else None), None
        schedule = self._schedule_for(inputs, with_loss)
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.holds_first_stage else ()
        kwargs = {"target": target, "losses": losses} if self.holds_last_stage and with_loss else {}
        output = schedule.eval(*args, **kwargs) if forward_only else schedule.step(*args, **kwargs)
        scale = self.num_microbatches * self.loss_divisor
        loss = self._loss_on_every_rank(losses, inputs.device) * scale if with_loss else None
        return (output if self.holds_last_stage else None), loss

    def gradient_norm(self, gradients: list[torch.Tensor]) -> torch.Tensor:
        """The norm of every stage's gradients, `gradients` being this rank's: the squares summed over the ranks,
        so that clipping scales every stage alike, as one process clips the whole model."""
        local = torch.nn.utils.get_total_norm(gradients) if gradients else torch.zeros(())
        squared = local.float() ** 2
        dist.all_reduce(squared, group=self.group)
        return squared.sqrt()

    def _micro_batch_loss(self, output: Any, target: Any) -> torch.Tensor:
        if self.criterion is None:
            raise ValueError("A pipeline computes the loss on its last stage: give it a criterion.")
        # each micro-batch's share of the batch's mean (and of an accumulation window's): the schedules are built
        # not to scale the gradients themselves, which would divide a window's earlier batches' gradients again
        return self.criterion(output, target) / (self.num_microbatches * self.loss_divisor)

    def _schedule_for(self, inputs: torch.Tensor, with_loss: bool) -> Any:
        key = (*inputs.shape, with_loss)
        if key not in self._schedules:
            from torch.distributed.pipelining import (
                PipelineStage,
                Schedule1F1B,
                ScheduleGPipe,
                ScheduleInterleaved1F1B,
            )

            device = inputs.device
            stages: list[Any] = [
                PipelineStage(module, index, self.num_stages, device, group=self.group)
                for module, index in zip(self.local_model, self.stage_indices)
            ]
            loss_fn = self._micro_batch_loss if with_loss else None
            schedule: Any
            if self.schedule_name == "interleaved_1f1b":
                schedule = ScheduleInterleaved1F1B(stages, self.num_microbatches, loss_fn=loss_fn, scale_grads=False)
            else:
                single = ScheduleGPipe if self.schedule_name == "gpipe" else Schedule1F1B
                schedule = single(stages[0], self.num_microbatches, loss_fn=loss_fn, scale_grads=False)
            self._schedules[key] = schedule
        return self._schedules[key]

    def _loss_on_every_rank(self, losses: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        """The mean micro-batch loss, computed on the last stage, on every rank."""
        mean = torch.stack([value.detach().float() for value in losses]).mean() if losses else None
        return self.from_last_stage(mean, device)

    def from_last_stage(self, value: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """The scalar `value` the last stage's rank has (the others give None), on every rank: every rank logs and
        decides alike (on the batch's `device`: an nccl group has no CPU tensors)."""
        shared = value.detach().float().reshape(()) if value is not None else torch.zeros((), device=device)
        dist.broadcast(shared, src=self.last_stage_rank, group=self.group)
        return shared
