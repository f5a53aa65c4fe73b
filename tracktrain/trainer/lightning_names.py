"""Lightning 2.6's public names that are not ours under that name: renamed, or not offered, each with what to use.

A Lightning name that tracktrain would silently ignore is refused where it is written: a module or callback
defining a Lightning hook the Trainer never calls (`training_step` on a LoopModule, `on_before_zero_grad`,
`setup` on a callback, ...) or setting an attribute Lightning reads (`example_input_array`) fails as its entry point
starts, naming ours. Names a user only calls (`self.freeze()`, `trainer.global_rank`) fail as Python does, with an
AttributeError, and are listed here with what to use, for the migration page and the test that walks Lightning's
names (`tests/trainer/test_lightning_names.py`: every public name of Lightning's LightningModule, Trainer and
Callback is ours with the same meaning, renamed, or listed here; a name Lightning adds fails it until classified).
Lightning's built-in callbacks are walked too: each is ours under its name (`CALLBACKS_SAME`), or importing it from
`tracktrain.callbacks` fails with what to use (`CALLBACKS_INSTEAD`, read by that package's `__getattr__`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CALLBACKS_INSTEAD",
    "CALLBACKS_SAME",
    "CALLBACK_HOOKS_NOT_CALLED",
    "LOG_ARGUMENTS_NOT_TAKEN",
    "MODULE_ATTRIBUTES_NOT_READ",
    "MODULE_HOOKS_NOT_CALLED",
    "MODULE_NOT_OFFERED",
    "MODULE_RENAMED",
    "TRAINER_ARGUMENTS_NOT_OFFERED",
    "TRAINER_NOT_OFFERED",
    "check_lightning_callback",
    "check_lightning_methods",
    "reduction_of",
    "refuse_log_arguments",
]

# LightningModule: Lightning's name -> ours (the design's renames)
MODULE_RENAMED = {
    "training_step": "train_step",
    "validation_step": "eval_step",
}
_RENAMED = MODULE_RENAMED  # the name this module's check used first

_EVAL_MODE = (
    "the Trainer puts the module in eval mode (no gradients) for each evaluation pass and back after it; change "
    "modes beyond that in on_{stage}_start / on_{stage}_end"
)
_BATCH_MOVE = (
    "the Trainer moves each batch to the device itself (tensors in tuples, lists and dicts); transform batches in the "
    "loader (its collate_fn) or at the start of the step"
)

# LightningModule hooks the Trainer does not call: a module defining one is refused (it would never run)
MODULE_HOOKS_NOT_CALLED = {
    "configure_gradient_clipping": "Trainer(gradient_clip_val=..., gradient_clip_algorithm=...), or "
    "self.clip_gradients(optimizer, ...) in train_step under manual optimization",
    "configure_model": "build the layers in __init__: the strategy shards the built module "
    '(FSDPStrategy(auto_wrap=[Block]), strategy="fsdp")',
    "configure_sharded_model": "build the layers in __init__: the strategy shards the built module "
    '(FSDPStrategy(auto_wrap=[Block]), strategy="fsdp")',
    "lr_scheduler_step": "the LR schedulers step as configure_optimizers says (interval, frequency); under manual "
    "optimization step them yourself (self.lr_schedulers())",
    "on_before_batch_transfer": _BATCH_MOVE,
    "on_after_batch_transfer": _BATCH_MOVE,
    "transfer_batch_to_device": _BATCH_MOVE,
    "on_before_zero_grad": "on_before_optimizer_step(optimizer) (the gradients are zeroed right after the step)",
    "on_validation_model_eval": _EVAL_MODE.format(stage="validation"),
    "on_validation_model_train": _EVAL_MODE.format(stage="validation"),
    "on_validation_model_zero_grad": "nothing: no gradients are kept from an evaluation pass (it runs under "
    "torch.no_grad())",
    "on_test_model_eval": _EVAL_MODE.format(stage="test"),
    "on_test_model_train": _EVAL_MODE.format(stage="test"),
    "on_predict_model_eval": _EVAL_MODE.format(stage="predict"),
}

# LightningModule attributes Lightning reads when a module sets them; nothing reads them here, so setting one is refused
MODULE_ATTRIBUTES_NOT_READ = {
    "strict_loading": "Module.load_from_checkpoint(path, strict=...) and Trainer(resume_with_changes=...)",
}

# LightningModule names a user calls or reads that tracktrain does not offer (an AttributeError), with what to use
MODULE_NOT_OFFERED = {
    "CHECKPOINT_HYPER_PARAMS_KEY": "Lightning's checkpoint layout; ours keeps hparams with the run's settings "
    "(tracktrain.checkpoint.run_settings), read by load_from_checkpoint",
    "CHECKPOINT_HYPER_PARAMS_NAME": "Lightning's checkpoint layout (see CHECKPOINT_HYPER_PARAMS_KEY)",
    "CHECKPOINT_HYPER_PARAMS_TYPE": "Lightning's checkpoint layout (see CHECKPOINT_HYPER_PARAMS_KEY)",
    "all_gather": "self.trainer.strategy.gather(value) (each rank's object) or torch.distributed.all_gather",
    "device_mesh": "the strategy's mesh (trainer.strategy); modules are sharded by the strategy, not by themselves",
    "dtype": "next(self.parameters()).dtype",
    "fabric": "nothing: tracktrain has no Fabric; the Trainer runs every module",
    "freeze": "self.requires_grad_(False); self.eval()",
    "unfreeze": "self.requires_grad_(True); self.train()",
    "hparams_initial": "copy.deepcopy(self.hparams) right after save_hyperparameters()",
    "on_gpu": 'self.device.type == "cuda"',
    "remove_ignored_hparams": "save_hyperparameters(ignore=[...])",
    "to_onnx": "tracktrain.export.onnx.export_onnx(module, example_input, path)",
    "to_torchscript": "tracktrain.export.export_module (torch.export; TorchScript is deprecated in PyTorch)",
    "to_tensorrt": "tracktrain.export.export_module, then torch_tensorrt on the exported program",
}

# Callback hooks the Trainer does not call: a callback defining one is refused
CALLBACK_HOOKS_NOT_CALLED = {
    "setup": "on_fit_start / on_validation_start / on_test_start / on_predict_start (each entry point's start)",
    "teardown": "on_fit_end / on_validation_end / on_test_end / on_predict_end, and on_exception for a failure",
    "on_before_zero_grad": "on_before_optimizer_step(trainer, module, optimizer) (the gradients are zeroed right "
    "after the step)",
}

# Lightning's built-in callbacks (lightning.pytorch.callbacks) that are ours under the same name, with its meaning
# (importable from tracktrain.callbacks)
CALLBACKS_SAME = frozenset(
    {
        "Callback",
        "EarlyStopping",
        "LearningRateMonitor",
        "ModelCheckpoint",
        "ModelSummary",
        "TQDMProgressBar",
        "WeightAveraging",  # its average stays on the module's device: no device= argument
        "GradientAccumulationScheduler",
        "RichModelSummary",
        "RichProgressBar",
        "StochasticWeightAveraging",
        "EMAWeightAveraging",
        "LambdaCallback",
        "BasePredictionWriter",
    }
)

# ... and the others, renamed or not offered: what to use (the message of `from tracktrain.callbacks import <name>`)
CALLBACKS_INSTEAD = {
    # renamed
    "ProgressBar": "ours is tracktrain.callbacks.TrainerProgressBar (subclass it for another bar; "
    "Trainer(enable_progress_bar=False) turns the default one off)",
    "Checkpoint": "subclass tracktrain.callbacks.ModelCheckpoint, or give a Callback the members of "
    "tracktrain.trainer.surface.Checkpointer (dirpath, last_model_path, save_now, wait), which the Trainer "
    "discovers and resumes from",
    "BatchSizeFinder": "ours is tracktrain.tuning.scale_batch_size(trainer, module, ...), called before fit",
    "LearningRateFinder": "ours is tracktrain.tuning.lr_find(trainer, module, ...), called before fit",
    "Timer": "Trainer(max_time=...) stops the fit after that long (kept over resumes); tracktrain.callbacks.Timing "
    "reports the seconds per epoch, step and validation",
    "ThroughputMonitor": "tracktrain.callbacks.Timing reports samples per second and the seconds per step and epoch",
    "DeviceStatsMonitor": "tracktrain.callbacks.MemoryMonitor reports host and CUDA memory; "
    "tracktrain.callbacks.Profiler records the rest",
    "OnExceptionCheckpoint": "a ModelCheckpoint already saves a full checkpoint when the fit is stopped by a signal "
    "(SIGTERM, SIGUSR1, Ctrl-C: tracktrain.distributed.preemption), and the same command resumes it; after an error, the last "
    "committed checkpoint is the one to resume",
    # not offered
    "BaseFinetuning": "freeze and unfreeze in a Callback's on_train_epoch_start (requires_grad_), adding the "
    "unfrozen parameters with optimizer.add_param_group",
    "BackboneFinetuning": "freeze and unfreeze in a Callback's on_train_epoch_start (requires_grad_), adding the "
    "unfrozen parameters with optimizer.add_param_group",
    "ModelPruning": "torch.nn.utils.prune in a Callback's on_train_epoch_end (prune.remove before saving or exporting)",
    "SpikeDetection": "Trainer(nonfinite=...) acts on non-finite losses; a rise of a finite loss is for a Callback "
    "that watches trainer.callback_metrics",
}

# Trainer properties and methods of Lightning's that tracktrain does not offer, with what to use
TRAINER_NOT_OFFERED = {
    "accelerator": "trainer.device (the torch.device this process trains on)",
    "device_ids": "trainer.device: one device per process, the launcher starts the processes",
    "distributed_sampler_kwargs": "the strategy shards each DataLoader itself (trainer.loader_for(loader, ...))",
    "early_stopping_callback": "the EarlyStopping instance you passed in Trainer(callbacks=[...])",
    "early_stopping_callbacks": "the EarlyStopping instances you passed in Trainer(callbacks=[...])",
    "progress_bar_callback": "the TrainerProgressBar among trainer.callbacks",
    "enable_validation": "trainer.val_dataloaders is not None (during a fit)",
    "evaluating": "trainer.metric_log.stage (the stage whose values self.log records)",
    "validating": 'trainer.metric_log.stage == "validate"',
    "testing": 'trainer.metric_log.stage == "test"',
    "predicting": "the predict hooks (on_predict_start / on_predict_end) mark it",
    "training": "trainer.fitting (True while fit() trains)",
    "init_module": "build the module before Trainer.fit: strategies wrap or shard it there",
    "interrupted": "tracktrain.distributed.preemption.Terminated, raised by the fit when a signal stopped it",
    "received_sigterm": "tracktrain.distributed.preemption.Terminated, raised by the fit when a signal stopped it",
    "is_last_batch": "batch_idx + 1 == trainer.train_engine.state.epoch_length",
    "num_training_batches": "trainer.train_engine.state.epoch_length (during a fit)",
    "num_val_batches": "len(loader) under Trainer(limit_val_batches=...)",
    "num_test_batches": "len(loader) under Trainer(limit_test_batches=...)",
    "num_predict_batches": "len(loader) under Trainer(limit_predict_batches=...)",
    "num_sanity_val_batches": "trainer.num_sanity_val_steps (per validation loader)",
    "precision_plugin": "Trainer(precision=...): autocast and a GradScaler, no plugin objects",
    "scaler": "trainer.model_engine.scaler (the GradScaler under precision='16-mixed')",
    "predict_dataloaders": "the loaders you pass to predict (trainer.loader_for gives this process's shard)",
    "test_dataloaders": "the loaders you pass to test (trainer.loader_for gives this process's shard)",
    "train_dataloader": "the loader you pass to fit (trainer.loader_for gives this process's shard)",
    "print": "module.print(...) (rank 0 only) or tracktrain.distributed.logger.get_dist_logger()",
}

# Trainer(...) arguments of Lightning's that tracktrain does not take (a TypeError), with why and what to use
TRAINER_ARGUMENTS_NOT_OFFERED = {
    "num_nodes": "torchrun --nnodes: processes come from the launcher",
    "inference_mode": "evaluation runs under torch.no_grad() (tensors usable in autograd later)",
    "use_distributed_sampler": "the strategy replaces a DataLoader's sampler only when it is a plain Random/"
    "SequentialSampler; give a DistributedSampler yourself to keep your own",
    "profiler": "tracktrain.callbacks.Profiler (a callback)",
    "barebones": "Trainer(enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False, "
    "loggers=False)",
    "plugins": "nothing: precision and environments are Trainer(precision=...) and the launcher's",
    "sync_batchnorm": "torch.nn.SyncBatchNorm.convert_sync_batchnorm(module) before the fit",
    "enable_autolog_hparams": "nothing to turn off: the module's hparams and the Trainer's settings are always logged",
    "model_registry": "nothing: tracktrain_integrations.mlflow_model registers models with MLflow",
}


# LightningModule.log(...) arguments that LoopModule.log does not take (a TypeError), with what to use
LOG_ARGUMENTS_NOT_TAKEN = {
    "enable_graph": "nothing: logged values are detached (keep a tensor yourself for a graph)",
    "sync_dist_group": "sync_dist=True reduces over the strategy's ranks (the whole group)",
    "metric_attribute": "nothing: a TorchMetrics metric is found by its object (log the metric attribute itself)",
    "rank_zero_only": "nothing: epoch values are reduced with sync_dist, and only rank 0 talks to the loggers",
}


# torch's reductions Lightning's reduce_fx takes -> ours
_REDUCTIONS = {"mean": "mean", "sum": "sum", "max": "max", "min": "min"}


def reduction_of(reduce_fx: Any, reduce: str) -> str:
    """`self.log(reduce_fx=...)` (Lightning's: "mean", "sum", "max", "min" or torch's function of that name) as our
    `reduce`; giving both, different, is an error."""
    name = reduce_fx if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", None)
    if name not in _REDUCTIONS:
        raise ValueError(
            f"self.log(reduce_fx={reduce_fx!r}): the epoch's values reduce with 'mean', 'sum', 'max' or 'min' (or "
            "torch.mean, torch.sum, torch.max, torch.min)."
        )
    if reduce != "mean" and reduce != _REDUCTIONS[name]:
        raise ValueError(f"self.log got reduce={reduce!r} and reduce_fx={reduce_fx!r}; give one of them.")
    return _REDUCTIONS[name]


def refuse_log_arguments(given: dict[str, Any]) -> None:
    """A TypeError for `self.log`'s arguments we do not take: Lightning's with what to use, others with the close
    names."""
    import difflib

    for name in given:
        if name in LOG_ARGUMENTS_NOT_TAKEN:
            raise TypeError(
                f"self.log() got {name}=..., Lightning's, which tracktrain does not take. Use {LOG_ARGUMENTS_NOT_TAKEN[name]}."
            )
        taken = [
            "prog_bar",
            "on_step",
            "on_epoch",
            "reduce",
            "sync_dist",
            "batch_size",
            "add_dataloader_idx",
            "reduce_fx",
        ]
        close = difflib.get_close_matches(name, taken, n=3)
        hint = f" Did you mean {' or '.join(close)}?" if close else f" It takes: {', '.join(taken)}."
        raise TypeError(f"self.log() got an unexpected keyword argument {name!r}.{hint}")


def check_lightning_methods(module: object, base: type) -> None:
    """Raise a TypeError naming ours when `module`'s class defines a Lightning method name of `MODULE_RENAMED`
    without overriding ours (from `base`, the LoopModule), a Lightning hook the Trainer does not call, or when the
    module sets an attribute Lightning reads and nothing here does."""
    cls = type(module)
    for lightning, ours in MODULE_RENAMED.items():
        if hasattr(cls, lightning) and getattr(cls, ours) is getattr(base, ours):
            raise TypeError(
                f"{cls.__name__} defines {lightning}(), Lightning's name; tracktrain calls it {ours}(self, batch, "
                f"batch_idx), so {lightning} would never run. Rename it to {ours}."
            )
        if hasattr(cls, lightning) and _needs_more_than_a_batch(getattr(cls, ours)):
            # Lightning's imagenet example: a helper eval_step(batch, batch_idx, prefix) beside validation_step
            raise TypeError(
                f"{cls.__name__} defines {lightning}() and its own {ours}{inspect.signature(getattr(cls, ours))}; "
                f"tracktrain calls {ours}(self, batch, batch_idx) as Lightning calls {lightning}, so the helper "
                f"would be called in its place. Rename the helper (e.g. shared_{ours}), then {lightning} to {ours}."
            )
    _check_hooks(cls, MODULE_HOOKS_NOT_CALLED, base)
    instance = vars(module) if hasattr(module, "__dict__") else {}
    for name, instead in MODULE_ATTRIBUTES_NOT_READ.items():
        if name in instance or hasattr(cls, name):
            raise TypeError(
                f"{cls.__name__} sets {name}, which Lightning reads; nothing in tracktrain does, so it would be "
                f"silently ignored. Use {instead} (or rename the attribute)."
            )


def _needs_more_than_a_batch(method: Any) -> bool:
    """Whether `method(self, batch, batch_idx)` would miss a required argument."""
    try:
        parameters = list(inspect.signature(method).parameters.values())[1:]  # after self
    except (TypeError, ValueError):
        return False
    required = [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return len(required) > 2


def check_lightning_callback(callback: object, base: type) -> None:
    """Raise a TypeError naming ours when `callback`'s class defines a Lightning callback hook the Trainer does not
    call (`setup`, `teardown`, `on_before_zero_grad`), unless `base` (our Callback) defines it."""
    _check_hooks(type(callback), CALLBACK_HOOKS_NOT_CALLED, base)


def _check_hooks(cls: type, hooks: Mapping[str, str], base: type) -> None:
    for name, instead in hooks.items():
        if hasattr(cls, name) and getattr(cls, name) is not getattr(base, name, None):
            raise TypeError(
                f"{cls.__name__} defines {name}(), a Lightning hook that tracktrain's Trainer does not call, so it "
                f"would never run. Use {instead}."
            )
