"""The Trainer's evaluation stages — validate, test, predict — each one pass of its engine over a loader, with
no gradients and the module in eval mode.

Several loaders of a stage (Lightning's `fit(model, train, [val_a, val_b])`, `validate(model, [a, b])`, a list or
dict of DataLoaders from a `*_dataloader()` method) are read one after the other in that one pass, as Lightning's
sequential mode: the stage's epoch hooks run once, each loader is this process's shard of it (`Session.loader_for`)
under the stage's `limit_*_batches` (and the sanity check's batches) each, and the step gets the loader's index:
`eval_step(batch, batch_idx, dataloader_idx)` (`test_step`, `predict_step` too), `batch_idx` counted within the
loader. What `self.log` records in the steps and batch hooks is named `name/dataloader_idx_N`, as Lightning names it;
`results` splits a pass's values into one dict per loader, and `predict` returns one list per loader.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tracktrain.distributed import ranks
from tracktrain.engine.batches import cast_floating, move_to_device
from tracktrain.engine.engine import Engine
from tracktrain.trainer.batches import SequentialLoaders, epoch_length_of, loader_length, several_loaders
from tracktrain.trainer.hooks import batch_index
from tracktrain.trainer.metric_log import DATALOADER_SUFFIX, to_floats
from tracktrain.trainer.module import LoopModule

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tracktrain.engine.model_engine import ModelEngine
    from tracktrain.trainer.callback import Callback
    from tracktrain.trainer.fit_context import FitContext
    from tracktrain.trainer.metrics_hub import MetricsHub
    from tracktrain.trainer.strategies.base import Strategy

__all__ = ["EvaluationStages", "print_results"]

_LIMIT_NAMES = {"fit": "train", "validate": "val", "test": "test", "predict": "predict"}
_STAGE_LOADERS = {"validate": "validation", "test": "test", "predict": "prediction"}


class EvaluationStages:
    """The evaluation engines (`engines`: validate, test, predict), their process functions, and one pass of a stage
    (`run`)."""

    def __init__(
        self,
        context: FitContext,
        strategy: Strategy,
        metrics: MetricsHub,
        callbacks: list[Callback],
        limits: dict[str, int | float | None],
        param_dtype: torch.dtype | None,
        loader_for: Callable[[Iterable[Any], bool], Iterable[Any]],
    ) -> None:
        """`context`: the entry point's (its module, model engine and device, read at each pass and batch);
        `strategy`: runs each step (`evaluation_forward`); `metrics`: the stages' logs and values; `callbacks`: the
        Trainer's one list (their batch hooks are checked under several loaders); `limits`: the Trainer's
        `limit_*_batches` by stage; `param_dtype`: a "true" precision's weights' dtype (floating inputs are cast to it);
        `loader_for(loader, shuffle_default)`: `loader` as the strategy reads it, made once per entry point."""
        self._context, self._strategy, self._metrics = context, strategy, metrics
        self._callbacks, self._limits, self._param_dtype, self._loader_for = callbacks, limits, param_dtype, loader_for
        self.engines = {
            "validate": Engine(self.evaluate_batch),
            "test": Engine(self.evaluate_batch),
            "predict": Engine(self.predict_batch),
        }
        self.predictions: list[Any] = []
        self.loader_count = 1  # the loaders of the last pass that ran (what `results` splits its values into)
        self._several: SequentialLoaders | None = None  # the loaders of the pass under way, when several
        self._indexed_steps: list[Callable[[Any, int], Any]] = []  # its step, given each loader's index

    def _module(self) -> LoopModule:
        module = self._context.module
        if module is None:
            raise RuntimeError("The Trainer has no module yet: call fit/validate/test/predict first.")
        return module

    def _model_engine(self) -> ModelEngine:
        model_engine = self._context.model_engine
        if model_engine is None:
            raise RuntimeError("The Trainer has no model engine yet: call fit/validate/test/predict first.")
        return model_engine

    def run(self, stage: str, loader: Any, max_batches: int | None = None) -> dict[str, Any]:
        """Run the engine of `stage` once over `loader` (at most `max_batches` of it; of each loader when there
        are several); returns the epoch's values."""
        module, outer_log = self._module(), self._metrics.current
        training = module.training
        limit_name = f"limit_{_LIMIT_NAMES[stage]}_batches"
        given = several_loaders(loader)
        several: SequentialLoaders | None = None
        if given is None:
            loader = self._loader_for(loader, False)
            epoch_length = _at_most(epoch_length_of(limit_name, loader, self._limits[stage]), max_batches)
        else:
            read = [self._loader_for(item, False) for item in given]
            lengths = [_at_most(epoch_length_of(limit_name, item, self._limits[stage]), max_batches) for item in read]
            several = loader = SequentialLoaders(read, lengths)
            epoch_length = 0 if all(length == 0 for length in lengths) else loader_length(several)
        steps = self._steps(stage, module, 1 if given is None else len(given))
        if given is not None:
            _check_batch_hooks(stage, [module, *self._callbacks])
        if epoch_length == 0:
            return {}
        self.loader_count = 1 if given is None else len(given)
        log = self._metrics.logs.get(stage)
        outer_several, outer_steps = self._several, self._indexed_steps
        self._several, self._indexed_steps = several, steps
        if log is not None:
            log.loaders = several
        if stage == "predict" and given is not None:
            self.predictions = [[] for _ in given]
        module.eval()
        try:
            with torch.no_grad():
                self.engines[stage].run(loader, max_epochs=1, epoch_length=epoch_length)
        finally:
            self._several, self._indexed_steps = outer_several, outer_steps
            if log is not None:
                log.loaders = None
            module.train(training)
            self._metrics.leave_stage(outer_log)
        return self._metrics.take_epoch_values(stage)

    def results(self, values: dict[str, Any]) -> list[dict[str, float]]:
        """What `validate()`/`test()` return for a pass's `values`: as Lightning, one dict per loader, each with the
        values logged under that loader's index (`name/dataloader_idx_N`, the name kept) and those logged without
        one (in the epoch hooks: every loader's)."""
        floats = to_floats(values)
        if self.loader_count == 1:
            return [floats]
        per_loader: list[dict[str, float]] = [{} for _ in range(self.loader_count)]
        for name, value in floats.items():
            _, suffix, index = name.rpartition(DATALOADER_SUFFIX)
            for dataloader_idx, result in enumerate(per_loader):
                if not suffix or index == str(dataloader_idx):
                    result[name] = value
        return per_loader

    def evaluate_batch(self, engine: Engine, batch: Any) -> Any:
        batch = self._to_device(batch)
        log = self._metrics.current
        log.batch = batch
        log.count_batch()
        several = self._several
        if several is not None:
            step = self._strategy.evaluation_forward(self._indexed_steps[several.dataloader_idx])
            with self._model_engine().autocast():
                return step(batch, several.batch_idx)
        module = self._module()
        step = self._strategy.evaluation_forward(module.test_step if log.stage == "test" else module.eval_step)
        with self._model_engine().autocast():
            return step(batch, batch_index(engine))

    def predict_batch(self, engine: Engine, batch: Any) -> Any:
        batch = self._to_device(batch)
        several = self._several
        if several is not None:
            step = self._strategy.evaluation_forward(self._indexed_steps[several.dataloader_idx])
            with torch.no_grad(), self._model_engine().autocast():
                return step(batch, several.batch_idx)
        step = self._strategy.evaluation_forward(self._module().predict_step)
        with torch.no_grad(), self._model_engine().autocast():
            return step(batch, batch_index(engine))

    def keep_prediction(self, engine: Engine) -> None:
        several = self._several
        if several is None:
            self.predictions.append(engine.state.output)
        else:
            self.predictions[several.dataloader_idx].append(engine.state.output)

    def _steps(self, stage: str, module: LoopModule, count: int) -> list[Callable[[Any, int], Any]]:
        """The step of `stage` given each of `count` loaders' index (none for one loader), its signature checked
        as Lightning checks it: several loaders need a `dataloader_idx` parameter, one loader a default for it."""
        cls = type(module)
        if stage == "predict":
            name = "predict_step"
        elif stage == "test" and cls.test_step is not LoopModule.test_step:
            name = "test_step"
        else:
            name = "eval_step"  # the default test_step is eval_step: called directly, to pass the index
        method = getattr(module, name)
        if getattr(cls, name) is getattr(LoopModule, name):  # the default predict_step: no index to give
            return [method] * count if count > 1 else []
        parameters = inspect.signature(method).parameters
        index = parameters.get("dataloader_idx")
        takes_index = index is not None or any(p.kind is p.VAR_POSITIONAL for p in parameters.values())
        if count == 1:
            if index is not None and index.default is inspect.Parameter.empty:
                raise TypeError(
                    f"{cls.__name__}.{name}() takes a dataloader_idx without a default, but one {_STAGE_LOADERS[stage]} "
                    "loader is given (the index is passed only when there are several, as in Lightning). Give it a "
                    "default: dataloader_idx=0."
                )
            return []
        if not takes_index:
            raise TypeError(
                f"{count} {_STAGE_LOADERS[stage]} loaders are given, but {cls.__name__}.{name}() takes no "
                "dataloader_idx, which tells it which loader each batch is from: add dataloader_idx=0 to its "
                f"signature ({name}(self, batch, batch_idx, dataloader_idx=0)), or pass one loader."
            )
        return [_with_index(method, dataloader_idx) for dataloader_idx in range(count)]

    def _to_device(self, batch: Any) -> Any:
        device = self._context.device
        if device.type != "cpu":  # CPU: no walk over the batch
            batch = move_to_device(batch, device)
        if self._param_dtype is not None:  # a "true" precision: floating inputs in the weights' dtype
            batch = cast_floating(batch, self._param_dtype)
        return batch


