"""`tracktrain.cli`: Lightning's `LightningCLI`, on jsonargparse (the parser Lightning's own is built on), so that a
LightningCLI script and its YAML configs run here after the renames (`lightning.pytorch.cli` -> `tracktrain.cli`,
`LightningModule` -> `LoopModule`, ...):

    from tracktrain.cli import LightningCLI

    cli = LightningCLI(MyModel, MyDataModule)  # python main.py fit --config cfg.yaml --model.lr 0.1 --trainer.max_epochs 5

The same names and meanings as Lightning 2.6's `lightning.pytorch.cli`: the subcommands `fit`, `validate`, `test`
and `predict` (the Trainer's methods, their other arguments such as `--ckpt_path` included), `--config` (several:
merged in order), `--print_config`, `--model.*` / `--data.*` / `--trainer.*` (the classes' signatures: an unknown key
is an error naming it), `class_path`/`init_args` (`model_class=None` or `subclass_mode_model=True`: any subclass),
`--optimizer` / `--lr_scheduler` (the module's `configure_optimizers` then returns them), `--seed_everything`,
`add_arguments_to_parser` with `parser.link_arguments`, `trainer_defaults`, `run=False` (only `cli.model`,
`cli.datamodule`, `cli.trainer` and `cli.config`), and the merged config saved with the run and sent to the trackers
(`SaveConfigCallback`). The `tracktrain fit` command is this class with subclass mode for the model and the data.

It needs jsonargparse: `pip install 'tracktrain[cli]'`. `import tracktrain` does not import this module.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable
from types import MethodType
from typing import Any, NoReturn, Optional, Union

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

try:
    from jsonargparse import (
        ActionConfigFile,
        ArgumentParser,
        Namespace,
        class_from_function,
        register_unresolvable_import_paths,
        set_parsing_settings,
    )
except ImportError as error:  # the one place jsonargparse is imported
    raise ImportError(
        f"tracktrain.cli (LightningCLI) needs jsonargparse ({error}): pip install 'tracktrain[cli]'"
    ) from error

import tracktrain
import tracktrain.callbacks
from tracktrain import storage
from tracktrain.callbacks import Callback
from tracktrain.rng import seed_everything
from tracktrain.trainer import DataModule, LoopModule, Trainer
from tracktrain.trainer.lightning_names import TRAINER_ARGUMENTS_NOT_OFFERED

__all__ = [
    "ArgsType",
    "LRSchedulerCallable",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "LightningArgumentParser",
    "LightningCLI",
    "OptimizerCallable",
    "ReduceLROnPlateau",
    "SaveConfigCallback",
    "instantiate_class",
    "instantiate_module",
]

# class paths as users write them (torch.optim.Adam, not torch.optim.adam.Adam), and configs read from any fsspec URL
register_unresolvable_import_paths(torch)
set_parsing_settings(config_read_mode_fsspec_enabled=True)


def _import_callbacks_and_loggers() -> None:
    """Every callback and logger of tracktrain imported (their packages load them on first use), so that a config may
    name one by its class name alone (`--trainer.callbacks+=EarlyStopping`): jsonargparse finds the subclasses that
    are imported, and Lightning's package imports all of its own."""
    import tracktrain.loggers

    for package in (tracktrain.callbacks, tracktrain.loggers):
        for name in package.__all__:
            try:
                getattr(package, name)
            except ImportError:  # one that needs a library not installed (TensorBoard's): a config cannot use it
                continue


