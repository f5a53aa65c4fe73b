"""A walk over Lightning's public names (the installed Lightning, 2.6): every public name of `LightningModule`,
`Trainer` (its properties, methods and `__init__` arguments) and `Callback` is ours with the same meaning, renamed
(a module defining Lightning's name is refused, naming ours), or not offered (listed in
`tracktrain.trainer.lightning_names` with what to use; a hook we would never call is refused where it is defined).
A name Lightning adds fails here until someone classifies it; a name we say we have fails here if it is gone.

And where the same code runs on both, the names its values get are Lightning's (several loaders, `_step`/`_epoch`)."""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracktrain import Callback, DataModule, LoopModule, Trainer
from tracktrain.trainer.attributes import TRAINER_ATTRIBUTES
from tracktrain.trainer.datamodule import LOADER_METHODS
from tracktrain.trainer.hooks import HOOK_EVENTS
from tracktrain.trainer.lightning_names import (
    CALLBACK_HOOKS_NOT_CALLED,
    CALLBACKS_INSTEAD,
    CALLBACKS_SAME,
    LOG_ARGUMENTS_NOT_TAKEN,
    MODULE_ATTRIBUTES_NOT_READ,
    MODULE_HOOKS_NOT_CALLED,
    MODULE_NOT_OFFERED,
    MODULE_RENAMED,
    TRAINER_ARGUMENTS_NOT_OFFERED,
    TRAINER_NOT_OFFERED,
)

from ._tasks import Classifier, make_loader
from .test_lightning_habits import quiet_trainer


@pytest.fixture(scope="module")
def L():  # noqa: N802 - Lightning's own alias; imported by the tests that use it only (seconds, once per process)
    return pytest.importorskip("lightning.pytorch")


# LightningModule names that are ours with Lightning's meaning (beyond nn.Module's, which LoopModule inherits)
MODULE_SAME = frozenset(
    {
        "automatic_optimization", "backward", "clip_gradients", "configure_callbacks", "configure_optimizers",
        "current_epoch", "device", "global_rank", "global_step", "hparams", "load_from_checkpoint", "local_rank",
        "log", "log_dict", "lr_schedulers", "manual_backward", "optimizers", "predict_step", "print",
        "save_hyperparameters", "test_step", "trainer", "logger", "loggers", "example_input_array",
        "toggle_optimizer", "untoggle_optimizer", "toggled_optimizer", "optimizer_step", "optimizer_zero_grad",
    }
    | {name for name in HOOK_EVENTS if name != "on_sanity_check_start" and name != "on_sanity_check_end"}
)  # fmt: skip
# hooks a module may define (LoopModule has no default) that the Trainer calls when it does, as Lightning's
MODULE_CALLED_WHEN_DEFINED = frozenset({"prepare_data", "setup", "teardown", *LOADER_METHODS.values()})

