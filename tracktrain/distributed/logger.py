"""`get_dist_logger`: a rank-aware training log to stderr and per-rank files (Colossal-AI's `get_dist_logger`).

Under torch.distributed every rank runs the same code, so a plain logger prints each line once per rank. Here a
message names the ranks that log it, and rank 0 alone is the default.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from tracktrain.distributed.ranks import rank_and_world_size

__all__ = ["DistributedLogger", "get_dist_logger"]

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

_shared: dict[str, DistributedLogger] = {}  # every DistributedLogger, by name
_shared_lock = threading.RLock()  # re-entered: get_dist_logger holds it while the constructor registers


def _rank_tag(rank: int, world_size: int) -> str:
    return f" [rank {rank}]" if world_size > 1 or rank != 0 else ""


def _level_number(level: str, where: str) -> int:
    number = _LEVELS.get(level.upper()) if isinstance(level, str) else None
    if number is None:
        raise ValueError(f"{where}: unknown logging level {level!r}. Use one of {list(_LEVELS)}.")
    return number


class _RankFormatter(logging.Formatter):
    """`[2026-11-21 12:00:00] INFO tracktrain [rank 1] - message`; the rank part only when running distributed.

    The name is baked into the format because the stdlib logger underneath has a longer, private name.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"[%(asctime)s] %(levelname)s {name.replace('%', '%%')}%(rank_tag)s - %(message)s", _DATE_FORMAT
        )

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "rank_tag"):  # a record logged on `.logger` directly, not through DistributedLogger
            record.rank_tag = _rank_tag(*rank_and_world_size())
        return super().format(record)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record arrives, so redirecting stderr (or pytest's capture)
    after the logger was created still catches its lines."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        """Through any progress bar on the terminal: the bar is cleared, the line written, the bar drawn again
        below it, so a line never lands in the middle of a bar's line."""
        tqdm_module = sys.modules.get("tqdm")  # no tqdm imported: no bar to write around
        if tqdm_module is None:
            super().emit(record)
            return
        with tqdm_module.tqdm.external_write_mode(file=self.stream):
            super().emit(record)


class DistributedLogger:
    """A logger for training runs that decides per message which ranks log it.

    `info/warning/error/debug(message, ranks=None)`: with `ranks=None` only rank 0 logs (unlike Colossal-AI,
    where None means every rank), with a list only the ranks in it do. Lines go to stderr and, after
    `log_to_file(directory)`, to one file per rank in that directory. The rank is read at every call, from
    torch.distributed when a process group is initialized, else from the RANK variable torchrun sets.

    Get it with `get_dist_logger(name)`, which shares one logger per name; constructing a second one of a name
    is an error, as in Colossal-AI, since both would write to the same outputs. For another destination, add a
    handler to `.logger`, the stdlib logger underneath: it does not propagate to the root logger, so nothing is
    printed twice.
    """

    def __init__(self, name: str = "tracktrain") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"DistributedLogger needs a non-empty name, got {name!r}.")
        with _shared_lock:
            if name in _shared:
                raise RuntimeError(
                    f"A DistributedLogger named {name!r} exists already. Use get_dist_logger({name!r}) to get it."
                )
            _shared[name] = self
        self._name = name
        # Not logging.getLogger(name): the default name "tracktrain" would make this logger the parent of every
        # tracktrain module's logger (the Engine's, EarlyStopping's), and its INFO level and handler would start
        # printing their messages on every rank and stop them reaching the root logger.
        self._logger = logging.getLogger(f"{__name__}.{name}")
        self._logger.propagate = False
        self._console = _StderrHandler()
        self._console.setFormatter(_RankFormatter(name))
        self._console.setLevel(logging.INFO)
        self._logger.addHandler(self._console)
        self._files: dict[Path, logging.FileHandler] = {}
        self._lock = threading.Lock()
        self._update_logger_level()

    @property
    def name(self) -> str:
        """The name `get_dist_logger` shares this logger under."""
        return self._name

    @property
    def logger(self) -> logging.Logger:
        """The stdlib logger underneath, for adding handlers."""
        return self._logger

    def _update_logger_level(self) -> None:
        # The logger lets through what any of its outputs wants; each handler then keeps its own level, so a
        # DEBUG file can sit beside an INFO console.
        self._logger.setLevel(min([self._console.level, *(handler.level for handler in self._files.values())]))

    def set_level(self, level: str) -> None:
        """Log messages of `level` and above to stderr: "DEBUG", "INFO", "WARNING" or "ERROR" (any case)."""
        self._console.setLevel(_level_number(level, "DistributedLogger.set_level"))
        self._update_logger_level()

    def log_to_file(
        self, path: str | os.PathLike[str], mode: str = "a", level: str = "INFO", suffix: str | None = None
    ) -> Path:
        """Also write messages of `level` and above to `path/rank_{rank}.log` (`rank_{rank}_{suffix}.log` with a
        suffix), one file per rank; `path` is a directory, created if missing. Returns the file.

        Call it after the process group is initialized (or under torchrun), so the file is named after this
        process's rank. Calling it again for the same file keeps one handler and only updates its level.
        """
        if mode not in ("a", "w"):
            raise ValueError(f"log_to_file: mode must be 'a' (append) or 'w' (overwrite), got {mode!r}.")
        level_number = _level_number(level, "log_to_file")
        if suffix is not None and (not isinstance(suffix, str) or not suffix or "/" in suffix or os.sep in suffix):
            raise ValueError(f"log_to_file: suffix must be a non-empty file-name part without '/', got {suffix!r}.")
        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(
                f"log_to_file: {str(directory)!r} is a file, but path names a directory that will hold one "
                "rank_{rank}.log per rank. Pass a directory."
            )
        directory.mkdir(parents=True, exist_ok=True)
        rank, _ = rank_and_world_size()
        file = (directory / f"rank_{rank}{'' if suffix is None else '_' + suffix}.log").resolve()
        with self._lock:
            handler = self._files.get(file)
            if handler is None:
                handler = logging.FileHandler(file, mode=mode, encoding="utf-8")
                handler.setFormatter(_RankFormatter(self._name))
                self._logger.addHandler(handler)
                self._files[file] = handler
            handler.setLevel(level_number)
            self._update_logger_level()
        return file

    def _log(self, level: int, message: object, ranks: Iterable[int] | None) -> None:
        if ranks is not None and (isinstance(ranks, (str, bytes, int)) or not isinstance(ranks, Iterable)):
            raise TypeError(f"ranks must be None (rank 0) or a list of ranks such as [0, 1], got {ranks!r}.")
        if not self._logger.isEnabledFor(level):
            return
        rank, world_size = rank_and_world_size()
        if rank not in ((0,) if ranks is None else ranks):
            return
        # stacklevel 3 attributes the record to the caller of info()/warning()/..., not to this module
        self._logger.log(level, message, extra={"rank_tag": _rank_tag(rank, world_size)}, stacklevel=3)

    def info(self, message: object, ranks: Iterable[int] | None = None) -> None:
        """Log `message` at INFO on rank 0, or on each rank in `ranks`."""
        self._log(logging.INFO, message, ranks)

    def warning(self, message: object, ranks: Iterable[int] | None = None) -> None:
        """Log `message` at WARNING on rank 0, or on each rank in `ranks`."""
        self._log(logging.WARNING, message, ranks)

    def error(self, message: object, ranks: Iterable[int] | None = None) -> None:
        """Log `message` at ERROR on rank 0, or on each rank in `ranks`."""
        self._log(logging.ERROR, message, ranks)

    def debug(self, message: object, ranks: Iterable[int] | None = None) -> None:
        """Log `message` at DEBUG on rank 0, or on each rank in `ranks`."""
        self._log(logging.DEBUG, message, ranks)

    def __repr__(self) -> str:
        return f"DistributedLogger({self._name!r}, files={[str(file) for file in self._files]})"


def get_dist_logger(name: str = "tracktrain") -> DistributedLogger:
    """The `DistributedLogger` shared under `name`, created on first use."""
    with _shared_lock:
        logger = _shared.get(name)
        return logger if logger is not None else DistributedLogger(name)
