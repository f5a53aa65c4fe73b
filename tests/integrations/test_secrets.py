"""Secrets never leave the process in clear: a password in MLflow's tracking URI, a W&B API key and the S3 secret key
are planted in one fit (MLflow on a real server, W&B offline, checkpoints on moto's S3), and searched for in
everything the fit printed (stdout, stderr: MLflow's own "View run at" lines included) and wrote (the run's folder,
W&B's files, the MLflow server's store and artifacts, every object in the bucket)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ..conftest import S3_SECRET

PASSWORD = "planted-mlflow-password-3f9c1d"
WANDB_KEY = "planted-wandb-key-" + "7" * 22  # W&B's keys are 40 characters

SCRIPT = """
import os, sys, torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain_integrations.mlflow import MLflowLogger
from tracktrain_integrations.wandb import WandbLogger


class Model(LoopModule):
    def __init__(self):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(4, 2)

    def train_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


uri, password = open(sys.argv[1]).read().split()  # not on the command line, which W&B records
mlflow = MLflowLogger(tracking_uri=uri, experiment_name="secrets", log_checkpoints=True)
assert "@" not in mlflow.tracking_uri, "the logger shows its URI without credentials"
data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
trainer = Trainer(
    max_epochs=2,
    log_every_n_steps=1,
    default_root_dir=sys.argv[2],
    enable_progress_bar=False,
    loggers=[mlflow, WandbLogger(project="secrets")],
    callbacks=[ModelCheckpoint(dirpath=sys.argv[3], every_n_train_steps=2)],
)
trainer.fit(Model(), DataLoader(data, batch_size=8))
# the client got the credentials the way MLflow reads them (a comparison: the value itself is never printed)
print("credentials handed to MLflow:", os.environ.get("MLFLOW_TRACKING_PASSWORD") == password)
"""


def _files_under(*roots: Path) -> dict[Path, bytes]:
    found = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_file():
                    found[path] = path.read_bytes()
    return found


def test_no_planted_secret_is_printed_or_written_by_a_fit(mlflow_server, s3_bucket, s3_admin, tmp_path):
    wandb_dirs = {name: tmp_path / "wandb-home" / name for name in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR")}
    environment = {
        **os.environ,
        **{f"WANDB_{name}": str(path) for name, path in wandb_dirs.items()},
        "WANDB_MODE": "offline",
        "WANDB_API_KEY": WANDB_KEY,
        "WANDB_BASE_URL": "http://127.0.0.1:9",  # nothing listens: no traffic leaves
    }
    environment.pop("MLFLOW_TRACKING_PASSWORD", None)
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    given = tmp_path / "given"  # what the user gives, outside what the fit writes
    given.mkdir()
    (given / "uri").write_text(mlflow_server.url.replace("http://", f"http://alice:{PASSWORD}@") + f" {PASSWORD}")
    checkpoints = f"{s3_bucket}/checkpoints"
    result = subprocess.run(
        [sys.executable, str(script), str(given / "uri"), str(tmp_path / "run"), checkpoints],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "credentials handed to MLflow: True" in result.stdout
    assert "View run" in result.stdout + result.stderr  # MLflow's own line, printed with the bare URI
    written = _files_under(tmp_path / "run", tmp_path / "wandb-home", mlflow_server.root)
    objects = {path: s3_admin.cat_file(path) for path in s3_admin.find(checkpoints)}
    assert any(path.endswith(".manifest.json") for path in objects) and written  # the fit did write
    for secret in (PASSWORD, WANDB_KEY, S3_SECRET):
        assert secret not in result.stdout and secret not in result.stderr, f"{secret[:12]}... was printed"
        leaked = [str(path) for path, data in {**written, **objects}.items() if secret.encode() in data]
        assert not leaked, f"{secret[:12]}... was written to {leaked}"
