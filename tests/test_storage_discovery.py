"""Locations as text (tracktrain/storage/url.py) and the one search for the newest complete checkpoint
(tracktrain/checkpoint/discovery.py): `Checkpoint.get_last_checkpoint` agrees with resume on what is complete."""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest
import torch

from tracktrain import storage
from tracktrain.checkpoint.discovery import committed_checkpoints, resume_candidates
from tracktrain.checkpoint.manifest import manifest_name
from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.handlers import Checkpoint


@pytest.fixture
def memory_dir():
    url = f"memory://discovery-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("runs/a", False),
        ("/runs/a", False),
        ("file:///runs/a", False),
        ("local:///runs/a", False),
        ("memory://runs/a", True),
        ("s3://bucket/a", True),
        ("simplecache::s3://bucket/a", True),
        ("simplecache::file:///runs/a", True),  # a cache in front of the disk is not the disk
    ],
)
def test_is_remote_reads_the_protocols_of_the_text(url, remote):
    assert storage.is_remote(url) is remote


def test_join_and_split_keep_the_kind_of_location():
    assert storage.join("memory://runs/a", "x.pt") == "memory://runs/a/x.pt"
    assert storage.join("memory://runs/a/", "x.pt") == "memory://runs/a/x.pt"
    assert storage.join("runs", "x.pt") == os.path.join("runs", "x.pt")
    assert storage.split("s3://bucket/runs/x.pt") == ("s3://bucket/runs", "x.pt")
    assert storage.split(os.path.join("runs", "x.pt")) == ("runs", "x.pt")
    assert storage.split("x.pt") == (".", "x.pt")
    assert storage.basename("file:///runs/x.pt") == "x.pt"


def test_local_path_is_the_path_as_written_or_none(tmp_path):
    assert storage.local_path("runs/a") == "runs/a"
    assert storage.local_path(f"file://{tmp_path}") == str(tmp_path)
    assert storage.local_path("memory://runs/a") is None


@pytest.mark.parametrize("where", ["local", "memory"])
def test_get_last_checkpoint_takes_only_committed_checkpoints_where_manifests_are_kept(where, tmp_path, memory_dir):
    directory = str(tmp_path) if where == "local" else memory_dir
    saver = FsspecSaver(directory, manifest=True, summarize=lambda checkpoint: {"global_step": checkpoint["step"]})
    for step in (4, 8):
        saver({"step": step, "w": torch.ones(2)}, f"checkpoint_{step}.pt")
    # a save killed between its data file and its manifest: newer by name, but not complete
    storage.write_bytes_atomic(storage.join(directory, "checkpoint_12.pt"), b"data, no manifest yet")
    # one whose file was cut short after its commit
    saver({"step": 16, "w": torch.ones(2)}, "checkpoint_16.pt")
    storage.write_bytes(storage.join(directory, "checkpoint_16.pt"), b"cut")
    newest = storage.join(directory, "checkpoint_8.pt")
    assert Checkpoint.get_last_checkpoint(directory) == newest
    assert [checkpoint.url for checkpoint in committed_checkpoints(directory)[0]] == [
        newest,
        storage.join(directory, "checkpoint_4.pt"),
    ]
    with pytest.warns(UserWarning, match=r"checkpoint_16.pt: checkpoint_16.pt is 3 bytes"):
        assert resume_candidates([directory])[0].url == newest

    # its manifest written at last: now it is the newest, for both
    saver({"step": 12, "w": torch.ones(2)}, "checkpoint_12.pt")
    assert storage.exists(storage.join(directory, manifest_name("checkpoint_12.pt")))
    assert Checkpoint.get_last_checkpoint(directory) == storage.join(directory, "checkpoint_12.pt")