_import_callbacks_and_loggers()


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's `ReduceLROnPlateau` with the metric it watches (`monitor`), so that `--lr_scheduler
    ReduceLROnPlateau --lr_scheduler.monitor val_loss` is a whole scheduler configuration."""

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# what `--lr_scheduler` accepts: torch's LRScheduler subclasses, and the ReduceLROnPlateau above (torch's own has no
# `monitor`, which its configuration needs)
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]  # noqa: UP007 - a runtime value, as Lightning's
LRSchedulerType = Union[type[LRScheduler], type[ReduceLROnPlateau]]  # noqa: UP007
# the types of a module's `__init__` arguments that take an optimizer or a scheduler still to be built (dependency
# injection: `def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam)`)
OptimizerCallable = Callable[[Iterable], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], Union[LRScheduler, ReduceLROnPlateau]]  # noqa: UP007
ArgsType = Union[list[str], dict[str, Any], Namespace, None]  # noqa: UP007

_CORE_CLASSES = (Trainer, LoopModule, DataModule, Callback)


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's `ArgumentParser` with the groups LightningCLI builds from classes: a Trainer, a LoopModule, a
    DataModule or a Callback (`add_lightning_class_args`), an optimizer and a learning-rate scheduler."""

    def __init__(
        self,
        *args: Any,
        description: str = "tracktrain Trainer command line tool",
        env_prefix: str = "PL",
        default_env: bool = False,
        **kwargs: Any,
    ) -> None:
        """`env_prefix`/`default_env`: with `default_env=True` every option is read from the environment too, as
        Lightning's (`PL_TRAINER__MAX_EPOCHS=5`, `PL_CONFIG`). The rest: jsonargparse's `ArgumentParser`."""
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []  # groups of callbacks that every run has (add_lightning_class_args)
        # the optimizer and scheduler groups added, each with where it goes ("AUTOMATIC": configure_optimizers)
        self._optimizers: dict[str, tuple[type | tuple[type, ...], str]] = {}
        self._lr_schedulers: dict[str, tuple[type | tuple[type, ...], str]] = {}

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """jsonargparse's error (the usage, then the message, exit status 2), with what to use for a Trainer
        argument of Lightning's that tracktrain does not take (`--trainer.num_nodes`), or the close names."""
        super().error(message + _trainer_hint(message), ex)

    def add_lightning_class_args(
        self,
        lightning_class: type | Callable[..., Any],
        nested_key: str,
        subclass_mode: bool = False,
        required: bool = True,
    ) -> list[str]:
        """The arguments of `lightning_class` (a Trainer, LoopModule, DataModule or Callback subclass, or a function
        returning one) under `nested_key` (`--nested_key.name VALUE`); `subclass_mode`: any subclass, chosen by
        `class_path`. A Callback group is built and added to the Trainer's callbacks. Returns the names added."""
        if callable(lightning_class) and not isinstance(lightning_class, type):
            lightning_class = class_from_function(lightning_class)
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, _CORE_CLASSES)):
            raise TypeError(
                f"add_lightning_class_args({lightning_class!r}, {nested_key!r}): give a subclass of Trainer, "
                "LoopModule, DataModule or Callback (or a function returning one); for any other class, "
                f"parser.add_class_arguments(cls, {nested_key!r})."
            )
        if issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(lightning_class, nested_key, fail_untyped=False, required=required)
        return self.add_class_arguments(
            lightning_class,
            nested_key,
            fail_untyped=False,
            instantiate=not issubclass(lightning_class, Trainer),  # the Trainer is built last, with the callbacks
            sub_configs=True,
        )

    def add_optimizer_args(
        self,
        optimizer_class: type[Optimizer] | tuple[type[Optimizer], ...] = (Optimizer,),
        nested_key: str = "optimizer",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """An optimizer's arguments (all but `params`) under `nested_key`: one class, or a tuple of base classes
        whose subclasses `class_path` chooses. `link_to`: "AUTOMATIC" (the module's `configure_optimizers` returns
        it) or the key of an argument it is given to (`model.optimizer`)."""
        _check_classes("add_optimizer_args", optimizer_class, (Optimizer,))
        options: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {"params"}}
        if isinstance(optimizer_class, tuple):
            self.add_subclass_arguments(optimizer_class, nested_key, **options)
        else:
            self.add_class_arguments(optimizer_class, nested_key, sub_configs=True, **options)
        self._optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self,
        lr_scheduler_class: LRSchedulerType | tuple[LRSchedulerType, ...] = LRSchedulerTypeTuple,
        nested_key: str = "lr_scheduler",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """A learning-rate scheduler's arguments (all but `optimizer`) under `nested_key`, as `add_optimizer_args`."""
        _check_classes("add_lr_scheduler_args", lr_scheduler_class, LRSchedulerTypeTuple)
        options: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {"optimizer"}}
        if isinstance(lr_scheduler_class, tuple):
            self.add_subclass_arguments(lr_scheduler_class, nested_key, **options)
        else:
            self.add_class_arguments(lr_scheduler_class, nested_key, sub_configs=True, **options)
        self._lr_schedulers[nested_key] = (lr_scheduler_class, link_to)


def _trainer_hint(message: str) -> str:
    """For a `trainer.NAME` key the message refuses: Lightning's replacement for it here, or the close names."""
    match = re.search(r"\btrainer\.(\w+)", message)
    if match is None:
        return ""
    name = match.group(1)
    if name in TRAINER_ARGUMENTS_NOT_OFFERED:
        return f". trainer.{name} is Lightning's, which tracktrain does not take: use {TRAINER_ARGUMENTS_NOT_OFFERED[name]}."
    taken = [key for key in inspect.signature(Trainer).parameters if key != "self"]
    if name in taken:
        return ""
    close = difflib.get_close_matches(name, taken, n=3)
    return f". Did you mean trainer.{' or trainer.'.join(close)}?" if close else ""


def _check_classes(where: str, given: Any, bases: tuple[type, ...]) -> None:
    for cls in given if isinstance(given, tuple) else (given,):
        if not (isinstance(cls, type) and issubclass(cls, bases)):
            names = " or ".join(f"{base.__module__}.{base.__qualname__}" for base in bases)
            raise TypeError(f"{where}: {cls!r} is not a subclass of {names}; give such a class (or a tuple of them).")


class SaveConfigCallback(Callback):
    """Saves the run's merged config (every default filled in) as `config_filename` in the run's directory
    (`trainer.default_root_dir`, where tracktrain keeps a run's checkpoints and logs) and sends it to the trackers, when
    the first stage of the run starts (rank 0 writes). An existing file stops the run unless `overwrite=True` (a
    config of an earlier run is not replaced unasked); `multifile=True` keeps the config files it was given as
    separate files. Subclass it and implement `save_config` to save the config elsewhere too (rank 0 only; with
    `save_to_log_dir=False`, only there)."""

    def __init__(
        self,
        parser: LightningArgumentParser,
        config: Namespace,
        config_filename: str = "config.yaml",
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError(
                "SaveConfigCallback(save_to_log_dir=False) saves nothing: subclass it and implement save_config(trainer, "
                "module, stage) to save the config where you want it, or leave save_to_log_dir=True."
            )

    def on_fit_start(self, trainer: Any, module: LoopModule) -> None:
        self.save(trainer, module, "fit")

    def on_validation_start(self, trainer: Any, module: LoopModule) -> None:
        self.save(trainer, module, "validate")  # after a fit's start: already saved

    def on_test_start(self, trainer: Any, module: LoopModule) -> None:
        self.save(trainer, module, "test")

    def on_predict_start(self, trainer: Any, module: LoopModule) -> None:
        self.save(trainer, module, "predict")

    def save(self, trainer: Any, module: LoopModule, stage: str) -> None:
        """Once per run, at its first stage: the file in the run's directory (and to the trackers), then `save_config`."""
        if self.already_saved:
            return
        if self.save_to_log_dir:
            root = trainer.default_root_dir
            path = storage.join(root, self.config_filename)
            # agreed by every rank, so that a refusal stops them all rather than leaving rank 0's peers waiting
            exists = trainer.strategy.rank_zero_value(trainer.is_global_zero and storage.exists(path))
            if exists and not self.overwrite:
                raise RuntimeError(
                    f"{type(self).__name__} expected {path} not to exist: it is the config of an earlier run there, "
                    "kept rather than replaced. Remove it, give the run another trainer.default_root_dir, set "
                    "LightningCLI(save_config_callback=None) to save no config, or "
                    'LightningCLI(save_config_kwargs={"overwrite": True}) to replace it.'
                )
            if trainer.is_global_zero:
                self._write(trainer, root, path)
        if trainer.is_global_zero:
            self.save_config(trainer, module, stage)
        self.already_saved = True

    def _write(self, trainer: Any, root: str, path: str) -> None:
        storage.makedirs(root)
        local = storage.local_path(path)
        if local is not None:
            self.parser.save(self.config, local, skip_unset=False, overwrite=True, multifile=self.multifile)
        else:  # a remote run directory: the text written there, and a local copy for the trackers
            if self.multifile:
                raise ValueError(
                    f"SaveConfigCallback(multifile=True) writes the config files beside each other on a local disk; "
                    f"the run directory {root} is remote: leave multifile=False there."
                )
            text = self.parser.dump(self.config, skip_unset=False).encode()
            storage.write_bytes(path, text)
            local = os.path.join(storage.local_dir(root), self.config_filename)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb") as file:
                file.write(text)
        trainer.log_artifact(local)

    def save_config(self, trainer: Any, module: LoopModule, stage: str) -> None:
        """Implement to save the config somewhere else too (a tracker's params, say): called on rank 0 only, so no
        collective may run here. `self.parser.dump(self.config, skip_unset=False)` is its text."""


class LightningCLI:
    """Builds a Trainer, a LoopModule and a DataModule from config files and the command line, and runs the
    subcommand given (`fit`, `validate`, `test`, `predict`), as Lightning's `LightningCLI`.

    Args:
        model_class: the LoopModule class (or a function returning one); None: any LoopModule, chosen by
            `--model CLASS` or `model: {class_path: ...}`.
        datamodule_class: the DataModule class (or a function returning one); None: any, or none (the module's own
            `*_dataloader()` methods).
        save_config_callback: the callback class that saves the merged config with the run (None: none).
        save_config_kwargs: its arguments (`{"overwrite": True}`, `config_filename`, `multifile`).
        trainer_class: the Trainer class (or a function returning one).
        trainer_defaults: defaults of the Trainer's arguments; its `callbacks` are added to every run (not
            configurable).
        seed_everything_default: the default of `--seed_everything`: an int, True (a seed drawn, and recorded in the
            config) or False (no seeding).
        parser_kwargs: arguments of each parser (jsonargparse's `ArgumentParser`), or per subcommand
            (`{"fit": {"default_config_files": ["fit.yaml"]}}`).
        parser_class: the parser class, `LightningArgumentParser` or a subclass.
        subclass_mode_model, subclass_mode_data: accept any subclass of the given class, chosen by `class_path`.
        args: the arguments to parse instead of `sys.argv[1:]`: a list as on the command line, or a dict / Namespace
            config.
        run: False: no subcommand; the classes are built (`cli.model`, `cli.datamodule`, `cli.trainer`) and nothing runs.
        auto_configure_optimizers: add `--optimizer` and `--lr_scheduler` (the module's `configure_optimizers` then
            returns them, with a warning when it had its own).
        load_from_checkpoint_support: accepted for Lightning's scripts; here `save_hyperparameters()` keeps the
            arguments the module was built with, as in a Python fit, which `load_from_checkpoint` rebuilds it from.
    """

    def __init__(
        self,
        model_class: type[LoopModule] | Callable[..., LoopModule] | None = None,
        datamodule_class: type[DataModule] | Callable[..., DataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | dict[str, dict[str, Any]] | None = None,
        parser_class: type[LightningArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support
        self.model_class = model_class
        self._model_class = model_class or LoopModule
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        main_kwargs, subcommand_kwargs = self._setup_parser_kwargs(self.parser_kwargs)
        self.setup_parser(run, main_kwargs, subcommand_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config["subcommand"] if run else None
        self._check_weights_only()
        self._parse_ckpt_path()
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # ----------------------------------------------------------------------------------------------- the parser
    def _setup_parser_kwargs(self, parser_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        names = self.subcommands().keys()
        main = {key: value for key, value in parser_kwargs.items() if key not in names}
        per_subcommand = {key: value for key, value in parser_kwargs.items() if key in names}
        return main, per_subcommand

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """A parser with `-c/--config` (and so `--print_config`)."""
        kwargs.setdefault("dump_header", [f"tracktrain=={tracktrain.__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile, help="A config file (YAML or JSON); repeatable.")
        return parser

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """The parser, with a subparser per subcommand when `add_subcommands`."""
        self.parser = self.init_parser(**main_kwargs)
        if add_subcommands:
            self._subcommand_method_arguments: dict[str, list[str]] = {}
            self._add_subcommands(self.parser, **subparser_kwargs)
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """`--seed_everything`."""
        parser.add_argument(
            "--seed_everything",
            type=Union[bool, int],  # noqa: UP007 - jsonargparse reads the type at run time
            default=self.seed_everything_default,
            help="An int: seed_everything with it before the classes are built. True: a seed drawn (and recorded in "
            "the config). False: no seeding.",
        )

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """`--trainer.*`, `--model.*` and `--data.*`."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults(
            {f"trainer.{key}": value for key, value in self.trainer_defaults.items() if key != "callbacks"}
        )
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(
            self._datamodule_class,
            "data",
            subclass_mode=self.subclass_mode_data,
            required=self.datamodule_class is not None,  # without one, the module's own loaders
        )

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser._optimizers:  # unless add_arguments_to_parser added its own
                parser.add_optimizer_args((Optimizer,))
            if not parser._lr_schedulers:
                parser.add_lr_scheduler_args(LRSchedulerTypeTuple)
        self.link_optimizers_and_lr_schedulers(parser)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Implement to add arguments or link them (`parser.link_arguments("data.num_classes", "model.num_classes",
        apply_on="instantiate")`)."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands, each with the arguments of its Trainer method that the CLI gives itself (not options):
        the module, the loaders, the datamodule, and `fit`'s plain-model arguments (the CLI's are `--optimizer` and
        `--lr_scheduler`)."""
        return {
            "fit": {"model", "module", "train_dataloaders", "val_dataloaders", "datamodule"}
            | {"optimizer", "criterion", "lr_scheduler"},
            "validate": {"model", "module", "dataloaders", "datamodule"},
            "test": {"model", "module", "dataloaders", "datamodule"},
            "predict": {"model", "module", "dataloaders", "datamodule"},
        }

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        subcommands = parser.add_subcommands()
        trainer_class = (
            self.trainer_class if isinstance(self.trainer_class, type) else class_from_function(self.trainer_class)
        )
        for name in self.subcommands():
            description = _first_line(getattr(trainer_class, name))
            options = dict(kwargs.get(name, {}))
            options.setdefault("description", description)
            subparser = self._prepare_subcommand_parser(trainer_class, name, **options)
            self._subcommand_parsers[name] = subparser
            subcommands.add_subcommand(name, subparser, help=description)

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        parser = self.init_parser(**kwargs)
        self._add_arguments(parser)
        skip: set[str | int] = set(self.subcommands()[subcommand])
        self._subcommand_method_arguments[subcommand] = parser.add_method_arguments(klass, subcommand, skip=skip)
        if "weights_only" not in inspect.signature(getattr(klass, subcommand)).parameters:
            # Lightning 2.6's Trainer methods take weights_only (how torch.load reads ckpt_path), so a config Lightning
            # printed has it: here checkpoints are always read as plain data, which is weights_only=True
            parser.add_argument(
                "--weights_only",
                type=Optional[bool],  # noqa: UP045 - jsonargparse reads the type at run time
                default=None,
                help="Lightning's: tracktrain reads every checkpoint as plain data (weights_only=True, docs/security.md).",
            )
        return parser

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """Links each optimizer or scheduler group with a `link_to` to that argument (as a class_path/init_args
        dict: the module builds it)."""
        for key, (class_type, link_to) in {**parser._optimizers, **parser._lr_schedulers}.items():
            if link_to == "AUTOMATIC":
                continue
            if isinstance(class_type, tuple):
                parser.link_arguments(key, link_to)
            else:
                parser.link_arguments(key, link_to, compute_fn=_with_class_path(class_type))

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """`self.config`: `args` (a list as on the command line, or a dict / Namespace), else `sys.argv[1:]`."""
        if args is not None and len(sys.argv) > 1 and list(args) != sys.argv[1:] and not isinstance(args, Namespace):
            import warnings

            warnings.warn(
                "LightningCLI(args=...) parses those arguments as if they were the command line's; the command line "
                f"has its own too (sys.argv[1:]={sys.argv[1:]}), which are not read. Give one of the two.",
                stacklevel=3,
            )
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def _check_weights_only(self) -> None:
        if self.subcommand and self.config[self.subcommand].get("weights_only") is False:
            self._parser(self.subcommand).error(
                "weights_only: false: tracktrain reads a checkpoint as plain data only, never running code from it, so "
                "it has no weights_only=False (Lightning's torch.load of any pickle). Leave weights_only out (or true); "
                "for a sharded checkpoint written by another program, `tracktrain trust DIR` (docs/security.md)"
            )

    def _parse_ckpt_path(self) -> None:
        """A `--ckpt_path` file's module hyperparameters become the model's arguments (as Lightning does, so that
        `test --ckpt_path FILE` rebuilds the module that was trained)."""
        if not self.subcommand:
            return
        ckpt_path = self.config[self.subcommand].get("ckpt_path")
        if not ckpt_path or not os.path.isfile(ckpt_path):
            return  # "best", "last", a URL: the Trainer finds and checks those
        hparams = _checkpoint_hparams(os.fspath(ckpt_path))
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        try:
            self.config = self.parser.parse_object({self.subcommand: {"model": hparams}}, self.config)
        except SystemExit:
            sys.stderr.write(
                f"The hyperparameters saved in --ckpt_path {ckpt_path} do not fit the model's arguments.\n"
            )
            raise

    # ------------------------------------------------------------------------------------------ the classes
    def before_instantiate_classes(self) -> None:
        """Implement to run code before the classes are built."""

    def instantiate_classes(self) -> None:
        """Builds the model, the datamodule and the Trainer from the config (`self.config_init`)."""
        self.config_init = self.parser.instantiate(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def after_instantiate_classes(self) -> None:
        """Implement to run code after the classes are built."""

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, from the config's `trainer` and `kwargs`, with the callback groups' callbacks, those of
        `trainer_defaults` and the `save_config_callback`."""
        extra_callbacks = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return self._instantiate_trainer(trainer_config, extra_callbacks)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        if "callbacks" not in inspect.signature(self.trainer_class).parameters:
            raise TypeError(
                f"{getattr(self.trainer_class, '__qualname__', self.trainer_class)!r} takes no callbacks argument, so "
                "LightningCLI cannot add its callbacks (the callback groups, trainer_defaults' callbacks, the config "
                "saver): give it one, as Trainer has."
            )
        given = config.get("callbacks")
        config["callbacks"] = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
        config["callbacks"].extend(callbacks)
        if "callbacks" in self.trainer_defaults:
            value = self.trainer_defaults["callbacks"]
            config["callbacks"] += list(value) if isinstance(value, (list, tuple)) else [value]
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            config["callbacks"].append(
                self.save_config_callback(
                    self._parser(self.subcommand),
                    self.config.get(str(self.subcommand), self.config),
                    **self.save_config_kwargs,
                )
            )
        return self.trainer_class(**config)

    def _parser(self, subcommand: str | None) -> LightningArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    @staticmethod
    def configure_optimizers(
        lightning_module: LoopModule, optimizer: Optimizer, lr_scheduler: LRSchedulerTypeUnion | None = None
    ) -> Any:
        """What the module's `configure_optimizers` returns with `--optimizer` (and `--lr_scheduler`): override to
        return something else."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor},
            }
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        """With `--optimizer` given, the module's `configure_optimizers` returns it (and `--lr_scheduler`).

        This replaces the method on the module object, as Lightning's LightningCLI does, rather than keeping to our
        rule of never patching a user's object: the meaning users rely on is that `cli.model` itself now configures
        these optimizers (`cli.trainer.fit(cli.model)` after `run=False`, or any Trainer), which only the module's own
        method can carry."""
        if not self.auto_configure_optimizers:
            return
        parser = self._parser(subcommand)
        optimizers = _automatic(Optimizer, parser._optimizers)
        schedulers = _automatic(LRSchedulerTypeTuple, parser._lr_schedulers)
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                f"{type(self).__name__}: configure_optimizers takes at most one optimizer group and one lr_scheduler "
                f"group given link_to='AUTOMATIC', found {optimizers + schedulers}: link the others to the module's "
                "arguments (link_to='model.optimizer') and build them in its own configure_optimizers."
            )
        optimizer_class = parser._optimizers[optimizers[0]][0]
        optimizer_init = self._get(self.config_init, optimizers[0])
        if not isinstance(optimizer_class, tuple):
            optimizer_init = _class_path_config(optimizer_class, optimizer_init)
        if not optimizer_init:
            return  # the groups are there, and no optimizer was given: the module's own configure_optimizers
        scheduler_init = None
        if schedulers:
            scheduler_class = parser._lr_schedulers[schedulers[0]][0]
            scheduler_init = self._get(self.config_init, schedulers[0])
            if not isinstance(scheduler_class, tuple):
                scheduler_init = _class_path_config(scheduler_class, scheduler_init)
        if type(self.model).configure_optimizers is not LoopModule.configure_optimizers:
            import warnings

            warnings.warn(
                f"`{type(self.model).__name__}.configure_optimizers` will be overridden by "
                f"`{type(self).__name__}.configure_optimizers` (the --optimizer given).",
                stacklevel=2,
            )
        optimizer = instantiate_class(self.model.parameters(), optimizer_init)
        scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
        configure = self.configure_optimizers

        def configure_optimizers(module: LoopModule) -> Any:
            return configure(module, optimizer=optimizer, lr_scheduler=scheduler)

        self.model.configure_optimizers = MethodType(configure_optimizers, self.model)

    def _get(self, config: Namespace, key: str, default: Any = None) -> Any:
        """`key` of `config`, inside the subcommand's part when there is one."""
        return config.get(str(self.subcommand), config).get(key, default)

    # ---------------------------------------------------------------------------------------------- the run
    def _run_subcommand(self, subcommand: str) -> None:
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        method = getattr(self, subcommand, getattr(self.trainer, subcommand))
        method(**self._prepare_subcommand_kwargs(subcommand, method))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _prepare_subcommand_kwargs(self, subcommand: str, method: Callable[..., Any] | None = None) -> dict[str, Any]:
        """The subcommand's options (`ckpt_path`, ...), the model and the datamodule, as the method names them
        (Lightning's `model=`, ours `module=`)."""
        kwargs = {
            key: value
            for key, value in self.config_init[subcommand].items()
            if key in self._subcommand_method_arguments[subcommand]
        }
        parameters = inspect.signature(method).parameters if method is not None else {}
        takes_model = "model" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        kwargs["module" if "module" in parameters and not takes_model else "model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs

    def _set_seed(self) -> None:
        """`seed_everything` before anything is built: an int, or True (the Trainer's `seed` when it has one, else
        drawn), written back into the config so that the run can be repeated; False: no seeding."""
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        trainer_seed = self._get(self.config, "trainer", default=Namespace()).get("seed")
        if seed is True:
            seed = trainer_seed  # one seed for the run: the Trainer's, given
        elif trainer_seed is not None and trainer_seed != seed:
            self._parser(self.subcommand).error(
                f"seed_everything: {seed} and trainer.seed: {trainer_seed} are two seeds for one run: give one"
            )
        seed = seed_everything(seed)  # workers: the Trainer always seeds them
        if self.subcommand:
            self.config[self.subcommand]["seed_everything"] = seed
        else:
            self.config["seed_everything"] = seed


def _automatic(base: type | tuple[type, ...], groups: dict[str, tuple[type | tuple[type, ...], str]]) -> list[str]:
    """The groups of `groups` whose classes are `base` subclasses and go to configure_optimizers."""
    found = []
    for key, (classes, link_to) in groups.items():
        candidates = classes if isinstance(classes, tuple) else (classes,)
        if link_to == "AUTOMATIC" and any(issubclass(cls, base) for cls in candidates):
            found.append(key)
    return found


def _class_path_config(class_type: type, init_args: Namespace | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(init_args, Namespace):
        init_args = init_args.as_dict()
    return {"class_path": f"{class_type.__module__}.{class_type.__name__}", "init_args": init_args or {}}


def _with_class_path(class_type: type) -> Callable[[Namespace], dict[str, Any]]:
    def add_class_path(init_args: Namespace) -> dict[str, Any]:
        return _class_path_config(class_type, init_args)

    return add_class_path


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """`init["class_path"]` built with `args` (one positional argument, or a tuple of them) and `init["init_args"]`:
    how an optimizer or scheduler config becomes the object (`instantiate_class(module.parameters(), config)`)."""
    if isinstance(init, Namespace):
        init = init.as_dict()
    if not isinstance(init, dict) or not isinstance(init.get("class_path"), str):
        raise TypeError(f"instantiate_class needs a dict with a class_path (and init_args), got {init!r}.")
    positional = args if isinstance(args, tuple) else (args,)
    module_name, _, name = init["class_path"].rpartition(".")
    if not module_name:
        raise ValueError(f"class_path {init['class_path']!r} names no module: write it in full, e.g. torch.optim.Adam.")
    import importlib

    cls = getattr(importlib.import_module(module_name), name)
    return cls(*positional, **init.get("init_args", {}))


def instantiate_module(class_type: type, config: dict[str, Any]) -> Any:
    """A module (or datamodule) of `class_type` built from a config of its arguments as the CLI parses them (nested
    `class_path`/`init_args` entries built too); `{"_class_path": ..., **arguments}` builds that subclass."""
    parser = ArgumentParser(exit_on_error=False)
    if "_class_path" in config:
        parser.add_subclass_arguments(class_type, "module", fail_untyped=False)
        arguments = {key: value for key, value in config.items() if key != "_class_path"}
        config = {"class_path": config["_class_path"], "dict_kwargs": arguments}
    else:
        parser.add_class_arguments(class_type, "module", fail_untyped=False)
    return parser.instantiate(parser.parse_object({"module": config})).module


def _first_line(function: object) -> str | None:
    doc = inspect.getdoc(function)
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ") if doc else None


def _checkpoint_hparams(path: str) -> dict[str, Any]:
    """The module hyperparameters a checkpoint file holds (tracktrain's, or a Lightning `.ckpt`'s), {} when none."""
    from tracktrain.checkpoint.state import read_checkpoint

    try:
        states = read_checkpoint(path)
    except Exception:  # noqa: BLE001 - not ours to judge here: the Trainer reads it and says what is wrong
        return {}
    if not isinstance(states, dict):
        return {}
    settings = (states.get("trainer") or {}).get("settings") or {}
    hparams = settings.get("module") or states.get("hyper_parameters") or {}
    hparams = dict(hparams) if isinstance(hparams, dict) else {}
    hparams.pop("_instantiator", None)
    return hparams
