"""`tracktrain fit | validate | test | predict`: any LoopModule (and DataModule) from a config file and the command
line, as Lightning's `LightningCLI` does it.

    tracktrain fit --model mypkg.MyModule --data mypkg.MyData --config cfg.yaml --model.lr 0.1 --trainer.max_epochs 5
    tracktrain fit --config cfg.yaml --print_config > full.yaml     # the merged config, every default filled in
    tracktrain test --config full.yaml --ckpt_path runs/checkpoints/checkpoint_40.pt

The config (YAML; TOML for a `.toml` file, JSON for `.json`; `--config` may be given several times, later files win) has
LightningCLI's layout; dotted options (`--model.lr 0.1`, `--trainer.callbacks '[...]'`) override it, their values read
as YAML (`0.1` a float, `true` a bool, `null` None, `[1, 2]` a list):

    model:                       # or `model: {lr: 0.1}` with --model mypkg.MyModule
      class_path: mypkg.MyModule
      init_args: {lr: 0.1}
    data:                        # optional: a DataModule (else the module's own *_dataloader() methods)
      class_path: mypkg.MyData
      init_args: {batch_size: 32}
    trainer:                     # Trainer(...)'s arguments; callbacks and loggers as class_path/init_args entries
      max_epochs: 5
      callbacks: [{class_path: tracktrain.callbacks.EarlyStopping, init_args: {monitor: val_loss}}]
    ckpt_path: null              # fit: resume from it; validate/test/predict: the weights to use ("best", "last")
    seed_everything: 0           # Lightning's: Trainer(seed=...) (true/null: a drawn seed, recorded with the run)

Every key is checked against the signature of the class it goes to (`__init__`), before anything is built: an unknown
key is an error naming it and the keys that class takes, and a missing required argument names itself. The module
and datamodule are built from their init arguments, so what `save_hyperparameters()` keeps is what a Python fit keeps
(their hparams reach the loggers the same way), and the merged config is written to the run's root directory as
`config.yaml` and sent to the trackers when a fit starts (LightningCLI's `SaveConfigCallback`).

Built on the standard library (tomllib, json) and PyYAML where installed (`pip install "tracktrain[cli]"`: YAML configs and
`--print_config` as YAML; JSON configs and TOML configs need nothing), rather than jsonargparse (LightningCLI's parser):
the checks tracktrain needs are a class signature's names and required arguments, which take a page here;
jsonargparse's type-driven parsing (nested dataclasses, unions, `--help` per class) would be one more dependency of
the package for what a YAML value already gives. Classes are found by import path; the working directory is
importable, as under `python -m`.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["COMMANDS", "ConfigError", "dump_config", "load_config", "main", "merged_config"]

COMMANDS = ("fit", "validate", "test", "predict")
_SECTIONS = ("model", "data", "trainer", "ckpt_path", "seed_everything")
_FLAGS = {"-h": "help", "--help": "help", "--print_config": "print_config"}
_CLASS_ENTRIES = ("callbacks", "loggers", "logger")  # Trainer arguments that take objects: built from class_path
USAGE = f"""usage: tracktrain {{{",".join(COMMANDS)}}} [--config FILE]... [--model CLASS] [--data CLASS]
        [--model.NAME VALUE] [--data.NAME VALUE] [--trainer.NAME VALUE] [--ckpt_path PATH] [--print_config]

