"""`DataModule`: a run's data in one object, as Lightning's `LightningDataModule` — and `StageData`, where an entry
point's loaders come from.

A Trainer entry point takes its loaders from exactly one place per stage, in Lightning's order: the loader given
(`train_dataloaders=`, `dataloaders=`), else the datamodule's `*_dataloader()` (`datamodule=`; given loaders and a
datamodule together are refused), else the module's own `*_dataloader()`. The datamodule's and the module's
`prepare_data()` run first, once per machine (or once in all with `prepare_data_per_node = False`), after the
strategy joined the process group; then `setup(stage)` on every process, then the loaders are asked for; `teardown(stage)`
ends the entry point whatever happens.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tracktrain.checkpoint.run_settings import run_settings
from tracktrain.distributed import ranks
from tracktrain.engine.combined_loader import CombinedLoader
from tracktrain.trainer.arguments import check_loader
from tracktrain.trainer.batches import several_loaders
from tracktrain.trainer.hparams import HyperparametersMixin
from tracktrain.trainer.module import LoopModule

if TYPE_CHECKING:
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["LOADER_METHODS", "DataModule", "StageData", "datamodule_settings"]

# stage -> the method that gives its loader, and the argument that gives it directly
LOADER_METHODS = {
    "fit": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}
_ARGUMENTS = {"fit": "train_dataloaders", "validate": "val_dataloaders"}  # fit's; the others' is `dataloaders`


class DataModule(HyperparametersMixin):
    """The data of a run: how it is made (`prepare_data`, `setup`) and read (`train_dataloader`, ...), as
    Lightning's `LightningDataModule`. Pass it as `trainer.fit(module, datamodule=dm)` (or to validate, test,
    predict); the Trainer calls each hook at its point (see `tracktrain.trainer.datamodule`).

    .. code-block:: python

        class Digits(DataModule):
            def __init__(self, batch_size: int = 32):
                super().__init__()
                self.save_hyperparameters()

            def setup(self, stage):
                x, y = load_digits(return_X_y=True)
                self.train, self.val = random_split(TensorDataset(...), [0.8, 0.2])

            def train_dataloader(self):
                return DataLoader(self.train, batch_size=self.hparams.batch_size, shuffle=True)

            def val_dataloader(self):
                return DataLoader(self.val, batch_size=self.hparams.batch_size)

    `state_dict()`/`load_state_dict()` are saved with every checkpoint of a fit and restored when it resumes
    (after `setup`); `save_hyperparameters()`/`hparams` are the module's.
    """

    #: False: `prepare_data` runs on the process of global rank 0 only (a shared file system), not once per machine
    prepare_data_per_node: bool = True

    def __init__(self) -> None:
        self.trainer: TrainerSurface | None = None  # the Trainer of the entry point under way (or last run)

    def prepare_data(self) -> None:
        """Download or write the data, once per machine (the process of LOCAL_RANK 0; the others wait for it).
        Attributes set here stay in that process: set them in `setup`."""

    def setup(self, stage: str) -> None:
        """Make the datasets, on every process: `stage` is "fit", "validate", "test" or "predict"."""

    def teardown(self, stage: str) -> None:
        """Release what `setup(stage)` made, at the end of the entry point (also after a failure)."""

    def train_dataloader(self) -> Iterable[Any]:
        """The training loader (a DataLoader or another iterable of batches), asked for once per fit."""
        raise NotImplementedError(f"{type(self).__name__} defines no train_dataloader().")

    def val_dataloader(self) -> Iterable[Any]:
        """The validation loader, for `validate` and the validation of a fit."""
        raise NotImplementedError(f"{type(self).__name__} defines no val_dataloader().")

    def test_dataloader(self) -> Iterable[Any]:
        """The test loader, for `test`."""
        raise NotImplementedError(f"{type(self).__name__} defines no test_dataloader().")

    def predict_dataloader(self) -> Iterable[Any]:
        """The prediction loader, for `predict`."""
        raise NotImplementedError(f"{type(self).__name__} defines no predict_dataloader().")

    def state_dict(self) -> dict[str, Any]:
        """What to save of the data with each checkpoint (nothing by default)."""
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what `state_dict()` returned, when a fit resumes from a checkpoint."""


