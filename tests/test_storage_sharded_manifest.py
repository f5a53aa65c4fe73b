"""The manifest of a sharded checkpoint (a directory `name/` of files, listed as `name/file`), without processes:
discovery checks every member's size, a member altered after the commit is found when read, the start-of-run sweep
removes a directory a killed save left without a manifest, removal takes the whole directory, and a manifest may
list no file outside its own checkpoint's directory. Locally and on memory:// (an object store's layout)."""

from __future__ import annotations

import json
import uuid

import pytest

from tracktrain import storage
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.manifest import (
    CheckpointCorrupted,
    parse_manifest,
    remove_checkpoint,
    remove_uncommitted,
    write_manifest,
)
from tracktrain.checkpoint.sharded import check_members

SHARDS = {".metadata": b"m" * 10, "__0_0.distcp": b"a" * 100, "__1_0.distcp": b"b" * 120}


@pytest.fixture(params=["local", "memory"])
def directory(request, tmp_path) -> str:
    return str(tmp_path / "ckpt") if request.param == "local" else f"memory://sharded-{uuid.uuid4().hex[:8]}/ckpt"


def _sharded(directory: str, name: str, step: int, commit: bool = True) -> None:
    storage.makedirs(storage.join(directory, name))
    for member, data in SHARDS.items():
        storage.write_bytes(storage.join(storage.join(directory, name), member), data)
    if commit:
        files = {f"{name}/{member}": data for member, data in SHARDS.items()}
        write_manifest(directory, files, {"global_step": step}, checkpoint_name=name)


def test_a_committed_sharded_checkpoint_is_found_and_checked_member_by_member(directory):
    _sharded(directory, "checkpoint_3.dcp", 3)
    _sharded(directory, "checkpoint_6.dcp", 6)
    found, problems = committed_checkpoints(directory)
    assert [checkpoint.data_filename for checkpoint in found] == ["checkpoint_6.dcp", "checkpoint_3.dcp"]
    assert problems == []
    check_members(found[0].url)()  # sizes and checksums match

    # a shard cut short: not committed any more, and said so
    storage.write_bytes(storage.join(directory, "checkpoint_6.dcp/__1_0.distcp"), b"b" * 60)
    found, problems = committed_checkpoints(directory)
    assert [checkpoint.data_filename for checkpoint in found] == ["checkpoint_3.dcp"]
    assert "checkpoint_6.dcp/__1_0.distcp is 60 bytes, its manifest says 120" in problems[0]

    # one altered in place, same size: found when read
    storage.write_bytes(storage.join(directory, "checkpoint_3.dcp/__0_0.distcp"), b"x" * 100)
    with pytest.raises(CheckpointCorrupted, match=r"__0_0.distcp does not match the SHA-256"):
        check_members(storage.join(directory, "checkpoint_3.dcp"))()


def test_removal_takes_the_whole_directory_manifest_first(directory):
    _sharded(directory, "checkpoint_3.dcp", 3)
    _sharded(directory, "checkpoint_6.dcp", 6)
    remove_checkpoint(directory, "checkpoint_3.dcp")
    assert storage.subdirectories(directory) == ["checkpoint_6.dcp"]
    assert [checkpoint.data_filename for checkpoint in committed_checkpoints(directory)[0]] == ["checkpoint_6.dcp"]


def test_the_sweep_removes_a_directory_a_killed_save_left_without_its_manifest(directory):
    _sharded(directory, "checkpoint_3.dcp", 3)
    _sharded(directory, "checkpoint_6.dcp", 6, commit=False)  # every shard written, killed before the manifest
    _sharded(directory, "notes.dcp", 0, commit=False)  # not a name the handler gives: left alone
    owned = lambda name: name.startswith("checkpoint_")  # noqa: E731
    removed = remove_uncommitted(directory, owned)
    assert removed == ["checkpoint_6.dcp"]
    assert storage.subdirectories(directory) == ["checkpoint_3.dcp", "notes.dcp"]
    # the one a run was told to resume from is never swept
    _sharded(directory, "checkpoint_9.dcp", 9, commit=False)
    assert remove_uncommitted(directory, owned, keep={"checkpoint_9.dcp"}) == []


