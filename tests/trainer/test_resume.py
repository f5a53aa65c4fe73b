"""Trainer(resume="auto") and fit(ckpt_path="last"): the newest committed checkpoint, skipping incomplete or
damaged ones, retention around the resumed-from checkpoint, and the errors for an explicitly named bad file."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.manifest import CheckpointCorrupted
from tracktrain.checkpoint.run_settings import ResumeMismatch

from ._tasks import Classifier, checkpoint_files, make_loader, quiet


def run_trainer(tmp_path, max_epochs, callbacks=(), **kwargs):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=4, save_top_k=2, save_last=2)
    options = quiet(
        tmp_path, max_epochs=max_epochs, seed=3, resume="auto", callbacks=[checkpoint, *callbacks], **kwargs
    )
    return Trainer(**options), checkpoint


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("crash")


def uninterrupted(tmp_path, epochs=3):
    module = Classifier()
    trainer, _ = run_trainer(tmp_path / "full", epochs)
    trainer.fit(module, make_loader(shuffle=True))
    return module


def assert_same_parameters(a, b):
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x, y)


def test_resume_auto_starts_fresh_then_continues_bit_identical(tmp_path):
    reference = uninterrupted(tmp_path)
    trainer, checkpoint = run_trainer(tmp_path, 3, callbacks=[StopAt(14)])
    with pytest.raises(RuntimeError, match="crash"):
        trainer.fit(Classifier(), make_loader(shuffle=True))  # 8 steps per epoch: crashes mid-epoch 2
    assert trainer.ckpt_path is None  # there was nothing to resume from

    again, _ = run_trainer(tmp_path, 3)
    module = Classifier()
    again.fit(module, make_loader(shuffle=True))
    assert again.ckpt_path.endswith("last_checkpoint_12.pt")  # the newest committed one
    assert again.global_step == 24
    assert_same_parameters(module, reference)


def test_resume_skips_a_checkpoint_without_manifest_and_one_that_does_not_match_it(tmp_path):
    trainer, checkpoint = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader(shuffle=True))
    directory = tmp_path / "ckpt"
    assert checkpoint_files(directory) == [
        "checkpoint_4.pt",
        "checkpoint_8.pt",
        "last_checkpoint_4.pt",
        "last_checkpoint_8.pt",
    ]
    # a writer killed before its manifest: never considered
    (directory / "last_checkpoint_99.pt").write_bytes((directory / "last_checkpoint_8.pt").read_bytes())
    # the newest committed ones damaged after their commit: one truncated, one with a flipped byte
    for name in ("last_checkpoint_8.pt", "checkpoint_8.pt"):
        data = bytearray((directory / name).read_bytes())
        if name.startswith("last"):
            data = data[:-10]
        else:
            data[len(data) // 2] ^= 0xFF
        (directory / name).write_bytes(bytes(data))

    again, _ = run_trainer(tmp_path, 2)
    with pytest.warns(UserWarning) as caught:
        again.fit(Classifier(), make_loader(shuffle=True))
    messages = " ".join(str(w.message) for w in caught)
    assert "last_checkpoint_8.pt" in messages and "truncated" in messages
    assert "checkpoint_8.pt" in messages and "SHA-256" in messages
    assert again.ckpt_path.endswith("checkpoint_4.pt")
    assert again.global_step == 16


@pytest.mark.parametrize("damage, message", [("truncate", "truncated"), ("flip", "SHA-256")])
def test_a_damaged_checkpoint_named_explicitly_is_refused_with_its_name(tmp_path, damage, message):
    trainer, checkpoint = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader())
    path = tmp_path / "ckpt" / "checkpoint_8.pt"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[100] ^= 0x01
    path.write_bytes(bytes(data))
    module = Classifier()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(CheckpointCorrupted, match=rf"checkpoint_8\.pt.*{message}"):
        Trainer(**quiet(tmp_path, max_epochs=2)).fit(module, make_loader(), ckpt_path=path)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))  # nothing was loaded


def test_ckpt_path_last_without_checkpoints_warns_and_starts_fresh(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "none")]))
    with pytest.warns(UserWarning, match=r'ckpt_path="last"\) found no complete checkpoint'):
        trainer.fit(Classifier(), make_loader(), ckpt_path="last")
    assert trainer.ckpt_path is None and trainer.global_step == 8


def test_retention_keeps_top_k_and_last_n_the_resumed_from_one_included(tmp_path):
    class Scored(Classifier):
        """val_score rises then falls, so the best checkpoints are early ones."""

        def eval_step(self, batch, batch_idx):
            self.log("val_score", float([5, 9, 7, 1, 2, 3][self.current_epoch]))

    def trainer(epochs):
        checkpoint = ModelCheckpoint(
            dirpath=tmp_path / "ckpt", monitor="val_score", mode="max", save_top_k=2, save_last=2
        )
        return Trainer(
            **quiet(tmp_path, max_epochs=epochs, limit_train_batches=2, limit_val_batches=1, callbacks=[checkpoint])
        ), checkpoint

    first, _ = trainer(3)
    first.fit(Scored(), make_loader(), make_loader())
    # epochs of 2 steps score 5, 9, 7: the best two are 9 (step 4) and 7 (step 6)
    assert checkpoint_files(tmp_path / "ckpt") == [
        "checkpoint_4_val_score=9.0000.pt",
        "checkpoint_6_val_score=7.0000.pt",
        "last_checkpoint_4.pt",
        "last_checkpoint_6.pt",
    ]
    # resume from an older last checkpoint: it counts like any other once newer ones are committed (issue 15)
    resumed, _ = trainer(6)
    resumed.fit(Scored(), make_loader(), make_loader(), ckpt_path=tmp_path / "ckpt" / "last_checkpoint_4.pt")
    assert checkpoint_files(tmp_path / "ckpt") == [
        "checkpoint_4_val_score=9.0000.pt",
        "checkpoint_6_val_score=7.0000.pt",
        "last_checkpoint_10.pt",
        "last_checkpoint_12.pt",
    ]


def test_only_checkpoints_and_stale_temporaries_of_writers_are_ever_deleted(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "notes.txt").write_text("mine")
    (tmp_path / "ckpt" / "other_model_3.pt").write_bytes(b"someone else's")
    (tmp_path / "ckpt" / ".my.tmp").write_text("mine too")
    (tmp_path / "ckpt" / ".checkpoint_4.pt.0123456789ab.tmp").write_bytes(b"half a checkpoint")  # a killed write
    (tmp_path / "ckpt" / ".tracktrain-write-probe-0123456789ab").write_bytes(b"a killed write probe")
    (tmp_path / "ckpt" / ".tracktrain-write-probe-notes").write_text("not a probe's name")
    (tmp_path / "elsewhere.pt").write_bytes(b"outside")
    trainer, _ = run_trainer(tmp_path, 2)
    trainer.fit(Classifier(), make_loader())
    names = os.listdir(tmp_path / "ckpt")
    assert {"notes.txt", "other_model_3.pt", ".my.tmp", ".tracktrain-write-probe-notes"} <= set(names)
    assert ".checkpoint_4.pt.0123456789ab.tmp" not in names
    assert ".tracktrain-write-probe-0123456789ab" not in names
    assert (tmp_path / "elsewhere.pt").read_bytes() == b"outside"


def test_checkpoint_files_a_killed_save_left_without_a_manifest_are_deleted_at_the_next_start(tmp_path):
    trainer, checkpoint = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader())  # 8 steps: checkpoints at 4 and 8
    directory = tmp_path / "ckpt"
    # a kill between a data file's commit and its manifest, and one in the middle of a deletion (manifest first)
    (directory / "last_checkpoint_12.pt").write_bytes(b"committed data, no manifest yet")
    (directory / "checkpoint_4.pt.manifest.json").unlink()
    # a file without a manifest that the run is told to resume from, and one named as this callback never names
    (directory / "checkpoint_2.pt").write_bytes((directory / "last_checkpoint_8.pt").read_bytes())
    (directory / "model_4.pt").write_bytes(b"not a name this callback writes")
    again, _ = run_trainer(tmp_path, 2)
    with pytest.warns(UserWarning, match=r"Deleted \['checkpoint_4.pt', 'last_checkpoint_12.pt'\].*without a manifest"):
        again.fit(Classifier(), make_loader(), ckpt_path=directory / "checkpoint_2.pt")
    assert again.global_step == 16
    names = set(os.listdir(directory))
    assert "checkpoint_4.pt" not in names
    assert {"model_4.pt", "checkpoint_2.pt", "last_checkpoint_12.pt.manifest.json"} <= names  # 12 saved anew
    assert not [
        name
        for name in names
        if name.endswith(".pt")
        and f"{name}.manifest.json" not in names
        and name not in ("model_4.pt", "checkpoint_2.pt")
    ]


def test_manifest_summarizes_the_run(tmp_path, without_tensorboard):
    trainer, checkpoint = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader())
    manifest = json.loads((tmp_path / "ckpt" / "last_checkpoint_8.pt.manifest.json").read_text())
    assert manifest["summary"]["global_step"] == 8 and manifest["summary"]["epoch"] == 1
    assert manifest["summary"]["iteration"] == 8 and manifest["summary"]["samples_seen"] == 64
    assert manifest["summary"]["run_ids"] == {"csv": "version_0"}  # the tracker runs it continues
    size = (tmp_path / "ckpt" / "last_checkpoint_8.pt").stat().st_size
    assert manifest["files"] == {
        "last_checkpoint_8.pt": {"bytes": size, "sha256": manifest["files"]["last_checkpoint_8.pt"]["sha256"]}
    }


def test_a_checkpoint_of_another_model_lists_the_mismatched_keys(tmp_path):
    trainer, checkpoint = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader())

    class Wider(Classifier):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 3)
            self.extra = torch.nn.Linear(2, 2)

    with pytest.raises(ResumeMismatch, match=r"module/class: 'Classifier' -> '.*Wider'"):  # refused first
        Trainer(**quiet(tmp_path, max_epochs=2)).fit(Wider(), make_loader(), ckpt_path=checkpoint.last_model_path)
    with pytest.raises(
        RuntimeError,
        match=r"^Error\(s\) in loading state_dict for Wider:\n\tMissing key\(s\) in state_dict: "
        r'"extra\.weight", "extra\.bias"\..*last_checkpoint_8\.pt: nothing was loaded',
    ):
        Trainer(**quiet(tmp_path, max_epochs=2, resume_with_changes=True)).fit(
            Wider(), make_loader(), ckpt_path=checkpoint.last_model_path
        )


def test_the_top_k_and_the_latest_checkpoint_of_one_step_hold_the_same_state(tmp_path):
    files = {}
    for mode in (True, False):
        checkpoint = ModelCheckpoint(
            dirpath=tmp_path / str(mode), every_n_train_steps=3, save_top_k=1, save_last=True, async_save=mode
        )
        Trainer(**quiet(tmp_path, max_epochs=1, seed=0, callbacks=[checkpoint])).fit(Classifier(), make_loader())
        files[mode] = {
            name: torch.load(tmp_path / str(mode) / name, weights_only=False)
            for name in checkpoint_files(tmp_path / str(mode))
        }
    assert list(files[True]) == list(files[False]) == ["checkpoint_6.pt", "last_checkpoint_6.pt"]
    for mode in (True, False):
        top, last = files[mode]["checkpoint_6.pt"], files[mode]["last_checkpoint_6.pt"]
        for part in ("model", "optimizers", "train_engine"):  # "trainer" holds each handler's own list of files
            flat_top, flat_last = (
                torch.utils._pytree.tree_leaves(top[part]),
                torch.utils._pytree.tree_leaves(last[part]),
            )
            assert len(flat_top) == len(flat_last)
            assert all(
                torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(flat_top, flat_last)
            )
    for key, value in files[True]["last_checkpoint_6.pt"]["model"].items():  # and the same as a blocking save's
        assert torch.equal(value, files[False]["last_checkpoint_6.pt"]["model"][key])


def test_async_and_blocking_saves_write_the_same_checkpoints(tmp_path):
    states = {}
    for mode in (True, False):
        checkpoint = ModelCheckpoint(
            dirpath=tmp_path / str(mode), every_n_train_steps=3, save_top_k=None, async_save=mode
        )
        Trainer(**quiet(tmp_path, max_epochs=1, seed=0, callbacks=[checkpoint])).fit(Classifier(), make_loader())
        states[mode] = {
            name: torch.load(tmp_path / str(mode) / name, weights_only=True)["model"]
            for name in checkpoint_files(tmp_path / str(mode))
        }
    assert list(states[True]) == list(states[False]) == ["checkpoint_3.pt", "checkpoint_6.pt"]
    for name in states[True]:
        for key, value in states[True][name].items():
            assert torch.equal(value, states[False][name][key])
    assert not torch.equal(states[True]["checkpoint_3.pt"]["net.weight"], states[True]["checkpoint_6.pt"]["net.weight"])


def test_warnings_do_not_leak_from_a_clean_resume(tmp_path):
    trainer, _ = run_trainer(tmp_path, 1)
    trainer.fit(Classifier(), make_loader())
    again, _ = run_trainer(tmp_path, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again.fit(Classifier(), make_loader())
    assert again.ckpt_path.endswith("last_checkpoint_8.pt")


@pytest.mark.parametrize("async_save", [True, False])
def test_loggers_that_keep_checkpoints_get_every_committed_one_before_their_run_ends(tmp_path, async_save):
    from tracktrain.loggers import Logger

    class Recorder(Logger):
        name = "recorder"
        log_checkpoints = True
        run_id = None

        def __init__(self):
            self.artifacts = []

        def start(self, root_dir): ...
        def log_hyperparams(self, params): ...
        def log_metrics(self, metrics, step): ...
        def finalize(self, status):
            self.artifacts.append("finalized")

        def log_artifact(self, local_path, artifact_path=None, step=None):
            assert os.path.isfile(local_path) and os.path.isfile(local_path + ".manifest.json")  # committed
            self.artifacts.append((os.path.basename(local_path), step))

    recorder = Recorder()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=None, async_save=async_save)
    Trainer(**quiet(tmp_path, max_epochs=3, loggers=[recorder], callbacks=[checkpoint])).fit(
        Classifier(), make_loader()
    )
    assert recorder.artifacts == [
        ("checkpoint_8.pt", 8),
        ("checkpoint_16.pt", 16),
        ("checkpoint_24.pt", 24),
        "finalized",
    ]
