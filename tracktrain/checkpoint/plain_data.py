"""Reading what a checkpoint's files hold as plain data only, so that no file, planted or damaged, runs code.

Three kinds of pickle are in a checkpoint, and each is read here, never with a plain `pickle.load`:

- a full checkpoint file, and every non-tensor entry of a sharded one (an optimizer's `lr`, the blob of what is not
  sharded): `torch.load(weights_only=True)`, which builds tensors, numbers, strings and containers and nothing else
  (torch's own DCP reader loads these entries with `weights_only=False`);
- a sharded checkpoint's `.metadata`, which `torch.distributed.checkpoint` writes with `pickle`: an unpickler that
  builds only DCP's metadata dataclasses and the few torch and pathlib values they hold (DCP reads it with
  `pickle.load`, so a planted `.metadata` would run whatever it holds).

What anything else would need is refused with `UnsafeCheckpoint` naming the file and the type, before any of it is
used (`docs/security.md`: what is trusted, what is checked, how to load a file from elsewhere).
"""

from __future__ import annotations

import importlib
import io
import pickle
from typing import IO, Any

import torch

from tracktrain.checkpoint.manifest import UnsafeCheckpoint

__all__ = ["gist", "load_plain", "read_dcp_metadata"]

# (module, name) of every global a `.metadata` written by torch.distributed.checkpoint holds: its dataclasses, and
# what their fields hold (sizes, dtypes, layouts, the checkpoint's path). Each is a class or a lookup that builds a
# value from its arguments and does nothing else, whatever they are.
_DCP = "torch.distributed.checkpoint"
_METADATA_GLOBALS = {
    *(
        (f"{_DCP}.metadata", name)
        for name in (
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "MetadataIndex",
            "StorageMeta",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    (f"{_DCP}.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch._utils", "_get_layout"),
    *((module, name) for module in ("pathlib", "pathlib._local") for name in ("PosixPath", "WindowsPath")),
    *((module, name) for module in ("pathlib", "pathlib._local") for name in ("PurePosixPath", "PureWindowsPath")),
}


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, stream: IO[bytes], where: str) -> None:
        super().__init__(stream)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS or (module == "torch" and _is_dtype(name)):
            return getattr(importlib.import_module(module), name)
        raise UnsafeCheckpoint(
            f"{self.where} holds a pickled {module}.{name}, which is not part of the metadata that "
            "torch.distributed.checkpoint writes: reading it could run code, so nothing of the checkpoint was "
            "read. It was planted or altered; load another checkpoint (docs/security.md)."
        )


def _is_dtype(name: str) -> bool:
    return isinstance(getattr(torch, name, None), torch.dtype)


def read_dcp_metadata(stream: IO[bytes], where: str) -> Any:
    """The `Metadata` torch.distributed.checkpoint pickled into `stream` (the `.metadata` file `where` names),
    built from DCP's metadata types only (see the module's description)."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        metadata = _MetadataUnpickler(stream, where).load()
    except UnsafeCheckpoint:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of a damaged pickle: said as one error
        raise UnsafeCheckpoint(
            f"{where} could not be read as torch.distributed.checkpoint's metadata ({type(error).__name__}: "
            f"{error}): it is damaged, or not such a file. Nothing of the checkpoint was read."
        ) from error
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpoint(
            f"{where} holds a {type(metadata).__name__}, not torch.distributed.checkpoint's Metadata: it was planted "
            "or altered. Nothing of the checkpoint was read."
        )
    return metadata


def load_plain(data: bytes | bytearray | memoryview | IO[bytes], where: str) -> Any:
    """`torch.load(..., weights_only=True)` of `data` on the CPU (also an `io.BytesIO` object pickled whole, as DCP
    stores one); `UnsafeCheckpoint` naming `where` when it holds objects that are not plain data. Other errors (a
    truncated file) are torch's own, for the caller to describe."""
    stream: IO[bytes] = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with torch.serialization.safe_globals([io.BytesIO]):  # a buffer of bytes: its state is the bytes
            return torch.load(stream, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "unsupported global" not in str(error).lower():  # else damaged (an unknown opcode, cut short)
            raise
        raise UnsafeCheckpoint(
            f"{where} holds Python objects that are not plain data ({gist(error)}): torch.load(weights_only=True) "
            "does not build them, because reading them could run code, and nothing of it was loaded. If you trust "
            "where the file came from, load it yourself with torch.load(path, weights_only=False) and pass the "
            "resulting dict to Checkpoint.load_objects (docs/security.md)."
        ) from error


def gist(error: Exception) -> str:
    """One line of an error: torch's unpickling errors span many, some with advice that does not apply here."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    specific = [line for line in lines if "unsupported" in line.lower()]
    return (specific or lines or [type(error).__name__])[0][:300]