@pytest.mark.parametrize(
    "listed",
    ["other.dcp/__0_0.distcp", "checkpoint_3.dcp/../x", "checkpoint_3.dcp/a/b", "/abs/path", "checkpoint_3.dcp/"],
)
def test_a_manifest_lists_no_file_outside_its_checkpoint(listed):
    manifest = {
        "format": "tracktrain-checkpoint/1",
        "created": 1.0,
        "files": {listed: {"bytes": 1, "sha256": "0" * 64}},
        "summary": {},
        "metadata": {},
    }
    with pytest.raises(CheckpointCorrupted, match="a name in field 'files'|a listing that includes"):
        parse_manifest(json.dumps(manifest).encode(), "/x/checkpoint_3.dcp.manifest.json")


def test_ranks_reading_together_share_the_checksums_and_all_learn_what_any_found(directory):
    from tracktrain.checkpoint.sharded import VerifyShare

    _sharded(directory, "checkpoint_3.dcp", 3)
    url = storage.join(directory, "checkpoint_3.dcp")
    storage.write_bytes(storage.join(url, "__0_0.distcp"), b"x" * 100)  # altered, same size
    # what each of 2 ranks hashes: every 2nd file but .metadata, which every rank checks before reading it
    members = sorted(f"checkpoint_3.dcp/{name}" for name in SHARDS if name != ".metadata")
    assert members[0::2] == ["checkpoint_3.dcp/__0_0.distcp"]  # rank 0's share
    # rank 1 hashes __1_0 (intact): alone it finds nothing...
    check_members(url, VerifyShare(1, 2, lambda mine: [mine]))()
    # ...but it learns what rank 0 found, as rank 0 does: both raise the same error
    found_by_rank_0 = ["checkpoint_3.dcp/__0_0.distcp"]
    with pytest.raises(CheckpointCorrupted, match=r"__0_0.distcp does not match the SHA-256"):
        check_members(url, VerifyShare(1, 2, lambda mine: [found_by_rank_0, mine]))()
    with pytest.raises(CheckpointCorrupted, match=r"__0_0.distcp does not match the SHA-256"):
        check_members(url, VerifyShare(0, 2, lambda mine: [mine, []]))()


def test_a_sharded_save_lists_its_files_when_dcp_returns_metadata_without_storage_data(tmp_path, monkeypatch):
    """torch 2.11's `save` (seen on an H200) returns the metadata without its storage data: the manifest must
    still list every file the save wrote, and the checkpoint load back."""
    import dataclasses

    import torch
    import torch.distributed.checkpoint.state_dict_saver as dcp_saver

    from tracktrain.checkpoint.sharded_saver import ShardedSaver

    real_save = dcp_saver.save
    monkeypatch.setattr(dcp_saver, "save", lambda *a, **k: dataclasses.replace(real_save(*a, **k), storage_data=None))
    weights = {"weight": torch.arange(6.0).reshape(2, 3)}
    ShardedSaver(str(tmp_path))({"model": weights, "step": 4}, "checkpoint_4.dcp")
    url = str(tmp_path / "checkpoint_4.dcp.manifest.json")
    manifest = parse_manifest(storage.read_bytes(url), url)
    on_disk = {f"checkpoint_4.dcp/{path.name}" for path in (tmp_path / "checkpoint_4.dcp").iterdir()}
    assert set(manifest["files"]) == on_disk and "checkpoint_4.dcp/.metadata" in on_disk
    found, problems = committed_checkpoints(str(tmp_path))
    assert [checkpoint.data_filename for checkpoint in found] == ["checkpoint_4.dcp"] and problems == []
