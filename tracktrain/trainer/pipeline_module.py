"""`PipelineModule`: a `LoopModule` whose model is a sequence of stages, written once for one process and for a
pipeline over several (`Trainer(strategy=PipelineStrategy(...))`).

    class Digits(PipelineModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(OrderedDict(embed=..., hidden=..., head=...))

        def pipeline_stages(self):
            return split_stages(self.net, ["hidden"])        # two stages: embed | hidden, head

        def pipeline_loss(self, output, target):
            return F.cross_entropy(output, target)

        def pipeline_metrics(self, output, target):
            return {"accuracy": (output.argmax(1) == target).float().mean()}

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

Its steps take `(inputs, target)` batches and log `<stage>_loss` and `<stage>_<metric>` (train, val, test): in one
process the inputs go through the stages in order (`forward`); under `PipelineStrategy` the strategy runs the batch as
micro-batches through the stages on their ranks, the loss and metrics computed on the last stage and logged on every
rank with the same names (`log_step`). A checkpoint of either loads into the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tracktrain.engine.batches import split_batch
from tracktrain.trainer.module import LoopModule

__all__ = ["PipelineModule"]

#: the stage each step logs under
_PREFIXES = {"train_step": "train", "eval_step": "val", "test_step": "test"}


class PipelineModule(LoopModule):
    """Define `pipeline_stages`, `pipeline_loss`, `configure_optimizers` (and `pipeline_metrics` to log more than the
    loss); the steps are written here once, for one process and for the pipeline alike."""

    def pipeline_stages(self) -> Sequence[nn.Module]:
        """The model's stages in order, every parameter of the module in one of them: `split_stages(self.net,
        ["block3"])`, or modules of your own. Under `PipelineStrategy` each rank keeps its stages and drops the
        others from the module (their memory freed)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define pipeline_stages(self): the model's stages in order, e.g. "
            "tracktrain.engine.pipeline.split_stages(self.net, ['block3'])."
        )

    def pipeline_loss(self, output: Any, target: Any) -> torch.Tensor:
        """The loss of a (micro-)batch: the last stage's `output` against `target`."""
        raise NotImplementedError(f"{type(self).__name__} must define pipeline_loss(self, output, target).")

    def pipeline_metrics(self, output: Any, target: Any) -> Mapping[str, torch.Tensor | float]:
        """Values to log beside the loss, from the last stage's output of a whole batch (none by default)."""
        return {}

    def forward(self, inputs: Any) -> Any:
        for stage in self.pipeline_stages():
            inputs = stage(inputs)
        return inputs

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def eval_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return self(split_pipeline_batch(batch)[0] if isinstance(batch, (tuple, list)) else batch)

    def log_step(self, stage: str, loss: torch.Tensor, metrics: Mapping[str, torch.Tensor | float]) -> None:
        """Log a step's loss and metrics under `stage` ("train", "val", "test"): the same names in one process and
        in a pipeline."""
        self.log(f"{stage}_loss", loss, prog_bar=True)
        for name, value in metrics.items():
            self.log(f"{stage}_{name}", value, prog_bar=stage != "train")

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        inputs, target = split_pipeline_batch(batch)
        output = self(inputs)
        loss = self.pipeline_loss(output, target)
        self.log_step(stage, loss, self.pipeline_metrics(output, target))
        return loss


def split_pipeline_batch(batch: Any) -> tuple[Any, Any]:
    return split_batch(
        batch, "A PipelineModule", "The first stage takes the inputs, the last stage's loss the targets."
    )


def stage_of_step(step: Any) -> str | None:
    """ "train", "val" or "test" for a `PipelineModule`'s step method (None for `predict_step`)."""
    return _PREFIXES.get(getattr(step, "__name__", ""))