def _check_batch_hooks(stage: str, targets: list[Any]) -> None:
    """Under several loaders the batch hooks get `dataloader_idx` after `batch_idx` (`tracktrain.trainer.hooks`, as
    Lightning passes it): a hook defined without room for it is refused before the pass, naming the fix."""
    from tracktrain.trainer.callback import Callback

    name = {"validate": "validation", "test": "test", "predict": "predict"}[stage]
    for target in targets:
        base = Callback if isinstance(target, Callback) else LoopModule
        for hook in (f"on_{name}_batch_start", f"on_{name}_batch_end"):
            if getattr(type(target), hook, None) is getattr(base, hook):
                continue
            parameters = inspect.signature(getattr(target, hook)).parameters.values()
            if not any(p.name == "dataloader_idx" or p.kind is p.VAR_POSITIONAL for p in parameters):
                raise TypeError(
                    f"Several {_STAGE_LOADERS[stage]} loaders are given, but {type(target).__name__}.{hook}() takes no "
                    "dataloader_idx, which tells it which loader the batch is from (its batch_idx counts within that "
                    "loader): add dataloader_idx=0 to its signature, as Lightning's hook has it."
                )


def _with_index(method: Callable[..., Any], dataloader_idx: int) -> Callable[[Any, int], Any]:
    """`method(batch, batch_idx, dataloader_idx)` as a step of `(batch, batch_idx)`, under the method's name (which
    a strategy may read: a PipelineModule's stage)."""

    @functools.wraps(method)
    def step(batch: Any, batch_idx: int) -> Any:
        return method(batch, batch_idx, dataloader_idx)

    return step


def _at_most(length: int | None, max_batches: int | None) -> int | None:
    if max_batches is None:
        return length
    return max_batches if length is None else min(length, max_batches)


def print_results(stage: str, results: list[dict[str, float]]) -> None:
    """`validate()`/`test()`'s results as Lightning prints them with `verbose=True`: a table of each metric's value
    per loader, on the process of global rank 0 only."""
    if ranks.global_rank() != 0 or not any(results):
        return
    names = sorted({name for result in results for name in result})
    heading = [
        f"{'Validate' if stage == 'validate' else 'Test'} metric",
        *(f"DataLoader {i}" for i in range(len(results))),
    ]
    rows = [[name, *(f"{result[name]:.6g}" if name in result else "" for result in results)] for name in names]
    widths = [max(len(row[column]) for row in [heading, *rows]) + 4 for column in range(len(heading))]
    rule = "─" * sum(widths)
    lines = [rule, "".join(text.center(width) for text, width in zip(heading, widths)), rule]
    lines += ["".join(text.center(width) for text, width in zip(row, widths)) for row in rows]
    print("\n".join([*lines, rule]))