TRAINER_SAME = frozenset(
    {
        "callback_metrics", "checkpoint_callback", "checkpoint_callbacks", "ckpt_path", "current_epoch",
        "default_root_dir", "estimated_stepping_batches", "fit", "global_step", "is_global_zero", "logged_metrics",
        "loggers", "lr_scheduler_configs", "max_epochs", "max_steps", "optimizers", "precision", "predict",
        "progress_bar_metrics", "sanity_checking", "save_checkpoint", "should_stop", "strategy", "test",
        "val_dataloaders", "validate", "callbacks", "datamodule", "fast_dev_run", "num_sanity_val_steps",
        "val_check_interval", "check_val_every_n_epoch", "accumulate_grad_batches", "gradient_clip_val",
        "gradient_clip_algorithm", "limit_train_batches", "limit_val_batches", "limit_test_batches",
        "limit_predict_batches", "overfit_batches", "log_every_n_steps", "state", "logger", "log_dir", "min_epochs", "min_steps",
        "global_rank", "local_rank", "node_rank", "world_size", "num_devices", "num_nodes", "lightning_module", "model",
    }
)  # fmt: skip
# Lightning properties that are ours as Trainer(...) arguments only (what they were set to: see attributes.py)
TRAINER_AS_ARGUMENTS = frozenset(
    {
        "check_val_every_n_epoch", "limit_train_batches", "limit_val_batches", "limit_test_batches",
        "limit_predict_batches",
    }
)  # fmt: skip
TRAINER_ARGUMENTS_SAME = frozenset(
    {
        "accelerator", "strategy", "devices", "precision", "logger", "callbacks", "fast_dev_run", "max_epochs",
        "max_steps", "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
        "overfit_batches", "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps",
        "log_every_n_steps", "enable_checkpointing", "enable_progress_bar", "enable_model_summary",
        "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "deterministic",
        "default_root_dir", "max_time", "min_epochs", "min_steps", "detect_anomaly",
        "reload_dataloaders_every_n_epochs", "benchmark",
    }
)  # fmt: skip
CALLBACK_SAME = frozenset({"state_dict", "load_state_dict", "state_key", *HOOK_EVENTS})


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def classified(lightning: set[str], groups: dict[str, object]) -> None:
    """Every name of `lightning` in exactly one group; no group names one Lightning does not have."""
    seen: dict[str, str] = {}
    for group, names in groups.items():
        for name in names:  # type: ignore[attr-defined]
            assert name not in seen, f"{name} is in both {seen[name]} and {group}"
            seen[name] = group
    unclassified = sorted(lightning - seen.keys())
    assert not unclassified, (
        f"Lightning names nobody classified: {unclassified}. Say for each whether ours has it with the same meaning, "
        "under another name, or not (tracktrain/trainer/lightning_names.py, with what to use)."
    )


def test_every_public_name_of_lightnings_module_is_ours_renamed_or_listed_with_what_to_use(L):
    lightning = public(L.LightningModule) - public(nn.Module)
    classified(
        lightning,
        {
            "same": MODULE_SAME & lightning,  # the hooks of HOOK_EVENTS that are the Callback's only are left out
            "called when defined": MODULE_CALLED_WHEN_DEFINED,
            "renamed": MODULE_RENAMED,
            "hooks not called": MODULE_HOOKS_NOT_CALLED,
            "attributes not read": MODULE_ATTRIBUTES_NOT_READ,
            "not offered": MODULE_NOT_OFFERED,
        },
    )
    assert issubclass(LoopModule, nn.Module)  # nn.Module's names are ours as they are Lightning's
    missing = sorted(name for name in MODULE_SAME & lightning if not hasattr(LoopModule, name))
    assert not missing, f"LoopModule lost Lightning names it had: {missing}"
    assert all(hasattr(LoopModule, ours) for ours in MODULE_RENAMED.values())
    offered_now = sorted(name for name in MODULE_NOT_OFFERED if hasattr(LoopModule, name))
    assert not offered_now, f"now ours: move {offered_now} from MODULE_NOT_OFFERED to MODULE_SAME"


def test_every_public_name_of_lightnings_trainer_is_ours_or_listed_with_what_to_use(L):
    lightning = public(L.Trainer)
    classified(lightning, {"same": TRAINER_SAME & lightning, "not offered": TRAINER_NOT_OFFERED})
    trainer = quiet_trainer(".")
    for name in sorted(TRAINER_SAME & lightning - TRAINER_AS_ARGUMENTS):
        assert inspect.getattr_static(trainer, name, None) is not None or name in TRAINER_ATTRIBUTES, name
    for name in TRAINER_AS_ARGUMENTS & lightning:
        assert name in inspect.signature(Trainer).parameters, name
    offered_now = sorted(name for name in TRAINER_NOT_OFFERED if inspect.getattr_static(trainer, name, None))
    assert not offered_now, f"now ours: move {offered_now} from TRAINER_NOT_OFFERED to TRAINER_SAME"


