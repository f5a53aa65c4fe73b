"""`ModelCheckpoint(save_weights_only=True)`, Lightning's (issue 35): its files hold the module's weights, class and
hparams only — enough for `load_from_checkpoint` and `trainer.test(ckpt_path=...)` — committed by a manifest; a fit
never resumes from one half-restored (`fit(ckpt_path=...)` refuses it, `resume="auto"` passes it over)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.state import read_checkpoint


class Saved(Classifier):
    def __init__(self, lr: float = 0.1, width: int = 2) -> None:
        super().__init__(lr)
        self.save_hyperparameters()


class StartsAt(Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_train_start(self, trainer, module):
        self.steps.append(trainer.global_step)


def _trainer(root, *callbacks, **options) -> Trainer:
    options = {"enable_progress_bar": False, "loggers": False, "num_sanity_val_steps": 0, "max_epochs": 2, **options}
    return Trainer(default_root_dir=root, callbacks=list(callbacks), **options)


def _only(directory) -> str:
    (checkpoint,) = committed_checkpoints(directory)[0]
    return checkpoint.url


def test_weights_only_files_hold_the_weights_class_and_hparams_and_load_back(tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True, async_save=False)
    module = Saved(lr=0.3, width=7)
    trainer = _trainer(tmp_path, callback)
    trainer.fit(module, make_loader(), make_loader(n=16))

    (committed,) = committed_checkpoints(tmp_path / "w")[0]  # committed by a manifest, which says what it is
    assert committed.summary["weights_only"] is True
    assert (committed.summary["global_step"], committed.summary["epoch"]) == (16, 2)
    states = read_checkpoint(committed.url)
    assert set(states) == {"model", "trainer"}  # no optimizer, scheduler, engine or callback state
    assert states["trainer"]["weights_only"] is True and "callbacks" not in states["trainer"]
    full = ModelCheckpoint(dirpath=tmp_path / "full", async_save=False)
    _trainer(tmp_path / "other", full).fit(Saved(), make_loader(), make_loader(n=16))
    assert os.path.getsize(committed.url) < os.path.getsize(_only(tmp_path / "full"))

    loaded = LoopModule.load_from_checkpoint(callback.best_model_path)
    assert isinstance(loaded, Saved) and loaded.hparams == {"lr": 0.3, "width": 7}
    trained = module.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in loaded.state_dict().items())

    fresh = Saved()
    (result,) = _trainer(tmp_path, enable_checkpointing=False).validate(
        fresh, make_loader(n=16), ckpt_path=committed.url
    )
    assert all(torch.equal(value, trained[key]) for key, value in fresh.state_dict().items())


def test_the_best_weights_only_checkpoint_is_what_validate_best_loads(tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path / "w", monitor="val_loss", save_weights_only=True, save_top_k=1)
    trainer = _trainer(tmp_path, callback, max_epochs=3)
    trainer.fit(Saved(), make_loader(), make_loader(n=16))
    best = LoopModule.load_from_checkpoint(callback.best_model_path)
    trainer.validate(ckpt_path="best", dataloaders=make_loader(n=16))
    trained = trainer.module.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in best.state_dict().items())


def test_trainer_checkpoints_save_weights_only_writes_the_same_kind_of_file(tmp_path):
    """`Trainer.save_checkpoint(path, weights_only=True)`, Lightning's."""
    trainer = _trainer(tmp_path, enable_checkpointing=False)
    trainer.fit(Saved(lr=0.2), make_loader())
    path = str(tmp_path / "manual" / "weights.ckpt")
    trainer.save_checkpoint(path, weights_only=True)
    assert set(read_checkpoint(path)) == {"model", "trainer"}
    assert committed_checkpoints(tmp_path / "manual")[0][0].summary["weights_only"] is True
    assert LoopModule.load_from_checkpoint(path).hparams == {"lr": 0.2, "width": 2}
    with pytest.raises(TypeError, match=r"weights_only=\.\.\.\) must be True or False"):
        trainer.save_checkpoint(tmp_path / "manual" / "x.ckpt", weights_only="yes")