{__doc__.split(chr(10) + chr(10), 1)[1].split(chr(10) + "Built on", 1)[0]}"""


class ConfigError(ValueError):
    """A config that cannot run: an unknown key, a missing argument, a class that cannot be found."""


def main(command: str, argv: Sequence[str]) -> int:
    """`tracktrain COMMAND ARGV...`: returns the exit status (2 for a bad config, with the error on stderr)."""
    try:
        options, overrides = parse_arguments(argv)
        if options.get("help"):
            print(USAGE)
            return 0
        config = merged_config(options.get("config", []), overrides)
        plan = Plan(command, config)
        if options.get("print_config"):
            print(dump_config(plan.full_config()), end="")
            return 0
    except (ConfigError, ImportError) as error:  # ImportError: PyYAML for a YAML config
        print(f"tracktrain {command}: {error}", file=sys.stderr)
        return 2
    plan.run()
    return 0


# ------------------------------------------------------------------------------------------ the command line
def parse_arguments(argv: Sequence[str]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """`--config FILE` (repeatable), `--print_config`, `--help`; every other `--a.b VALUE` (or `--a.b=VALUE`) an
    override `("a.b", value)`, its value read as YAML; `--model CLASS` is `("model.class_path", CLASS)`."""
    options: dict[str, Any] = {}
    overrides: list[tuple[str, Any]] = []
    tokens = list(argv)
    while tokens:
        token = tokens.pop(0)
        if token in _FLAGS:
            options[_FLAGS[token]] = True
            continue
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r}: options are --NAME VALUE (see --help).")
        name, has_value, value = token[2:].partition("=")
        if not has_value:
            if not tokens or tokens[0].startswith("--"):
                raise ConfigError(f"--{name} needs a value.")
            value = tokens.pop(0)
        if name == "config":
            options.setdefault("config", []).append(value)
        elif name in ("model", "data"):
            overrides.append((f"{name}.class_path", value))
        elif name.split(".", 1)[0] in _SECTIONS:
            overrides.append((name, _yaml_value(name, value)))
        else:
            raise ConfigError(
                f"unknown option --{name}: give --config FILE, --model/--data CLASS, or a dotted setting under one of "
                f"{', '.join(_SECTIONS)} (--trainer.max_epochs 5)."
            )
    return options, overrides


def _yaml() -> ModuleType:
    """PyYAML, or an ImportError with the command that installs it (the one place it is imported)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            f'YAML configs need PyYAML ({error}): pip install "tracktrain[cli]" (or give a .toml or .json config).'
        ) from error
    return yaml


def _yaml_value(name: str, text: str) -> Any:
    """A dotted option's value: JSON (`0.1`, `true`, `null`, `[1, 2]`), else YAML, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        yaml = _yaml()
    except ImportError:
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"--{name} {text!r} is not a YAML value: {error}") from None


def load_config(path: str) -> dict[str, Any]:
    """A config file: TOML for `.toml`, JSON for `.json`, YAML otherwise; a mapping at its top."""
    kind = "TOML" if path.endswith(".toml") else "JSON" if path.endswith(".json") else "YAML"
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file.") from None
    parse: Callable[[bytes], Any]
    errors: tuple[type[Exception], ...]
    if kind == "TOML":
        import tomllib

        parse, errors = (lambda text: tomllib.loads(text.decode())), (ValueError,)
    elif kind == "JSON":
        parse, errors = json.loads, (ValueError,)
    else:
        yaml = _yaml()
        parse, errors = yaml.safe_load, (yaml.YAMLError,)
    try:
        loaded = parse(data)
    except errors as error:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"--config {path} is not valid {kind}: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"--config {path} must hold a mapping (model:, data:, trainer:), got {type(loaded).__name__}."
        )
    return loaded


def dump_config(config: Mapping[str, Any]) -> str:
    """`config` as YAML (JSON, which YAML reads too, without PyYAML)."""
    try:
        return _yaml().safe_dump(dict(config), sort_keys=False)
    except ImportError:
        return json.dumps(config, indent=2) + "\n"


def merged_config(files: Sequence[str], overrides: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The config files merged in order (mappings key by key, other values replaced), then each dotted override."""
    config: dict[str, Any] = {}
    for path in files:
        _merge(config, load_config(path))
    for dotted, value in overrides:
        *parents, leaf = dotted.split(".")
        place = config
        for depth, key in enumerate(parents):
            if key in ("model", "data") and depth == 0 and leaf != "class_path" and parents == [key]:
                place = _init_args(place, key)
                continue
            place = place.setdefault(key, {})
            if not isinstance(place, dict):
                raise ConfigError(f"--{dotted}: {'.'.join(parents[: depth + 1])} is {place!r}, not a mapping.")
        place[leaf] = value
    unknown = sorted(set(config) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown}: the config takes {', '.join(_SECTIONS)}.")
    return config


