"""A checkpoint that does not fit: a real write past a file-size limit (RLIMIT_FSIZE, the same EFBIG/ENOSPC path a
full disk or a quota takes). The error names the checkpoint, the directory and the space left; nothing of the
failed checkpoint stays; the one before is intact and a resume takes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Trainer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_checkpoint_that_does_not_fit_says_where_and_how_much_and_leaves_the_earlier_ones(tmp_path, mode):
    result = subprocess.run(
        [sys.executable, "-m", "tests.trainer._disk_full_script", str(tmp_path), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    directory = tmp_path / "checkpoints"
    assert error.startswith(
        f"ERROR CheckpointWriteError: [Errno 27] Could not write checkpoint checkpoint_16.pt (0.8 MB) to {directory}"
    )
    assert "File too large;" in error and " MB free there." in error
    assert "the checkpoints saved before it are intact" in error and "ModelCheckpoint(dirpath=...)" in error
    # nothing of the failed save, no temporary: only the first epoch's committed checkpoint
    assert sorted(os.listdir(directory)) == ["checkpoint_8.pt", "checkpoint_8.pt.manifest.json"]

    trainer = Trainer(max_epochs=2, enable_progress_bar=False, default_root_dir=tmp_path, loggers=False, resume="auto")
    trainer.fit(Classifier(), make_loader())  # (without the growing callback: its state is not required)
    assert trainer.ckpt_path == str(directory / "checkpoint_8.pt")
    assert trainer.global_step == 16


def test_a_manifest_that_cannot_be_written_takes_its_data_file_with_it(tmp_path, monkeypatch):
    """The data file is written, its manifest is not (injected: the second write of the save fails with ENOSPC, which
    a file-size limit cannot single out): the data file is removed, not left as an orphan without a manifest."""
    import errno

    import torch

    from tracktrain import storage
    from tracktrain.checkpoint.savers import CheckpointWriteError, FsspecSaver

    saver = FsspecSaver(tmp_path, manifest=True)
    saver({"model": {"w": torch.ones(3)}}, "checkpoint_1.pt")
    real_write = storage.write_bytes_atomic

    def full_at_the_manifest(url, data):
        if str(url).endswith(".manifest.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(url, data)

    monkeypatch.setattr(storage, "write_bytes_atomic", full_at_the_manifest)
    with pytest.raises(
        CheckpointWriteError,
        match=r"Could not write checkpoint checkpoint_2.pt .*No space left on "
        r"device; [\d.]+ MB free there",
    ) as caught:
        saver({"model": {"w": torch.zeros(3)}}, "checkpoint_2.pt")
    assert caught.value.errno == errno.ENOSPC
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1.pt", "checkpoint_1.pt.manifest.json"]
