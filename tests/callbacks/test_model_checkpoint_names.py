"""`ModelCheckpoint` as Lightning names it (issue 35): `filename="{epoch}-{val_loss:.2f}"` names the top-k files by the
values at each save, `best_model_path`/`best_model_score` are the best kept one's, `save_top_k=-1`/`0` keep all/none,
and `trainer.checkpoint_callback` is the first one among the callbacks."""

from __future__ import annotations

import os

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer
from tracktrain.callbacks import ModelCheckpoint


class ValLosses(Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_validation_epoch_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.values.append(float(trainer.callback_metrics["val_loss"]))


def _trainer(root, checkpoint, **options) -> Trainer:
    options = {"enable_progress_bar": False, "loggers": False, "num_sanity_val_steps": 0, **options}
    return Trainer(default_root_dir=root, callbacks=[checkpoint, *options.pop("callbacks", [])], **options)


def _files(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".pt"))


@pytest.mark.parametrize("mode", ["min", "max"])  # max keeps the worst epochs: the best is then not the latest
def test_files_are_named_by_the_template_and_best_model_path_is_the_best(tmp_path, mode):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{epoch}-{val_loss:.2f}", monitor="val_loss", save_top_k=2, mode=mode
    )
    losses = ValLosses()
    trainer = _trainer(tmp_path, checkpoint, max_epochs=4, callbacks=[losses])
    trainer.fit(Classifier(lr=0.5), make_loader(), make_loader(n=32, seed=1))

    assert len(losses.values) == 4 and len(set(losses.values)) == 4
    ranked = sorted(range(4), key=lambda epoch: losses.values[epoch], reverse=mode == "min")  # worst first
    expected = [f"epoch={epoch}-val_loss={losses.values[epoch]:.2f}.pt" for epoch in ranked[-2:]]
    assert _files(tmp_path / "ckpt") == sorted(expected)
    assert trainer.checkpoint_callback is checkpoint
    assert checkpoint.best_model_path == str(tmp_path / "ckpt" / expected[-1])
    assert checkpoint.best_model_score.item() == pytest.approx(losses.values[ranked[-1]], rel=1e-5)


def test_step_and_names_without_metric_names_and_versions_of_a_name_already_kept(tmp_path):
    by_step = ModelCheckpoint(
        dirpath=tmp_path / "steps",
        filename="s{step}",
        every_n_train_steps=4,
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    _trainer(tmp_path, by_step, max_epochs=1).fit(Classifier(), make_loader())
    assert _files(tmp_path / "steps") == ["s4.pt", "s8.pt"]  # -1: all kept, as in Lightning

    same = ModelCheckpoint(dirpath=tmp_path / "same", filename="{epoch}", every_n_train_steps=3, save_top_k=None)
    _trainer(tmp_path, same, max_epochs=1).fit(Classifier(), make_loader())
    assert _files(tmp_path / "same") == ["epoch=0-v1.pt", "epoch=0.pt"]  # one epoch, two saves: none overwritten


def test_retention_of_templated_names_continues_after_a_resume(tmp_path):
    def fit(epochs: int) -> ModelCheckpoint:
        checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{epoch}-{step}", save_top_k=2)
        _trainer(tmp_path, checkpoint, max_epochs=epochs, resume="auto").fit(Classifier(), make_loader())
        return checkpoint

    fit(2)
    assert _files(tmp_path / "ckpt") == ["epoch=0-step=8.pt", "epoch=1-step=16.pt"]
    resumed = fit(4)
    assert _files(tmp_path / "ckpt") == ["epoch=2-step=24.pt", "epoch=3-step=32.pt"]  # the resumed-from ones deleted
    assert resumed.best_model_path.endswith("epoch=3-step=32.pt") and resumed.best_model_score is None  # no monitor


def test_save_top_k_zero_keeps_only_the_last(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{epoch}", save_top_k=0, save_last=True)
    _trainer(tmp_path, checkpoint, max_epochs=2).fit(Classifier(), make_loader())
    assert _files(tmp_path / "ckpt") == ["last_checkpoint_16.pt"] and checkpoint.best_model_path is None


def test_a_field_nothing_logged_is_an_error_naming_what_was(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{epoch}-{val_acc:.2f}")
    with pytest.raises(ValueError, match=r"names \['val_acc'\], which nothing logged.*'epoch'.*'train_loss'"):
        _trainer(tmp_path, checkpoint, max_epochs=1).fit(Classifier(), make_loader())
    assert _files(tmp_path / "ckpt") == []


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"filename": "{epoch"}, ValueError, "not a valid template"),
        ({"filename": "{}-{0}"}, ValueError, "field without a name"),
        ({"filename": "runs/{epoch}"}, ValueError, "give the directory as dirpath"),
        ({"filename": 3}, TypeError, r"filename=\.\.\.\) must be a non-empty str"),
        ({"filename_prefix": "{epoch}"}, ValueError, r"is ModelCheckpoint\(filename=\.\.\.\)"),
        ({"filename": "{epoch}", "filename_prefix": "run"}, ValueError, "not with filename="),
        ({"save_top_k": -2}, ValueError, r"save_top_k=\.\.\.\).*-1 or None for all"),
        ({"auto_insert_metric_name": "no"}, TypeError, "auto_insert_metric_name"),
    ],
)
def test_bad_names_are_refused_when_built(options, error, says):
    with pytest.raises(error, match=says):
        ModelCheckpoint(**options)


def test_checkpoint_callback_is_none_without_one(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, enable_checkpointing=False, loggers=False)
    assert trainer.checkpoint_callback is None
    assert isinstance(Trainer(default_root_dir=tmp_path, loggers=False).checkpoint_callback, ModelCheckpoint)


class LogsItsRank(Classifier):
    def train_step(self, batch, batch_idx):
        self.log("rank_value", float(self.global_rank))  # differs between ranks: no sync_dist
        return super().train_step(batch, batch_idx)


def _fit_on_rank(out: str) -> None:
    import json

    import torch.distributed as dist

    checkpoint = ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), filename="{epoch}-{rank_value:.0f}")
    _trainer(out, checkpoint, max_epochs=1, strategy="ddp").fit(LogsItsRank(), make_loader())
    with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as file:
        json.dump(checkpoint.best_model_path, file)


@pytest.mark.distributed
def test_every_rank_names_the_file_as_rank_zero_does(tmp_path):
    import json

    from tracktrain.distributed.collectives import spawn

    spawn(_fit_on_rank, 2, args=(str(tmp_path),))
    paths = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert paths[0] == paths[1] == str(tmp_path / "ckpt" / "epoch=0-rank_value=0.pt")
    assert _files(tmp_path / "ckpt") == ["epoch=0-rank_value=0.pt"]