def test_every_argument_of_lightnings_trainer_is_ours_or_refused(L):
    lightning = set(inspect.signature(L.Trainer).parameters)
    classified(lightning, {"same": TRAINER_ARGUMENTS_SAME, "not offered": TRAINER_ARGUMENTS_NOT_OFFERED})
    ours = set(inspect.signature(Trainer).parameters)
    assert TRAINER_ARGUMENTS_SAME <= ours, sorted(TRAINER_ARGUMENTS_SAME - ours)
    assert not (set(TRAINER_ARGUMENTS_NOT_OFFERED) & ours), "now ours: move them to TRAINER_ARGUMENTS_SAME"
    for name in TRAINER_ARGUMENTS_NOT_OFFERED:  # not silently taken: refused, saying what to use instead
        with pytest.raises(TypeError, match=rf"'{name}': Lightning's, which tracktrain does not take\. Use "):
            Trainer(**{name: None})
    with pytest.raises(TypeError, match=r"'max_epoch'\. Did you mean max_epochs"):  # a misspelling: the close names
        Trainer(max_epoch=3)


def test_every_public_name_of_lightnings_callback_is_ours_or_refused(L):
    lightning = public(L.Callback)
    classified(lightning, {"same": CALLBACK_SAME & lightning, "hooks not called": CALLBACK_HOOKS_NOT_CALLED})
    assert all(hasattr(Callback, name) for name in CALLBACK_SAME & lightning)


def test_every_builtin_callback_of_lightning_is_ours_or_says_what_to_use(L):
    """Each public class of lightning.pytorch.callbacks is ours under its name (a Callback of that name in
    tracktrain.callbacks), or importing it from there fails saying what to use instead."""
    import importlib

    import lightning.pytorch.callbacks as theirs

    import tracktrain.callbacks as ours

    lightning = {name for name in theirs.__all__ if isinstance(getattr(theirs, name), type)}
    classified(lightning, {"same": CALLBACKS_SAME, "renamed or not offered": CALLBACKS_INSTEAD})
    assert CALLBACKS_SAME <= set(ours.__all__)
    for name in CALLBACKS_SAME:
        assert issubclass(getattr(ours, name), Callback), name
    for name, instead in CALLBACKS_INSTEAD.items():
        said = re.escape(f"tracktrain.callbacks has no {name} (Lightning's lightning.pytorch.callbacks.{name}): ")
        with pytest.raises(ImportError, match=said + re.escape(instead)):  # the message Python would drop
            exec(f"from tracktrain.callbacks import {name}", {})
        with pytest.raises(AttributeError, match=said):
            getattr(ours, name)
        assert not hasattr(ours, name) and name not in dir(ours)
    for text in CALLBACKS_INSTEAD.values():  # what the messages name exists
        for path in re.findall(r"tracktrain(?:\.\w+)+", text):
            try:
                importlib.import_module(path)
            except ModuleNotFoundError:
                module, _, attribute = path.rpartition(".")
                assert hasattr(importlib.import_module(module), attribute), path
    with pytest.raises(ImportError, match=r"cannot import name 'Nope'"):  # any other name: Python's error
        exec("from tracktrain.callbacks import Nope", {})
    page = (Path(__file__).parents[2] / "docs" / "migration" / "lightning.md").read_text()
    assert not [name for name in sorted(lightning) if f"`{name}`" not in page], "the migration page names each"