def datamodule_settings(datamodule: Any) -> dict[str, Any]:
    """The datamodule's part of a run's settings, beside the module's (`tracktrain.checkpoint.run_settings`): its
    `hparams` under "datamodule" and its class under "datamodule/class" ({} without a datamodule), as plain data.

    What the loggers record of it (Lightning logs a datamodule's `save_hyperparameters()` with the module's; ours keep
    each under its own key, so the same name in both, `lr` or `batch_size`, is two params rather than Lightning's
    "merge conflict" error), saved in checkpoints and compared when a fit resumes: a changed datamodule setting is
    reported and recorded as a changed Trainer setting is, not refused (the data is not the model)."""
    if datamodule is None:
        return {}
    settings = run_settings(datamodule, {})  # the same reading of hparams and the same plain data as the module's
    part = {"datamodule/class": settings["module/class"]}
    if "module" in settings:
        part["datamodule"] = settings["module"]
    return part


def _defines(owner: Any, name: str) -> bool:
    """Whether `owner`'s class defines the hook `name` itself (not the DataModule's no-op or raising default)."""
    method = getattr(type(owner), name, None)
    return callable(method) and method is not getattr(DataModule, name, None)


class StageData:
    """The loaders of one entry point (`entry`: "fit", "validate", "test" or "predict") and the hooks that make them.

    Checked when the entry point is called (before anything runs); `setup(trainer)` runs once the strategy joined
    the process group, `loader(stage)` is then each stage's loader (None: that stage does not run), `teardown()`
    ends what `setup` began."""

    def __init__(self, entry: str, module: Any, datamodule: Any, given: Mapping[str, Any]) -> None:
        call = f"Trainer.{entry}"
        if isinstance(given.get(entry), DataModule) and datamodule is None:  # Lightning's `fit(module, dm)`
            datamodule, given = given[entry], {**given, entry: None}
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise TypeError(
                f"{call}(datamodule=...) takes a tracktrain.DataModule, got {type(datamodule).__name__}: "
                f"{datamodule!r:.80}. Subclass tracktrain.DataModule (Lightning's LightningDataModule), or pass the "
                "loaders themselves."
            )
        for stage, loader in given.items():
            check_loader(self._argument(entry, stage), loader, training=stage == "fit")
        both = [self._argument(entry, stage) for stage, loader in given.items() if loader is not None]
        if datamodule is not None and both:
            raise ValueError(
                f"{call}() got {' and '.join(both)} and a datamodule: the loaders come from one or the other. Pass "
                "the datamodule alone (its *_dataloader() methods give them), or the loaders without it."
            )
        self.entry, self.module, self.datamodule = entry, module, datamodule
        self._given = dict(given)
        self._sources: dict[str, Any] = {}  # stage -> the datamodule or module whose method gives its loader
        source = datamodule if datamodule is not None else module
        for stage in given:
            if given[stage] is None and _defines(source, LOADER_METHODS[stage]):
                self._sources[stage] = source
        validates = getattr(type(module), "eval_step", None) is not LoopModule.eval_step
        if entry == "fit" and "validate" in self._sources and not validates:
            del self._sources["validate"]  # not asked for: there is no eval_step to run it with
            warnings.warn(
                f"{type(source).__name__}.val_dataloader() is not used: {type(module).__name__} defines no "
                "eval_step(self, batch, batch_idx), so the fit does not validate. Define it to validate.",
                stacklevel=4,
            )
        if given[entry] is None and entry not in self._sources:
            raise ValueError(self._missing(entry, module, datamodule))
        self._loaders: dict[str, Any] = {}
        self._set_up: list[Any] = []  # the owners whose setup(stage) ran: their teardown(stage) is due

    @staticmethod
    def _argument(entry: str, stage: str) -> str:
        return _ARGUMENTS[stage] if entry == "fit" else "dataloaders"

    def _missing(self, entry: str, module: Any, datamodule: Any) -> str:
        method = LOADER_METHODS[entry]
        if datamodule is not None:
            return (
                f"Trainer.{entry}(datamodule=...): {type(datamodule).__name__} defines no {method}(), which {entry} "
                f"needs. Define {method}(self) on it (returning a DataLoader), or pass {self._argument(entry, entry)}= "
                "instead of the datamodule."
            )
        message = (
            f"Trainer.{entry}() needs data: {self._argument(entry, entry)} is required (a DataLoader or another "
            f"iterable of batches); or pass datamodule= (a tracktrain.DataModule), or define {method}(self) on "
            f"{type(module).__name__}."
        )
        try:
            fitted = module.trainer.datamodule
        except (AttributeError, RuntimeError):  # not a module attached to a Trainer yet
            fitted = None
        if fitted is not None and entry != "fit":
            # as Lightning: the datamodule of an earlier fit is not taken without being asked for
            message += (
                f" The last fit's datamodule ({type(fitted).__name__}) is not taken without being asked for, as in "
                f"Lightning: pass Trainer.{entry}(module, datamodule=trainer.datamodule) to use it."
            )
        return message

    def setup(self, trainer: TrainerSurface) -> None:
        """`prepare_data()` on one process per machine (agreed: a failure there fails every rank, none waits for
        it), then `setup(stage)` on every process, datamodule before module (Lightning's order); then the loaders."""
        owners = [owner for owner in (self.datamodule, self.module) if owner is not None]
        if self.datamodule is not None:
            self.datamodule.trainer = trainer
        strategy = trainer.strategy
        preparing = [owner for owner in owners if _defines(owner, "prepare_data")]
        if preparing:
            failure: BaseException | None = None
            for owner in preparing:
                per_node = getattr(owner, "prepare_data_per_node", True)
                if (ranks.local_rank() if per_node else strategy.global_rank) == 0:
                    try:
                        owner.prepare_data()
                    except Exception as error:  # raised below, once every rank knows (no rank left waiting)
                        failure = failure or error
            # one collective, also the barrier: no process reads the data before it is written
            if strategy.any_rank(failure is not None):
                if failure is not None:
                    raise failure
                raise RuntimeError("prepare_data() failed on another process (see its error); every process stops.")
        for owner in owners:
            self._set_up.append(owner)
            if _defines(owner, "setup"):
                owner.setup(self.entry)
        for stage, source in self._sources.items():
            self._loaders[stage] = self._ask(source, stage)

    def _ask(self, source: Any, stage: str) -> Any:
        method = LOADER_METHODS[stage]
        loader = getattr(source, method)()
        if several_loaders(loader) is not None or isinstance(loader, CombinedLoader):  # Lightning's several loaders
            check_loader(f"{type(source).__name__}.{method}()", loader, training=stage == "fit")
            return loader
        if loader is None or not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, Mapping)):
            raise TypeError(
                f"{type(source).__name__}.{method}() returned {loader!r:.80}; it must return a DataLoader or "
                "another iterable of batches."
            )
        return loader

    def reload(self, stage: str) -> Any:
        """`stage`'s loader asked for again from its method (Lightning's `reload_dataloaders_every_n_epochs`); None
        for one given to the entry point, which is not reloaded (as in Lightning)."""
        source = self._sources.get(stage)
        if source is None:
            return None
        self._loaders[stage] = self._ask(source, stage)
        return self._loaders[stage]

    def loader(self, stage: str) -> Any:
        """`stage`'s loader once `setup` ran: the one given, or the one its method returned (None: none)."""
        return self._given[stage] if self._given.get(stage) is not None else self._loaders.get(stage)

    def teardown(self) -> None:
        """`teardown(stage)` of each owner whose `setup(stage)` was reached, in the reverse order."""
        owners, self._set_up = self._set_up, []
        for owner in reversed(owners):
            if _defines(owner, "teardown"):
                owner.teardown(self.entry)