def test_fit_naming_a_weights_only_checkpoint_is_refused_before_anything_loads(tmp_path):
    _trainer(tmp_path, ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True)).fit(Saved(), make_loader())
    module = Saved()
    before = {key: value.clone() for key, value in module.state_dict().items()}
    with pytest.raises(ValueError, match=r"weights-only.*no optimizer.*load_from_checkpoint"):
        _trainer(tmp_path / "again").fit(module, make_loader(), ckpt_path=_only(tmp_path / "w"))
    assert all(torch.equal(value, before[key]) for key, value in module.state_dict().items())


def test_resume_auto_takes_the_newest_full_checkpoint_and_passes_weights_only_ones_over(tmp_path):
    def callbacks():
        return [
            ModelCheckpoint(dirpath=tmp_path / "full", every_n_epochs=2),
            ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True),
        ]

    _trainer(tmp_path, *callbacks(), max_epochs=3).fit(Saved(), make_loader())  # full at step 16, weights at 24
    starts = StartsAt()
    _trainer(tmp_path, *callbacks(), starts, max_epochs=4, resume="auto").fit(Saved(), make_loader())
    assert starts.steps == [16]


def test_resume_auto_with_only_weights_only_checkpoints_starts_a_new_run_and_says_why(tmp_path):
    _trainer(tmp_path, ModelCheckpoint(save_weights_only=True)).fit(Saved(), make_loader())
    starts = StartsAt()
    trainer = _trainer(tmp_path, ModelCheckpoint(save_weights_only=True), starts, resume="auto")
    with pytest.warns(UserWarning, match=r"Starting a new run: the only complete checkpoints.*weights-only"):
        trainer.fit(Saved(), make_loader())
    assert starts.steps == [0]


def test_a_pre_emption_save_of_a_weights_only_callback_is_full_and_resumes(tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True, save_top_k=0, async_save=False)
    trainer = _trainer(tmp_path, callback, max_epochs=1)
    trainer.fit(Saved(), make_loader())
    callback.save_now(trainer)
    assert "optimizers" in read_checkpoint(callback.last_model_path)
    starts = StartsAt()
    again = ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True, save_top_k=0)
    _trainer(tmp_path, again, starts, resume="auto").fit(Saved(), make_loader())
    assert starts.steps == [8]


def test_save_weights_only_must_be_a_bool():
    with pytest.raises(TypeError, match=r"save_weights_only=\.\.\.\) must be True or False, got 'yes'"):
        ModelCheckpoint(save_weights_only="yes")


def _fit_sharded_weights_only(out: str) -> None:
    import json

    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from tests.trainer.test_lightning_habits import Net, _outputs

    callback = ModelCheckpoint(dirpath=os.path.join(out, "w"), save_weights_only=True)
    module = Net(width=6, depth=3)
    _trainer(out, callback, max_epochs=1, strategy="fsdp", seed=3).fit(module, make_loader(n=32))
    trained = Net(width=6, depth=3)  # the trained weights, gathered with torch's own API
    trained.load_state_dict(get_model_state_dict(module, options=StateDictOptions(full_state_dict=True)))
    if dist.get_rank() == 0:
        with open(os.path.join(out, "sharded.json"), "w") as file:
            json.dump({"path": callback.best_model_path, "outputs": _outputs(trained)}, file)


@pytest.mark.distributed
def test_fsdp_weights_only_checkpoints_are_sharded_load_back_and_are_refused_by_fit(tmp_path):
    import json

    from tests.trainer.test_lightning_habits import Net, _outputs
    from tracktrain.distributed.collectives import spawn

    spawn(_fit_sharded_weights_only, 2, args=(str(tmp_path),))
    saved = json.loads((tmp_path / "sharded.json").read_text())
    assert saved["path"].endswith(".dcp") and committed_checkpoints(tmp_path / "w")[0][0].summary["weights_only"]
    assert _outputs(Net.load_from_checkpoint(saved["path"])) == saved["outputs"]
    with pytest.raises(ValueError, match=r"weights-only"):
        _trainer(tmp_path / "again").fit(Net(width=6, depth=3), make_loader(n=32), ckpt_path=saved["path"])