def test_every_argument_of_lightnings_log_is_ours_or_refused(L, tmp_path):
    lightning = set(inspect.signature(L.LightningModule.log).parameters)
    ours = set(inspect.signature(LoopModule.log).parameters)
    classified(lightning, {"same": ours & lightning, "not taken": LOG_ARGUMENTS_NOT_TAKEN})

    class Ported(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("val_loss", 1.0, **{self.argument: None})

    for name in LOG_ARGUMENTS_NOT_TAKEN:  # not silently taken: Python refuses an unknown argument
        module = Ported()
        module.argument = name
        with pytest.raises(TypeError, match=name):
            quiet_trainer(tmp_path).validate(module, make_loader(n=8))


def positional(hook) -> list[str]:
    names = list(inspect.signature(hook).parameters)
    return ["module" if name == "pl_module" else name for name in names]


@pytest.mark.parametrize("owner", ["module", "callback"])
def test_the_hooks_we_share_take_lightnings_arguments(L, owner):
    """Lightning calls hooks positionally; ours get the same arguments in the same order (the evaluation batch hooks'
    dataloader_idx included: passed when a pass reads several loaders)."""
    ours, theirs = (LoopModule, L.LightningModule) if owner == "module" else (Callback, L.Callback)
    for name in HOOK_EVENTS:
        if hasattr(theirs, name) and hasattr(ours, name):
            assert positional(getattr(ours, name)) == positional(getattr(theirs, name)), name


def _hook(self, *args, **kwargs):
    return None


@pytest.mark.parametrize("name", sorted(MODULE_HOOKS_NOT_CALLED))
def test_a_module_defining_a_lightning_hook_we_never_call_is_refused_naming_what_to_use(tmp_path, name):
    module = type("Ported", (Classifier,), {name: _hook})()
    with pytest.raises(TypeError, match=rf"Ported defines {name}\(\).*does not call.*Use "):
        quiet_trainer(tmp_path).validate(module, make_loader())


@pytest.mark.parametrize("name", sorted(MODULE_ATTRIBUTES_NOT_READ))
def test_a_module_setting_an_attribute_only_lightning_reads_is_refused(tmp_path, name):
    module = Classifier()
    setattr(module, name, torch.zeros(1, 4))
    with pytest.raises(TypeError, match=rf"Classifier sets {name}.*silently ignored"):
        quiet_trainer(tmp_path).validate(module, make_loader())


@pytest.mark.parametrize("name", sorted(CALLBACK_HOOKS_NOT_CALLED))
def test_a_callback_defining_a_lightning_hook_we_never_call_is_refused(tmp_path, name):
    callback = type("PortedCallback", (Callback,), {name: _hook})()
    with pytest.raises(TypeError, match=rf"PortedCallback defines {name}\(\).*does not call.*Use on_"):
        quiet_trainer(tmp_path, callbacks=[callback])


def test_a_callback_from_configure_callbacks_defining_a_lightning_hook_we_never_call_is_refused(tmp_path):
    """The module's own callbacks are checked as the Trainer's are (they join them when an entry point starts)."""
    callback = type("PortedCallback", (Callback,), {"setup": _hook})()

    class WithCallbacks(Classifier):
        def configure_callbacks(self):
            return [callback]

    with pytest.raises(TypeError, match=r"PortedCallback defines setup\(\).*does not call"):
        quiet_trainer(tmp_path, max_epochs=1).fit(WithCallbacks(), make_loader(n=8))


def test_the_hooks_a_module_may_define_are_called():
    calls: list[str] = []

    class Full(Classifier):
        def prepare_data(self):
            calls.append("prepare_data")

        def setup(self, stage):
            calls.append(f"setup {stage}")

        def teardown(self, stage):
            calls.append(f"teardown {stage}")

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

    for method in LOADER_METHODS.values():
        setattr(Full, method, lambda self, method=method: calls.append(method) or make_loader(n=8))
    trainer = quiet_trainer(".", max_epochs=1, num_sanity_val_steps=0)
    module = Full()
    trainer.fit(module)
    trainer.test(module)
    trainer.predict(module)
    assert calls == [
        "prepare_data", "setup fit", "train_dataloader", "val_dataloader", "teardown fit",
        "prepare_data", "setup test", "test_dataloader", "teardown test",
        "prepare_data", "setup predict", "predict_dataloader", "teardown predict",
    ]  # fmt: skip


# --------------------------------------------------------------------- the same code on both: the same names
def ramp(start: float, n: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1)), batch_size=2)