def _init_args(config: dict[str, Any], section: str) -> dict[str, Any]:
    """Where `--model.lr` goes: `model.init_args` in the class_path form, `model` itself otherwise."""
    part = config.setdefault(section, {})
    if not isinstance(part, dict):
        raise ConfigError(f"{section} must be a mapping (class_path, init_args), got {part!r}.")
    return part.setdefault("init_args", {}) if "class_path" in part else part


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


# ------------------------------------------------------------------------------------------------ the plan
class Plan:
    """What a command builds and runs, checked against the classes' signatures before anything is built."""

    def __init__(self, command: str, config: dict[str, Any]) -> None:
        from tracktrain import DataModule, LoopModule, Trainer

        self.command = command
        self.config = config
        self.model_class, self.model_args = _class_and_args(config, "model", LoopModule, required=True)
        self.data_class, self.data_args = _class_and_args(config, "data", DataModule, required=False)
        trainer_args = config.get("trainer") or {}
        if not isinstance(trainer_args, dict):
            raise ConfigError(f"trainer must be a mapping of Trainer(...) arguments, got {trainer_args!r}.")
        self.trainer_args = dict(trainer_args)
        seed = config.get("seed_everything")
        if seed is not None and not isinstance(seed, bool):
            if self.trainer_args.get("seed", seed) != seed:
                raise ConfigError(
                    f"seed_everything: {seed} and trainer.seed: {self.trainer_args['seed']}: one seed, give one."
                )
            self.trainer_args["seed"] = seed
        check_arguments("trainer", Trainer, self.trainer_args)
        for name in _CLASS_ENTRIES:  # their class_path entries: found and their arguments checked, built later
            if name in self.trainer_args:
                _built(f"trainer.{name}", self.trainer_args[name], build=False)
        check_arguments("model", self.model_class, self.model_args)
        if self.data_class is not None:
            check_arguments("data", self.data_class, self.data_args)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is not None and not isinstance(ckpt_path, str):
            raise ConfigError(f"ckpt_path must be a path, URL, 'best' or 'last', got {ckpt_path!r}.")
        self.ckpt_path = ckpt_path

    def full_config(self) -> dict[str, Any]:
        """The merged config with every default of the classes filled in (what `--print_config` prints; it runs
        the same when given back as `--config`)."""
        from tracktrain import Trainer

        full: dict[str, Any] = {
            "model": {
                "class_path": _path_of(self.model_class),
                "init_args": _with_defaults(self.model_class, self.model_args),
            }
        }
        if self.data_class is not None:
            full["data"] = {
                "class_path": _path_of(self.data_class),
                "init_args": _with_defaults(self.data_class, self.data_args),
            }
        full["trainer"] = _with_defaults(Trainer, self.trainer_args)
        full["ckpt_path"] = self.ckpt_path
        return full

    def run(self) -> Any:
        """Build the Trainer, module and datamodule from the config, and run the command."""
        from tracktrain import Trainer

        trainer_args = {
            name: _built(f"trainer.{name}", value) if name in _CLASS_ENTRIES else value
            for name, value in self.trainer_args.items()
        }
        full = self.full_config()
        callbacks = list(trainer_args.get("callbacks") or [])
        trainer_args["callbacks"] = [*callbacks, SaveConfig(full)] if self.command == "fit" else callbacks
        trainer = Trainer(**trainer_args)
        module = self.model_class(**self.model_args)
        datamodule = self.data_class(**self.data_args) if self.data_class is not None else None
        entry: Callable[..., Any] = getattr(trainer, self.command)
        return entry(module, datamodule=datamodule, ckpt_path=self.ckpt_path)


