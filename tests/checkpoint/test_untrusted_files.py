"""A checkpoint cannot run code: a code-running payload planted in each file a checkpoint holds (a full `.pt`, a
sharded one's `.metadata` and its data files, a manifest, the lease), each with a manifest forged to match, driven
through every path that reads one — `LoopModule.load_from_checkpoint` (the base class and a subclass),
`fit(ckpt_path=...)`, `Checkpoint.load_objects`, `resume="auto"` and the command line's inspect, convert and runs.
The payload never runs, every path gives a clear error naming the file, and auto-resume continues from the newest
safe checkpoint with a warning naming the one it passed over. Also: the module class a checkpoint records is never
imported on its word, and a manifest that claims another step than its data is caught."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint import lease
from tracktrain.checkpoint.manifest import CheckpointCorrupted, UnsafeCheckpoint, manifest_name, write_manifest
from tracktrain.checkpoint.sharded import REST_KEY, storage_writer, trust
from tracktrain.checkpoint.sharded_saver import write_sharded
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.handlers import Checkpoint
from tracktrain_integrations.cli import main as tracktrain_command

from ..trainer._tasks import Classifier, make_loader, quiet


class Payload:
    """Unpickled, it creates the file `marker`: what a planted checkpoint would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / "PAYLOAD-RAN"
    yield path
    assert not path.exists(), "a planted checkpoint ran its code"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run's checkpoint directory: committed full checkpoints at steps 8 and 16 (one module for the tests, which
    copy it)."""
    root = tmp_path_factory.mktemp("trained")
    checkpoint = ModelCheckpoint(dirpath=root / "checkpoints", every_n_train_steps=8, save_top_k=-1)
    trainer = Trainer(**quiet(root, max_epochs=2, seed=0, callbacks=[checkpoint]))
    trainer.fit(Classifier(), make_loader())
    return root / "checkpoints"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run's checkpoint directory, for the test to plant files in."""
    directory = tmp_path / "checkpoints"
    shutil.copytree(trained, directory)
    return directory


def newest(directory: Path) -> str:
    return max(
        (name for name in os.listdir(directory) if name.endswith(".pt")), key=lambda n: os.path.getmtime(directory / n)
    )


def commit(directory: Path, name: str, summary: dict) -> None:
    """A manifest that matches the planted files (an attacker can write one as easily as the files)."""
    target = directory / name
    if target.is_dir():
        files = {f"{name}/{member}": (target / member).read_bytes() for member in sorted(os.listdir(target))}
    else:
        files = {name: target.read_bytes()}
    write_manifest(str(directory), files, summary, {}, checkpoint_name=name)


def plant_full(directory: Path, marker: Path, step: int = 99) -> str:
    """A `.pt` checkpoint whose model entry unpickles to the payload, committed as the newest."""
    name = f"checkpoint_{step}.pt"
    buffer = io.BytesIO()
    torch.save({"model": Payload(marker), "trainer": {"global_step": step}}, buffer)
    (directory / name).write_bytes(buffer.getvalue())
    commit(directory, name, {"global_step": step})
    return name