def body(base: type) -> type:
    """One module's code for either framework (only the renames differ)."""

    class Both(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(1, 1)
            self.steps: list[tuple[int, int]] = []

        def step(self, batch, batch_idx):
            loss = self.net(batch[0]).pow(2).mean()
            self.log("loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            self.log("lr_like", 0.5, prog_bar=True)
            self.log("hidden", 1.0, on_step=True, on_epoch=True)
            return loss

        def evaluate(self, batch, batch_idx, dataloader_idx=0):
            self.steps.append((batch_idx, dataloader_idx))
            self.log("v", batch[0].mean(), prog_bar=True)

        def on_validation_epoch_end(self):
            self.log("after", 3.0, prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    if base is LoopModule:
        Both.train_step, Both.eval_step = Both.step, Both.evaluate
    else:
        Both.training_step, Both.validation_step = Both.step, Both.evaluate
    return Both


def test_the_same_code_logs_under_lightnings_names_with_several_loaders_and_step_epoch_values(L, tmp_path):
    options = {"max_epochs": 2, "num_sanity_val_steps": 1, "log_every_n_steps": 1, "enable_checkpointing": False}
    options |= {"enable_progress_bar": False, "enable_model_summary": False, "default_root_dir": str(tmp_path)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = L.Trainer(logger=False, **options)
        lightning_module = body(L.LightningModule)()
        theirs.fit(lightning_module, ramp(0, 4), [ramp(0, 4), ramp(10, 6)])
    ours = Trainer(loggers=False, **options)
    module = body(LoopModule)()
    ours.fit(module, ramp(0, 4), [ramp(0, 4), ramp(10, 6)])
    assert module.steps == lightning_module.steps  # (batch_idx within the loader, dataloader_idx), sanity included
    assert sorted(ours.progress_bar_metrics) == sorted(theirs.progress_bar_metrics)
    assert sorted(ours.callback_metrics) == sorted(theirs.callback_metrics)
    for name in ("v/dataloader_idx_0", "v/dataloader_idx_1", "after"):
        assert float(ours.callback_metrics[name]) == pytest.approx(float(theirs.callback_metrics[name]))


def test_a_datamodule_is_lightnings_in_names(L):
    lightning = public(L.LightningDataModule)
    ours = public(DataModule)
    missing = lightning - ours - {"from_datasets", "hparams_initial", "CHECKPOINT_HYPER_PARAMS_KEY"}
    missing -= {"CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE", "name", "on_exception"}
    missing -= {
        "load_from_checkpoint",
        "on_after_batch_transfer",
        "on_before_batch_transfer",
        "transfer_batch_to_device",
    }
    missing -= {"remove_ignored_hparams", "allow_zero_length_dataloader_with_multiple_devices"}
    assert not missing, f"LightningDataModule names nobody classified: {sorted(missing)}"


def test_lightnings_reduce_fx_and_add_dataloader_idx_mean_what_they_mean_there(tmp_path):
    class Ported(Classifier):
        def eval_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("peak", float(batch_idx), reduce_fx=torch.max)  # torch's function, as Lightning takes it
            self.log("total", 1.0, reduce_fx="sum", add_dataloader_idx=False)  # one name over both loaders

    first, second = quiet_trainer(tmp_path).validate(Ported(), [make_loader(n=24), make_loader(n=16)])

    assert first["peak/dataloader_idx_0"] == 2.0 and second["peak/dataloader_idx_1"] == 1.0  # 3 and 2 batches
    assert first["total"] == second["total"] == 5.0  # every batch of both loaders summed under the one name


def test_a_misspelt_log_argument_names_the_close_ones(tmp_path):
    class Typo(Classifier):
        def eval_step(self, batch, batch_idx):
            self.log("val_loss", 1.0, prog_barr=True)

    with pytest.raises(TypeError, match=r"unexpected keyword argument 'prog_barr'\. Did you mean prog_bar"):
        quiet_trainer(tmp_path).validate(Typo(), make_loader(n=8))
