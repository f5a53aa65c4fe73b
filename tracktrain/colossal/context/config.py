"""`Config`: Colossal-AI's configuration, a dict whose entries are also attributes (`gpc.config.BATCH_SIZE`), read
from a Python file or built from a dict.

A config file holds two kinds of names, as Colossal-AI's "Define Your Configuration" page says: its features'
reserved names (`fp16`, `gradient_accumulation`, `clip_grad_norm`, `parallel`, ...: what `initialize` applies, checked
in `tracktrain.colossal.context.features`) and the script's own hyper-parameters (`BATCH_SIZE`, `NUM_EPOCHS`, ...),
kept here for the script to read.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Config", "ConfigException"]


class ConfigException(Exception):
    """A configuration Colossal-AI's `initialize` cannot apply (Colossal-AI's name for the error)."""


class Config(dict):
    """A dict whose keys read as attributes too (`config.fp16.mode`); nested dicts become `Config`s.

    `Config.from_file("./config.py")` runs a Python config file and keeps its top-level names, leaving out those
    starting with `__`, modules and classes (the file's `from tracktrain.colossal.amp import AMP_TYPE`), as
    Colossal-AI does.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if config is not None:
            if not isinstance(config, Mapping):
                raise TypeError(f"Config takes a dict of settings, got {type(config).__name__}: {config!r}.")
            self.update(config)

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(
                f"The config has no {key!r} (it has {sorted(self)}). Set {key} in the config file or dict given to "
                "launch(config=...)."
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(
            key, Config(value) if isinstance(value, Mapping) and not isinstance(value, Config) else value
        )

    def __delattr__(self, key: str) -> None:
        del self[key]

    def update(self, config: Mapping[str, Any] | None = None, /, **more: Any) -> None:  # type: ignore[override]
        """Add or replace entries (nested dicts become `Config`s)."""
        for key, value in {**dict(config or {}), **more}.items():
            self[key] = value

    def copy(self) -> Config:
        return Config(self)

    @staticmethod
    def from_file(filename: str | os.PathLike[str]) -> Config:
        """The top-level names of the Python file `filename` (a `.py` file): its settings and hyper-parameters."""
        path = Path(filename).absolute()
        if not path.is_file():
            raise FileNotFoundError(
                f"The config file {os.fspath(filename)!r} does not exist (looked at {str(path)!r}). Pass the path of "
                "a Python file, e.g. launch_from_torch(config='./config.py'), or a dict."
            )
        if path.suffix != ".py":
            raise ValueError(f"A Colossal-AI config is a Python file ending in .py, got {str(path)!r}.")
        name = f"_colossal_config_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file always has a source loader
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent))  # the file may import its neighbours, as a script would
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
        config = Config()
        for key, value in vars(module).items():
            if not key.startswith("__") and not inspect.ismodule(value) and not inspect.isclass(value):
                config[key] = value
        return config
