"""Lightning's run folders, shared by the loggers that write files (`CSVLogger`, `TensorBoardLogger`):
`{save_dir}/{name}/version_{N}`, the next free N for a new run (or the version given), the run's `hparams.yaml`, and
(ours) its end status in `status.txt`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["VersionedFolders", "next_version", "write_status", "write_yaml"]


class VersionedFolders:
    """The `name`, `version`, `save_dir` and `root_dir` of a logger that keeps each run in `{save_dir}/{name}/` under
    a folder of its version (Lightning's properties). `save_dir` None: the Trainer's root dir, known at `start`."""

    def _set_folders(self, save_dir: str | os.PathLike | None, name: str | None, version: int | str | None) -> None:
        if version is not None and (isinstance(version, bool) or not isinstance(version, (int, str))):
            raise TypeError(
                f"{type(self).__name__}(version=...) is an int (version_N), a str (the folder) or None, got {version!r}."
            )
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._name = name or ""
        self._version = version

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str | None:
        return self._version

    @property
    def save_dir(self) -> str | None:
        """Where the experiments' folders are (None until a fit starts, when none was given: the root dir's)."""
        return self._save_dir

    @property
    def root_dir(self) -> str | None:
        return None if self._save_dir is None else os.path.join(self._save_dir, self._name)

    def _version_folder(self, root_dir: str) -> str:
        """The run's folder name, its version chosen now when none was given (the next free `version_N`), under
        `save_dir` (the Trainer's `root_dir` when none was given: local, `storage.local_dir`)."""
        from tracktrain import storage  # fsspec: not at `import tracktrain`

        if self._save_dir is None:
            self._save_dir = storage.local_dir(root_dir)
        root = self.root_dir
        assert root is not None
        if self._version is None:
            self._version = next_version(root)
        return self._version if isinstance(self._version, str) else f"version_{self._version}"


def next_version(root: str) -> int:
    """The N of the next free `version_{N}` folder in `root`: 0 for a new or empty one."""
    if not os.path.isdir(root):
        return 0
    numbers = [
        int(name.split("_", 1)[1])
        for name in os.listdir(root)
        if name.startswith("version_") and name.split("_", 1)[1].isdigit() and os.path.isdir(os.path.join(root, name))
    ]
    return max(numbers, default=-1) + 1


def write_yaml(path: str, values: Mapping[str, Any]) -> None:
    """`values` as YAML (PyYAML's where it is installed; else as JSON, which YAML reads as it is)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        text = json.dumps(dict(values), indent=2, default=str)
    else:
        text = yaml.safe_dump(json.loads(json.dumps(dict(values), default=str)), sort_keys=False)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


def write_status(run_folder: str, status: str) -> None:
    """The run's end status (FINISHED, FAILED, KILLED) in `run_folder/status.txt`, where `tracktrain runs` and a
    reader of the folder find how the run ended."""
    with open(os.path.join(run_folder, "status.txt"), "w", encoding="utf-8") as out:
        out.write(status + "\n")
