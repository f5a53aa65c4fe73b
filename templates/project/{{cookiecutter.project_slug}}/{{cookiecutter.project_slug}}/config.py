"""The run's configuration: typed dataclasses (the schema) filled from `config.toml` next to this file (the
defaults), an optional TOML file of the user's (only the keys it sets), then `section.key=value` overrides."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TRACKERS = ("mlflow", "wandb", "both", "none")
STRATEGIES = ("single_device", "ddp", "fsdp")
OVER_PROCESSES = ("ddp", "fsdp")  # the strategies over the processes torchrun starts (or a world of one without it)
PROGRESS_BAR = ("auto", "always", "never")
WANDB_MODES = ("offline", "online", "disabled")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    max_epochs: int
    precision: str
    strategy: str
    seed: int
    deterministic: bool
    log_every_n_steps: int
    resume: str
    resume_with_changes: bool
    progress_bar: str
    early_stopping_patience: int
    model_summary_depth: int
    plots_every_n_epochs: int


@dataclasses.dataclass(frozen=True)
class DataConfig:
    batch_size: int
    val_fraction: float


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    hidden: int
    dropout: float
    lr: float
    momentum: float


@dataclasses.dataclass(frozen=True)
class RunConfig:
    root_dir: str
    checkpoint_dir: str


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    tracker: str
    experiment: str
    run_name: str
    mlflow_tracking_uri: str
    mlflow_system_metrics: bool
    wandb_mode: str


@dataclasses.dataclass(frozen=True)
class Config:
    trainer: TrainerConfig
    data: DataConfig
    model: ModelConfig
    run: RunConfig
    tracking: TrackingConfig

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


def default_values() -> dict[str, dict[str, Any]]:
    """The packaged `config.toml`, as nested dicts."""
    return tomllib.loads(resources.files(__package__).joinpath("config.toml").read_text(encoding="utf-8"))


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
    """The defaults, then the keys of the TOML file at `path`, then each `section.key=value` of `overrides`."""
    values = default_values()
    if path is not None:
        try:
            with open(path, "rb") as file:
                user_values = tomllib.load(file)
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist; pass an existing TOML file to --config.")
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"config file {str(path)!r} is not valid TOML ({error}); fix the line it names.")
        _merge(values, user_values, where=str(path))
    for override in overrides:
        section, key, value = parse_override(override)
        _merge(values, {section: {key: value}}, where=f"--set {override}")
    return _build(values)


def parse_override(text: str) -> tuple[str, str, Any]:
    """`"trainer.max_epochs=3"` -> `("trainer", "max_epochs", 3)`: the value is read as TOML (numbers, booleans,
    quoted strings), and as a plain string when it is not TOML (`tracking.tracker=wandb`)."""
    name, separator, raw = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not separator or not dot or not section or not key:
        raise ConfigError(f"override {text!r} is not SECTION.KEY=VALUE; write e.g. --set trainer.max_epochs=3.")
    try:
        value = tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def _merge(values: dict[str, dict[str, Any]], update: Mapping[str, Any], where: str) -> None:
    sections = {field.name: field.type for field in dataclasses.fields(Config)}
    for section, entries in update.items():
        if section not in sections:
            raise ConfigError(f"{where}: unknown section {section!r}; the sections are {sorted(sections)}.")
        if not isinstance(entries, Mapping):
            raise ConfigError(f"{where}: [{section}] must be a table of keys, got {entries!r}.")
        for key, value in entries.items():
            if key not in values[section]:
                raise ConfigError(f"{where}: unknown key {section}.{key}; [{section}] has {sorted(values[section])}.")
            values[section][key] = value


def _build(values: Mapping[str, Mapping[str, Any]]) -> Config:
    sections = {}
    for section_field in dataclasses.fields(Config):
        schema = get_type_hints(Config)[section_field.name]
        types = get_type_hints(schema)
        entries = values[section_field.name]
        missing = sorted(set(types) - set(entries))
        if missing:
            raise ConfigError(f"[{section_field.name}] lacks {missing}; the packaged config.toml sets them all.")
        sections[section_field.name] = schema(
            **{key: _typed(f"{section_field.name}.{key}", entries[key], types[key]) for key in types}
        )
    config = Config(**sections)
    _check_choices(config)
    return config


def _typed(name: str, value: Any, expected: type) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{name} must be {expected.__name__}, got {value!r} ({type(value).__name__}).")


def _check_choices(config: Config) -> None:
    for name, value, choices in (
        ("tracking.tracker", config.tracking.tracker, TRACKERS),
        ("tracking.wandb_mode", config.tracking.wandb_mode, WANDB_MODES),
        ("trainer.progress_bar", config.trainer.progress_bar, PROGRESS_BAR),
        ("trainer.strategy", config.trainer.strategy, STRATEGIES),
    ):
        if value not in choices:
            raise ConfigError(f"{name} must be one of {list(choices)}, got {value!r}.")
    for name, value in (("trainer.max_epochs", config.trainer.max_epochs), ("data.batch_size", config.data.batch_size),
                        ("trainer.log_every_n_steps", config.trainer.log_every_n_steps)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value!r}.")
    if config.trainer.early_stopping_patience < 0:
        raise ConfigError("trainer.early_stopping_patience must be 0 (never stop early) or a number of validations, "
                          f"got {config.trainer.early_stopping_patience!r}.")
    if config.trainer.plots_every_n_epochs < 0:
        raise ConfigError("trainer.plots_every_n_epochs must be 0 (no plots) or a number of epochs, "
                          f"got {config.trainer.plots_every_n_epochs!r}.")
    if config.trainer.model_summary_depth < -1:
        raise ConfigError("trainer.model_summary_depth must be -1 (every layer), 0 (the totals) or a depth, "
                          f"got {config.trainer.model_summary_depth!r}.")
    if config.trainer.strategy in OVER_PROCESSES and config.run.checkpoint_dir.startswith("memory://"):
        raise ConfigError(f"run.checkpoint_dir {config.run.checkpoint_dir!r} lives in one process's memory, which the "
                          f"processes of trainer.strategy={config.trainer.strategy!r} do not share (nor does the next "
                          "command, the one that resumes): use a local path or an object store URL (s3://bucket/prefix).")
    if not 0.0 < config.data.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must be between 0 and 1, got {config.data.val_fraction!r}.")
