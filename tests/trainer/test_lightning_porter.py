"""scripts/lightning_port/port.py rewrites a Lightning program's imports and the documented renames, nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PORTER = Path(__file__).resolve().parents[2] / "scripts" / "lightning_port" / "port.py"


def _porter():
    spec = importlib.util.spec_from_file_location("lightning_port", PORTER)
    assert spec is not None and spec.loader is not None
    porter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(porter)
    return porter


def test_imports_and_the_four_renames_change_and_nothing_else():
    program = (
        "import lightning as L\n"
        "import pytorch_lightning as pl\n"
        "import lightning.pytorch as lp\n"
        "from lightning.pytorch import LightningDataModule, LightningModule, Trainer\n"
        "from pytorch_lightning.callbacks import ModelCheckpoint\n"
        "from lightning.pytorch.loggers import CSVLogger\n"
        "    from lightning.pytorch.utilities import rank_zero_only\n"
        "from lightning.pytorch.cli import LightningCLI\n"
        "import lightning_utilities\n"
        "class Net(L.LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        self.training_step_outputs = []  # not the method's name\n"
        "        return self.validation_step(batch, batch_idx)\n"
        "    def eval_step(self, batch, batch_idx, prefix):  # the program's own\n"
        "cb = lightning.pytorch.callbacks.EarlyStopping('val_loss')\n"
        "print('lightning stays lightning in text', check_val_every_n_epoch)\n"
    )
    assert _porter().ported_source(program).splitlines() == [
        "import tracktrain as L",
        "import tracktrain as pl",
        "import tracktrain as lp",
        "from tracktrain import DataModule, LoopModule, Trainer",
        "from tracktrain.callbacks import ModelCheckpoint",
        "from tracktrain.loggers import CSVLogger",
        "    from tracktrain.utilities import rank_zero_only",
        "from tracktrain.cli import LightningCLI",
        "import lightning_utilities",
        "class Net(L.LoopModule):",
        "    def train_step(self, batch, batch_idx):",
        "        self.training_step_outputs = []  # not the method's name",
        "        return self.eval_step(batch, batch_idx)",
        "    def shared_eval_step(self, batch, batch_idx, prefix):  # the program's own",
        "cb = tracktrain.callbacks.EarlyStopping('val_loss')",
        "print('lightning stays lightning in text', check_val_every_n_epoch)",
    ]


def test_losses_are_compared_while_the_batches_agree():
    porter = _porter()
    theirs = [{"loss": 1.0, "batch": 3.0}, {"loss": 0.5, "batch": 4.0}, {"loss": 0.4, "batch": 5.0}]
    same = [{"loss": 1.0, "batch": 3.0}, {"loss": 0.5 + 1e-6, "batch": 4.0}, {"loss": 0.9, "batch": 6.0}]
    found, worst, parted = porter.compare(theirs, same, 1e-4)
    assert (found, parted) == ("", 2) and worst == pytest.approx(2e-6)  # the third step read another batch
    found, _, _ = porter.compare(theirs, [{"loss": 1.1, "batch": 3.0}], 1e-4)
    assert found.startswith("step 0: loss 1.0 (Lightning) vs 1.1")
    assert porter.markdown_code.__doc__
