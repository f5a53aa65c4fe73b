"""Sharded checkpoints: a directory that `torch.distributed.checkpoint` (DCP) wrote, each rank its own shards, read
back on any number of ranks.

The directory holds the sharded entries of a checkpoint (the model's state, each optimizer's), each rank's shards
in its own files, and everything else (the Trainer's, the engine's, the schedulers' state: small, the same on every
rank) as one `torch.save` blob under `REST_KEY`, written by rank 0. Its manifest lists every file as `name/file`
(`tracktrain.checkpoint.manifest`), so it is committed, discovered, retained and removed as one checkpoint.

Reading gives the rest as it was saved, and a `StoredShards` for each sharded entry: the object it loads into
either reads just its own shards into its current layout (`load_into`: a sharded module on any number of ranks,
which is how a checkpoint saved on 2 ranks resumes on 4), or reads the entry in full (`full()`: a module on one
device, an unsharded strategy, `tracktrain convert`).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict, load
from torch.distributed.checkpoint.storage import StorageReader

from tracktrain import storage
from tracktrain.checkpoint.manifest import (
    CheckpointCorrupted,
    UnsafeCheckpoint,
    manifest_name,
    member_sizes,
    parse_manifest,
    sha256_of,
    size_mismatch,
    write_manifest,
)
from tracktrain.checkpoint.plain_data import load_plain, read_dcp_metadata
from tracktrain.storage.url import split

__all__ = [
    "GROUP_OF_KEY",
    "METADATA_FILE",
    "PARAMETER_ORDER_KEY",
    "REST_KEY",
    "StoredShards",
    "VerifyShare",
    "by_index",
    "by_parameter_name",
    "grouped_by_parameter",
    "is_sharded_checkpoint",
    "read_sharded",
    "storage_reader",
    "storage_writer",
    "trust",
]

#: the file DCP's coordinator writes last into the directory, after every rank's shards
METADATA_FILE = ".metadata"
#: the entry that holds everything of a checkpoint that is not sharded, as one torch.save blob
REST_KEY = "tracktrain_rest"
#: in an optimizer's state saved per parameter (torch's flattened layout, a pipeline's): the whole model's parameter
#: names in order, and each parameter's group index, from which the state keyed by index is rebuilt
PARAMETER_ORDER_KEY = "tracktrain_parameter_order"
GROUP_OF_KEY = "tracktrain_group_of"


def is_sharded_checkpoint(url: str | os.PathLike) -> bool:
    """Whether `url` is a sharded checkpoint (a directory with DCP's metadata file)."""
    return storage.isdir(url) and storage.exists(storage.join(os.fspath(url), METADATA_FILE))


class _PlainMetadata:
    """DCP's readers, with `.metadata` read as plain data (`plain_data.read_dcp_metadata`): theirs is a `pickle.load`,
    which runs whatever a planted file holds."""

    fs: Any
    path: Any
    load_id: str

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        path = self.fs.concat_path(self.path, METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}")
        with self.fs.create_stream(path, "rb") as stream:
            metadata = read_dcp_metadata(stream, f"Sharded checkpoint metadata {path}")
        if metadata.storage_meta is None:  # as DCP's own reader: older files have none
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _LocalReader(_PlainMetadata, FileSystemReader):
    pass


class _FsspecReader(_PlainMetadata, FsspecReader):
    pass


class _PlainBytes:
    """DCP's load planners, with each non-tensor entry read as plain data (`plain_data.load_plain`): theirs is a
    `torch.load(weights_only=False)`."""

    flatten_state_dict: bool
    mappings: Any
    original_state_dict: Any
    state_dict: Any

    def __init__(self, url: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.url = url  # what a refusal names

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        loaded = load_plain(value, f"The entry {read_item.dest_index.fqn} of the sharded checkpoint {self.url}")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class _LoadPlanner(_PlainBytes, DefaultLoadPlanner):
    pass


class _WholeEntryPlanner(_PlainBytes, _EmptyStateDictLoadPlanner):
    pass


def storage_reader(url: str | os.PathLike) -> StorageReader:
    """DCP's reader of the directory `url` (the file system's for a local path, fsspec's for any other URL), reading
    its metadata as plain data."""
    local = storage.local_path(url)
    if local is not None:
        return _LocalReader(local)
    return _FsspecReader(os.fspath(url))


def storage_writer(url: str | os.PathLike) -> Any:
    """DCP's writer of the directory `url`, chosen as `storage_reader` chooses its reader."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    local = storage.local_path(url)
    if local is not None:
        return FileSystemWriter(local)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    return FsspecWriter(os.fspath(url))


class StoredShards:
    """The entry `path` of the sharded checkpoint at `url` (("model",) or ("optimizers", 0)), not read yet."""

    def __init__(self, url: str, path: tuple[str | int, ...]) -> None:
        self.url = url
        self.path = path

    def __repr__(self) -> str:
        return f"StoredShards({self.url!r}, {self.path!r})"

    def load_into(self, template: dict[str, Any]) -> dict[str, Any]:
        """Read this entry into `template` (a state dict of the layout wanted: this rank's DTensor shards, or full
        tensors), in place, and return it. Every rank calls it at the same point (DCP plans the reads together)."""
        key = str(self.path[0])
        if len(self.path) == 1:
            nested: dict[str, Any] = {key: template}
        else:  # ("optimizers", 2): DCP flattens a list by index, so the template sits at that index
            index = self.path[1]
            assert isinstance(index, int)
            nested = {key: [{} for _ in range(index)] + [template]}
        with _refusals_as_themselves():
            load(nested, storage_reader=storage_reader(self.url), planner=_LoadPlanner(self.url))
        return template

    def keyed_by_parameter_name(self) -> bool:
        """Whether this entry, an optimizer's state, is keyed by parameter name (as a sharded run saves it, and as
        `load_into` reads it into a sharded optimizer's layout); False for one keyed by index (a full checkpoint
        converted with `tracktrain convert`), which is read whole instead."""
        key = ".".join(str(part) for part in self.path)
        value: Any = _read_alone(self.url, f"{key}.param_groups")
        for part in (*self.path, "param_groups"):
            value = value[part]
        return _keyed_by_name({"param_groups": value})

    def full(self) -> Any:
        """This entry with every tensor whole, read by this process alone (an optimizer's state keyed by parameter
        index, as `Optimizer.state_dict()` keys it: DCP keys it by parameter name)."""
        value: Any = _read_alone(self.url, ".".join(str(part) for part in self.path))
        for part in self.path:
            value = value[part]
        if isinstance(value, dict) and PARAMETER_ORDER_KEY in value:
            value = grouped_by_parameter(value)
        if _keyed_by_name(value):
            return by_index(value)
        if isinstance(value, dict) and isinstance(value.get("state"), dict) and "param_groups" in value:
            # DCP writes dict keys as text: an optimizer's state keyed by index gets its integer keys back
            return {**value, "state": {int(index): state for index, state in value["state"].items()}}
        return value


class VerifyShare(NamedTuple):
    """The ranks that read a sharded checkpoint together share checking it: this rank hashes every `world_size`-th
    file from its `rank`-th, and `gather(value)` (every rank calls it) returns every rank's value."""

    rank: int
    world_size: int
    gather: Callable[[Any], list[Any]]


def read_sharded(
    url: str | os.PathLike, lazy: bool, share: VerifyShare | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The states of the sharded checkpoint at `url`, checked against its manifest: the rest as saved, and the
    sharded entries as `StoredShards` (`lazy`: for the objects to read their own shards) or in full; and the
    manifest. `share`: the checksums are shared by the ranks reading it together (see `check_members`)."""
    url = os.fspath(url)
    # sizes and the metadata's checksum now; the others' in a thread while the rest is read (as plain data only)
    check = check_members(url, share)
    reader = storage_reader(url)
    metadata = reader.read_metadata()
    entries: dict[str, Any] = {}
    planner_data: dict[str, tuple[str | int, ...]] = metadata.planner_data or {}
    for path in planner_data.values():
        top = str(path[0])
        if top == REST_KEY:
            continue
        if len(path) > 1 and isinstance(path[1], int):
            count = max(len(entries.get(top) or []), path[1] + 1)
            entries[top] = [StoredShards(url, (top, index)) for index in range(count)]
        elif top not in entries:
            entries[top] = StoredShards(url, (top,))
    rest: dict[str, Any] = {}
    if REST_KEY in metadata.state_dict_metadata:  # not in one DCP wrote for another program: its entries are all
        blob = _read_alone(url, REST_KEY)[REST_KEY]
        rest = load_plain(blob.getvalue() if isinstance(blob, io.BytesIO) else blob, f"The {REST_KEY} entry of {url}")
    check()
    if not lazy:
        entries = {key: _full(value) for key, value in entries.items()}
    return {**rest, **entries}, check.manifest


class MemberCheck(NamedTuple):
    """What `check_members` returns: call it to check the files' SHA-256 (see there); `manifest`, the one checked
    against."""

    check: Callable[[], None]
    manifest: dict[str, Any]

    def __call__(self) -> None:
        self.check()


def check_members(url: str | os.PathLike, share: VerifyShare | None = None) -> MemberCheck:
    """For the sharded checkpoint (a directory) at `url`: CheckpointCorrupted now unless every file its manifest
    lists is there with the size recorded and its `.metadata` (read before anything else, by every rank) has the
    SHA-256 recorded; a `check()` that raises it unless the other files' SHA-256 match too (computed in a thread
    meanwhile, while the caller reads them; call `check()` before using anything read), which holds the manifest.
    `UnsafeCheckpoint` for a directory without a manifest: nothing vouches for its files (`trust` gives it one).

    With `share` (the ranks that load it together), each rank hashes its share of the files, and `check()` (called
    by every rank) gathers what each found, so that every rank raises the same error, or none does."""
    directory, name = split(os.fspath(url))
    manifest_url = storage.join(directory, manifest_name(name))
    try:
        manifest = parse_manifest(storage.read_bytes(manifest_url), manifest_url)
    except FileNotFoundError:
        raise UnsafeCheckpoint(
            f"Sharded checkpoint {url} has no manifest ({manifest_url}): it was not committed by tracktrain (a save "
            "cut short, or a directory written by another program), so nothing vouches for its files and it is not "
            f"read. If you trust where it came from, give it a manifest once: `tracktrain trust {url}` (or "
            f"tracktrain.checkpoint.sharded.trust({os.fspath(url)!r})); from then on it loads, checked against it."
        ) from None
    mismatch = size_mismatch(manifest, member_sizes(directory, manifest, storage.file_sizes(directory)))
    if mismatch:
        raise CheckpointCorrupted(
            f"Checkpoint {url} is incomplete: {mismatch} (its manifest {manifest_url} lists every file of the "
            "checkpoint). Nothing was loaded; restore the file from a copy, or load another checkpoint "
            '(Trainer(resume="auto") takes the newest complete one).'
        )
    metadata_member = f"{name}/{METADATA_FILE}"
    recorded = manifest["files"].get(metadata_member)
    if recorded is None:
        raise CheckpointCorrupted(
            f"The manifest {manifest_url} of sharded checkpoint {url} does not list {metadata_member}, which every "
            "sharded checkpoint holds: it was edited or planted, and nothing was read."
        )
    if sha256_of(storage.read_bytes(storage.join(directory, metadata_member))) != recorded["sha256"]:
        raise CheckpointCorrupted(
            f"Checkpoint {url}: {metadata_member} does not match the SHA-256 in its manifest {manifest_url}: altered "
            "or damaged after it was committed. Nothing was read."
        )
    altered: list[str] = []

    members = sorted((member, entry) for member, entry in manifest["files"].items() if member != metadata_member)
    if share is not None:
        members = members[share.rank :: share.world_size]

    def hash_all() -> None:
        for member, expected in members:
            try:
                digest = sha256_of(storage.read_bytes(storage.join(directory, member)))
            except Exception as error:  # noqa: BLE001 - a file that cannot be read is not verified: said by check()
                altered.append(f"{member} (could not be read: {error})")
                continue
            if digest != expected["sha256"]:
                altered.append(member)

    hashing = threading.Thread(target=hash_all, name="tracktrain-checksum")
    hashing.start()

    def check() -> None:
        hashing.join()
        if share is not None:
            altered[:] = [member for found in share.gather(list(altered)) for member in found]
        if altered:
            raise CheckpointCorrupted(
                f"Checkpoint {url}: {', '.join(altered)} does not match the SHA-256 in its manifest {manifest_url}: "
                "altered or damaged after it was committed."
            )

    return MemberCheck(check, manifest)


def trust(url: str | os.PathLike) -> str:
    """Give the sharded checkpoint at `url`, written without a manifest (by `torch.distributed.checkpoint.save`
    itself, another program, or a save whose manifest was lost), a manifest of its files as they are now: the
    user's word that it is trusted (`tracktrain trust URL`). From then on it loads as one tracktrain committed,
    checked against that manifest; it is still read as plain data only. Returns the manifest's URL."""
    url = os.fspath(url)
    if not is_sharded_checkpoint(url):
        raise ValueError(
            f"{url} is not a sharded checkpoint (a directory holding {METADATA_FILE}): only those need a manifest to "
            "be read; a checkpoint file loads without one."
        )
    directory, name = split(url)
    manifest_url = storage.join(directory, manifest_name(name))
    if storage.exists(manifest_url):
        raise FileExistsError(
            f"{url} has a manifest already ({manifest_url}): it loads, checked against it. Remove the manifest "
            "first only if its files were replaced on purpose."
        )
    files = {f"{name}/{member}": storage.read_bytes(storage.join(url, member)) for member in storage.file_sizes(url)}
    # what could never be read is refused now rather than vouched for
    read_dcp_metadata(
        io.BytesIO(files[f"{name}/{METADATA_FILE}"]), f"Sharded checkpoint metadata {url}/{METADATA_FILE}"
    )
    write_manifest(directory, dict(sorted(files.items())), {}, {"trusted": True}, checkpoint_name=name)
    return manifest_url


def _read_alone(url: str, key: str) -> dict[str, Any]:
    """The entry `key` of the checkpoint at `url`, whole, read by this process without talking to other ranks. (The
    public `dcp.load` loads into a copy of the dict it is given, so what this planner builds there would be lost.)"""
    loaded: dict[str, Any] = {}
    planner = _WholeEntryPlanner(url, keys={key})
    with _refusals_as_themselves():
        _load_state_dict(loaded, storage_reader=storage_reader(url), planner=planner, no_dist=True)
    return loaded


@contextlib.contextmanager
def _refusals_as_themselves() -> Iterator[None]:
    """DCP wraps what any rank raised while reading in a CheckpointException: a refusal is raised as itself, on
    every rank, so that callers (and `resume="auto"`) tell it from a failure."""
    try:
        yield
    except CheckpointException as error:
        # each failure is (the error, its stack)
        unsafe = [failure[0] for failure in error.failures.values() if isinstance(failure[0], UnsafeCheckpoint)]
        if unsafe:
            raise unsafe[0] from None
        raise


def _full(value: StoredShards | Sequence[StoredShards]) -> Any:
    return value.full() if isinstance(value, StoredShards) else [shards.full() for shards in value]


def _keyed_by_name(state: Any) -> bool:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    return (
        isinstance(groups, list)
        and bool(groups)
        and all(isinstance(name, str) for group in groups for name in group.get("params", ()))
    )


def by_index(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (torch.distributed.checkpoint's) keyed by index instead: the
    parameters numbered in the order of the parameter groups, as `Optimizer.state_dict()` numbers them."""
    order = [name for group in state["param_groups"] for name in group["params"]]
    index = {name: number for number, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"]]} for group in state["param_groups"]
        ],
    }


def grouped_by_parameter(flat: dict[str, Any]) -> dict[str, Any]:
    """An optimizer's state saved per parameter (`state.<name>.<key>`, `param_groups.<name>.<option>`, torch's
    flattened layout, with `PARAMETER_ORDER_KEY` and `GROUP_OF_KEY` entries) as one keyed by parameter name: its
    groups in their order, their parameters in the model's order (as one process's optimizer holds them)."""
    state: dict[str, dict[str, Any]] = {}
    options: dict[str, dict[str, Any]] = {}
    group_of: dict[str, int] = {}
    for key, value in flat.items():
        kind, _, rest = key.partition(".")
        if kind == GROUP_OF_KEY:
            group_of[rest] = int(value)
        elif kind in ("state", "param_groups"):
            name, _, field = rest.rpartition(".")
            (state if kind == "state" else options).setdefault(name, {})[field] = value
    groups: dict[int, dict[str, Any]] = {}
    for name in flat[PARAMETER_ORDER_KEY]:
        if name in group_of:
            group = groups.setdefault(group_of[name], {**options.get(name, {}), "params": []})
            group["params"].append(name)
    return {"state": state, "param_groups": [groups[index] for index in sorted(groups)]}


def by_parameter_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of `by_index`, for an optimizer whose parameters, in the order of its groups, are `names`."""
    count = sum(len(group["params"]) for group in state["param_groups"])
    if count != len(names):
        raise ValueError(
            f"The checkpoint's optimizer state has {count} parameters, but the optimizer being loaded steps "
            f"{len(names)}: it was saved for another model or another configure_optimizers()."
        )
    return {
        "state": {names[number]: value for number, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[number] for number in group["params"]]} for group in state["param_groups"]
        ],
    }