def _class_and_args(config: dict[str, Any], section: str, base: type, required: bool) -> tuple[Any, dict[str, Any]]:
    part = config.get(section)
    if part is None:
        part = {}
    if not isinstance(part, dict):
        raise ConfigError(f"{section} must be a mapping: class_path and init_args (or --{section} CLASS and its args).")
    if "class_path" not in part:
        if not required and not part:
            return None, {}
        what = "a LoopModule" if required else "a DataModule"
        raise ConfigError(
            f"no {section} class: give --{section} mypkg.MyClass ({what}), or {section}.class_path in the config."
        )
    unknown = sorted(set(part) - {"class_path", "init_args"}) if "init_args" in part else []
    if unknown:
        raise ConfigError(f"{section} has {unknown} beside class_path and init_args: put init arguments in init_args.")
    args = part.get("init_args", {k: v for k, v in part.items() if k != "class_path"})
    if not isinstance(args, dict):
        raise ConfigError(f"{section}.init_args must be a mapping of {section} arguments, got {args!r}.")
    cls = import_class(f"{section}.class_path", part["class_path"])
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(
            f"{section}.class_path {part['class_path']!r} is not a {base.__module__.split('.')[0]}.{base.__name__}."
        )
    return cls, dict(args)


def import_class(where: str, path: Any) -> Any:
    """`mypkg.mod.Class` or `mypkg.mod:Class`, imported (the working directory importable, as under `python -m`)."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where} must be an import path such as mypkg.MyClass, got {path!r}.")
    module_name, colon, name = path.partition(":")
    if not colon:
        module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ConfigError(f"{where} {path!r}: give the module too, as in mypkg.MyClass (or mypkg:MyClass).")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ConfigError(f"{where} {path!r}: cannot import {module_name} ({error}).") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise ConfigError(f"{where} {path!r}: {module_name} has no {name}.") from None


def check_arguments(section: str, cls: Any, args: Mapping[str, Any]) -> None:
    """Each key of `args` is an argument of `cls(...)` (unless it takes **kwargs), and every required one is given."""
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = [name for name, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(args) - set(named))
    if unknown and not takes_any:
        raise ConfigError(
            f"{section}: {', '.join(unknown)} {'is not an argument' if len(unknown) == 1 else 'are not arguments'} of "
            f"{cls.__name__}(...); it takes: {', '.join(named) or 'no arguments'}."
        )
    missing = [
        name
        for name, p in parameters.items()
        if name in named and p.default is inspect.Parameter.empty and name not in args
    ]
    if missing:
        raise ConfigError(
            f"{section}: {cls.__name__}(...) needs {', '.join(missing)} (--{section}.{missing[0]} VALUE)."
        )


def _built(where: str, value: Any, build: bool = True) -> Any:
    """`trainer.callbacks` / `trainer.loggers` entries given as `{class_path, init_args}`, built (or only checked);
    others as they are."""
    if isinstance(value, list):
        return [_built(f"{where}[{index}]", item, build) for index, item in enumerate(value)]
    if isinstance(value, dict) and "class_path" in value:
        cls = import_class(f"{where}.class_path", value["class_path"])
        args = value.get("init_args") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"{where}.init_args must be a mapping of arguments, got {args!r}.")
        check_arguments(where, cls, args)
        return cls(**args) if build else value
    return value


def _path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _with_defaults(cls: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` with the defaults of `cls(...)`'s other arguments that a config can hold (plain data)."""
    full: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls).parameters.items():
        if name in args:
            full[name] = args[name]
        elif parameter.default is not inspect.Parameter.empty and _plain(parameter.default):
            full[name] = parameter.default
    full.update({name: value for name, value in args.items() if name not in full})  # taken by **kwargs
    return full


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    return False


def _save_config_callback_base() -> type:
    from tracktrain import Callback

    return Callback


class SaveConfig(_save_config_callback_base()):  # type: ignore[misc]
    """LightningCLI's `SaveConfigCallback`: the merged config as `config.yaml` in the run's root directory (rank 0),
    sent to the trackers as an artifact, when the fit starts."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        from tracktrain import storage

        text = dump_config(self.config).encode()
        root = trainer.default_root_dir
        storage.makedirs(root)
        path = storage.join(root, "config.yaml")
        storage.write_bytes(path, text)
        local = storage.local_path(path)
        if local is None:  # a remote root: the trackers take a local copy
            local = os.path.join(storage.local_dir(root), "config.yaml")
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb") as file:
                file.write(text)
        trainer.log_artifact(local)