def plant_sharded_metadata(directory: Path, marker: Path, source: str, step: int = 99) -> str:
    """A sharded checkpoint converted from a real one, whose `.metadata` is the payload, committed as the newest."""
    name = f"checkpoint_{step}.dcp"
    states = dict(read_checkpoint(directory / source))
    write_sharded(states, str(directory / name), {"global_step": step})
    (directory / manifest_name(name)).unlink()
    (directory / name / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    commit(directory, name, {"global_step": step})
    return name


def plant_sharded_entry(directory: Path, marker: Path, source: str, step: int = 99) -> str:
    """A sharded checkpoint with real metadata whose entry of what is not sharded (which DCP pickles into its data
    file, and reads back with `torch.load(weights_only=False)`) unpickles to the payload, committed as the newest."""
    name = f"checkpoint_{step}.dcp"
    states = dict(read_checkpoint(directory / source))
    saved = {"model": states["model"], REST_KEY: Payload(marker)}
    torch.distributed.checkpoint.state_dict_saver.save(
        saved, storage_writer=storage_writer(str(directory / name)), no_dist=True
    )
    commit(directory, name, {"global_step": step})
    return name


PLANTS = {"full": plant_full, "sharded metadata": plant_sharded_metadata, "sharded entry": plant_sharded_entry}


def plant(kind: str, directory: Path, marker: Path) -> str:
    source = newest(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "torch.distributed is not initialized, assuming one process"
        return PLANTS[kind](directory, marker) if kind == "full" else PLANTS[kind](directory, marker, source)


@pytest.mark.parametrize("kind", list(PLANTS))
def test_no_load_path_runs_a_planted_payload_and_each_names_the_file(kind, run, marker, capsys):
    planted = run / plant(kind, run, marker)
    refusal = rf"{planted.name}.* (holds|could not)"

    with pytest.raises(UnsafeCheckpoint, match=refusal):
        LoopModule.load_from_checkpoint(planted)
    with pytest.raises(UnsafeCheckpoint, match=refusal):
        Classifier.load_from_checkpoint(planted)
    with pytest.raises(UnsafeCheckpoint, match=refusal):
        Checkpoint.load_objects({"model": Classifier()}, str(planted))
    trainer = Trainer(**quiet(run.parent / "explicit", max_epochs=3))
    with pytest.raises(UnsafeCheckpoint, match=refusal):
        trainer.fit(Classifier(), make_loader(), ckpt_path=planted)

    capsys.readouterr()
    assert tracktrain_command(["inspect", str(planted)]) == 2
    assert tracktrain_command(["convert", str(planted), str(run / "converted.pt")]) == 2
    said = capsys.readouterr().err
    assert said.count(f"{planted}") >= 2 and "Traceback" not in said
    assert not (run / "converted.pt").exists()
    assert tracktrain_command(["runs", str(run.parent)]) == 0  # lists it from its manifest, reads nothing of it


@pytest.mark.parametrize("kind", list(PLANTS))
def test_auto_resume_passes_over_a_planted_checkpoint_to_the_newest_safe_one(kind, run, marker):
    planted = plant(kind, run, marker)
    checkpoint = ModelCheckpoint(dirpath=run, every_n_train_steps=8, save_top_k=-1)
    trainer = Trainer(**quiet(run.parent, max_epochs=3, seed=0, resume="auto", callbacks=[checkpoint]))
    with pytest.warns(UserWarning, match=rf"Skipping checkpoint .*{planted}"):
        trainer.fit(Classifier(), make_loader())
    assert trainer.ckpt_path.endswith("checkpoint_16.pt") and trainer.global_step == 24


def test_a_manifest_or_lease_holding_a_pickle_is_not_trusted_and_runs_nothing(run, marker):
    payload = pickle.dumps(Payload(marker))
    (run / manifest_name("checkpoint_16.pt")).write_bytes(payload)  # the newest checkpoint's manifest
    (run / lease.LEASE_NAME).write_bytes(payload)
    with pytest.raises(CheckpointCorrupted, match="not valid JSON"):
        Checkpoint.load_objects({"model": Classifier()}, str(run / "checkpoint_16.pt"))
    checkpoint = ModelCheckpoint(dirpath=run, every_n_train_steps=8, save_top_k=-1)
    trainer = Trainer(**quiet(run.parent, max_epochs=3, seed=0, resume="auto", callbacks=[checkpoint]))
    with pytest.warns(UserWarning, match=r"checkpoint_16.pt.manifest.json is not valid JSON"):
        trainer.fit(Classifier(), make_loader())
    assert trainer.ckpt_path.endswith("checkpoint_8.pt")


def test_a_sharded_checkpoint_without_a_manifest_is_read_only_once_trusted(run, marker):
    name = plant("sharded metadata", run, marker)
    (run / manifest_name(name)).unlink()
    with pytest.raises(UnsafeCheckpoint, match=rf"has no manifest.*tracktrain trust {run / name}"):
        Classifier.load_from_checkpoint(run / name)
    with pytest.raises(UnsafeCheckpoint, match="pickled builtins.exec"):
        trust(run / name)  # what could never be read is not vouched for
    assert not (run / manifest_name(name)).exists()

    good = run / "foreign.dcp"  # written by DCP itself, without tracktrain's manifest
    states = dict(read_checkpoint(run / "checkpoint_16.pt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.distributed.checkpoint.state_dict_saver.save(
            {"model": states["model"]}, storage_writer=storage_writer(str(good)), no_dist=True
        )
    with pytest.raises(UnsafeCheckpoint, match="has no manifest"):
        read_checkpoint(good)
    assert tracktrain_command(["trust", str(good)]) == 0
    assert torch.equal(read_checkpoint(good)["model"]["net.weight"], states["model"]["net.weight"])
    (good / "__0_0.distcp").write_bytes(b"x" * (good / "__0_0.distcp").stat().st_size)  # changed afterwards
    with pytest.raises(CheckpointCorrupted, match="does not match the SHA-256"):
        read_checkpoint(good)


def test_the_module_class_a_checkpoint_names_is_never_imported_on_its_word(run, tmp_path, monkeypatch):
    planted_module = tmp_path / "planted_module.py"
    planted_module.write_text(f"open({str(tmp_path / 'IMPORTED')!r}, 'w').close()\nclass Anything: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    states = dict(read_checkpoint(run / "checkpoint_16.pt"))
    states["trainer"]["module_class"] = "planted_module:Anything"
    buffer = io.BytesIO()
    torch.save(states, buffer)
    (run / "checkpoint_16.pt").write_bytes(buffer.getvalue())
    commit(run, "checkpoint_16.pt", {"global_step": 16})

    with pytest.raises(TypeError, match=r"planted_module:Anything, which is not a LoopModule this program has"):
        LoopModule.load_from_checkpoint(run / "checkpoint_16.pt")
    assert not (tmp_path / "IMPORTED").exists() and "planted_module" not in sys.modules
    # the class it names, once the program imported it, is found among LoopModule's subclasses
    states["trainer"]["module_class"] = f"{Classifier.__module__}:{Classifier.__qualname__}"
    buffer = io.BytesIO()
    torch.save(states, buffer)
    (run / "checkpoint_16.pt").write_bytes(buffer.getvalue())
    commit(run, "checkpoint_16.pt", {"global_step": 16})
    assert type(LoopModule.load_from_checkpoint(run / "checkpoint_16.pt")) is Classifier


def test_a_manifest_claiming_a_later_step_is_caught_and_the_real_newest_resumed(run):
    manifest_path = run / manifest_name("checkpoint_8.pt")
    manifest = json.loads(manifest_path.read_text())
    manifest["summary"]["global_step"] = 999  # now it sorts first: resuming it would lose steps 9-16
    manifest_path.write_text(json.dumps(manifest))
    checkpoint = ModelCheckpoint(dirpath=run, every_n_train_steps=8, save_top_k=-1)
    trainer = Trainer(**quiet(run.parent, max_epochs=3, seed=0, resume="auto", callbacks=[checkpoint]))
    with pytest.warns(
        UserWarning, match=r"checkpoint_8.pt: its manifest records global_step 999 \(the state read: 8\)"
    ):
        trainer.fit(Classifier(), make_loader())
    assert trainer.ckpt_path.endswith("checkpoint_16.pt") and trainer.global_step == 24


def test_load_objects_leaves_everything_untouched_when_a_module_entry_is_not_a_tensor():
    model, optimizer_owner = nn.Linear(2, 2), nn.Linear(2, 2)
    optimizer = torch.optim.SGD(optimizer_owner.parameters(), lr=0.1)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    state = {
        "model": {"weight": torch.ones(2, 2), "bias": "not a tensor"},
        "optimizer": {
            **optimizer.state_dict(),
            "param_groups": [{**optimizer.param_groups[0], "lr": 5.0, "params": [0, 1]}],
        },
    }
    with pytest.raises(
        RuntimeError, match=r'parameter named "bias", expected torch.Tensor .* received <class \'str\'>'
    ):
        Checkpoint.load_objects({"model": model, "optimizer": optimizer}, state)
    assert all(torch.equal(model.state_dict()[key], value) for key, value in before.items())
    assert optimizer.param_groups[0]["lr"] == 0.1
