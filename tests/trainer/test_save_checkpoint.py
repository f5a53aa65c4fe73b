"""`trainer.save_checkpoint(path)` (Lightning's habit, issue 35): a complete checkpoint of the run, written by the same
code as `ModelCheckpoint`'s, that `load_from_checkpoint` and `fit(ckpt_path=...)` read, with the module's and the
callbacks' `on_save_checkpoint` hooks run also after the fit that attached them has ended."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

from tracktrain import Callback, LoopModule
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.state import read_checkpoint

from ._tasks import Classifier, make_loader


def quiet_trainer(root, **options):
    from tracktrain import Trainer

    options = {"enable_progress_bar": False, "enable_checkpointing": False, "loggers": False, **options}
    return Trainer(default_root_dir=root, **options)


class Remembers(Classifier):
    """Saves hparams, and adds its own entry to every checkpoint it is in (Lightning's on_save_checkpoint)."""

    def __init__(self, lr: float = 0.1, width: int = 3) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.saves = 0

    def on_save_checkpoint(self, checkpoint):
        self.saves += 1
        checkpoint["module_extra"] = {"saves": self.saves}


class Adds(Callback):
    def __init__(self) -> None:
        self.saves = 0
        self.started_at: list[int] = []

    def on_save_checkpoint(self, trainer, module, checkpoint):
        self.saves += 1
        checkpoint["callback_extra"] = trainer.global_step

    def on_train_start(self, trainer, module):
        self.started_at.append(trainer.global_step)


def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in module.state_dict().items()}


def test_a_checkpoint_saved_after_fit_loads_back_with_its_weights_hparams_and_hook_state(tmp_path):
    adds = Adds()
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[adds])
    module = Remembers(lr=0.2, width=5)
    trainer.fit(module, make_loader())
    path = tmp_path / "manual" / "after_fit.ckpt"
    trainer.save_checkpoint(path)

    assert (module.saves, adds.saves) == (1, 1)  # the hooks ran once, after the fit that had attached them
    states = read_checkpoint(path)
    assert states["trainer"]["module_extra"] == {"saves": 1} and states["trainer"]["callback_extra"] == 8
    assert states["trainer"]["global_step"] == 8 and set(states) >= {"model", "optimizers", "train_engine"}
    committed, _ = committed_checkpoints(tmp_path / "manual")  # a manifest commits it, as ModelCheckpoint's
    assert [checkpoint.data_filename for checkpoint in committed] == ["after_fit.ckpt"]
    assert committed[0].summary["global_step"] == 8

    loaded = Remembers.load_from_checkpoint(path)
    assert loaded.hparams == {"lr": 0.2, "width": 5}
    trained = _weights(module)
    assert all(torch.equal(value, trained[key]) for key, value in loaded.state_dict().items())


def test_save_checkpoint_weights_only_loads_back_and_is_refused_as_a_resume_point(tmp_path):
    """Lightning's trainer.save_checkpoint(path, weights_only=True): the weights, class and hparams; no optimizer."""
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    module = Remembers(lr=0.2, width=5)
    trainer.fit(module, make_loader())
    path = tmp_path / "manual" / "weights.ckpt"
    trainer.save_checkpoint(path, weights_only=True)

    states = read_checkpoint(path)
    assert "optimizers" not in states and states["trainer"]["weights_only"] is True
    loaded = Remembers.load_from_checkpoint(path)
    assert loaded.hparams == {"lr": 0.2, "width": 5}
    assert all(torch.equal(value, _weights(module)[key]) for key, value in loaded.state_dict().items())
    with pytest.raises(ValueError, match="weights"):
        quiet_trainer(tmp_path / "again", max_epochs=2).fit(Remembers(lr=0.2, width=5), make_loader(), ckpt_path=path)


def test_fit_resumes_from_a_saved_checkpoint_at_its_step_as_an_uninterrupted_fit(tmp_path):
    first = quiet_trainer(tmp_path, max_epochs=1, seed=1)
    first.fit(Classifier(), make_loader(shuffle=True))
    path = str(tmp_path / "epoch1.pt")
    first.save_checkpoint(path)

    adds = Adds()
    resumed, module = quiet_trainer(tmp_path, max_epochs=2, seed=1, callbacks=[adds]), Classifier()
    resumed.fit(module, make_loader(shuffle=True), ckpt_path=path)
    assert adds.started_at == [8] and resumed.global_step == 16 and resumed.ckpt_path == path

    straight, reference = quiet_trainer(tmp_path, max_epochs=2, seed=1), Classifier()
    straight.fit(reference, make_loader(shuffle=True))
    expected = _weights(reference)
    assert all(torch.equal(value, expected[key]) for key, value in module.state_dict().items())


class SavesAtEpochEnd(Callback):
    def __init__(self, directory) -> None:
        self.directory = directory

    def on_train_epoch_end(self, trainer, module):
        trainer.save_checkpoint(os.path.join(self.directory, f"epoch{trainer.current_epoch}.pt"))


def test_a_save_during_the_fit_runs_each_hook_once(tmp_path):
    module, adds = Remembers(), Adds()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[adds, SavesAtEpochEnd(str(tmp_path / "during"))])
    trainer.fit(module, make_loader())
    assert (module.saves, adds.saves) == (2, 2)  # not attached a second time while the fit's are
    assert read_checkpoint(tmp_path / "during" / "epoch1.pt")["trainer"]["module_extra"] == {"saves": 2}


def test_a_save_that_fails_leaves_no_checkpoint(tmp_path):
    class Fails(Callback):
        def on_save_checkpoint(self, trainer, module, checkpoint):
            raise RuntimeError("hook failed")

    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(Classifier(), make_loader())
    trainer.callbacks.append(Fails())
    with pytest.raises(RuntimeError, match="hook failed"):
        trainer.save_checkpoint(tmp_path / "out" / "never.pt")
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []  # nothing written, not a part
    trainer.callbacks.pop()
    trainer.save_checkpoint(tmp_path / "out" / "then.pt")  # the failed save's hooks were detached again
    assert [c.data_filename for c in committed_checkpoints(tmp_path / "out")[0]] == ["then.pt"]


def test_save_checkpoint_before_any_fit_or_with_a_bad_path_is_an_error(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    with pytest.raises(RuntimeError, match=r"no module to save yet.*trainer\.fit"):
        trainer.save_checkpoint(tmp_path / "x.pt")
    with pytest.raises(TypeError, match=r"save_checkpoint\(filepath=\.\.\.\).*got 3"):
        trainer.save_checkpoint(3)


def test_saving_to_memory_storage(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    module = Remembers()
    trainer.fit(module, make_loader())
    url = f"memory://{tmp_path.name}/saved/model.pt"
    trainer.save_checkpoint(url)
    assert isinstance(LoopModule.load_from_checkpoint(url), Remembers)
    assert json.dumps(read_checkpoint(url)["trainer"]["module_extra"]) == '{"saves": 1}'


def _fit_and_save_on_rank(out: str) -> None:
    trainer = quiet_trainer(out, max_epochs=1, strategy="ddp", callbacks=[Adds()])
    trainer.fit(Remembers(), make_loader())
    trainer.save_checkpoint(os.path.join(out, "ddp.pt"))  # every rank: the Trainer's state gathers across them


@pytest.mark.distributed
def test_under_ddp_every_rank_saves_together_and_rank_zero_writes(tmp_path):
    from tracktrain.distributed.collectives import spawn

    spawn(_fit_and_save_on_rank, 2, args=(str(tmp_path),))
    states = read_checkpoint(tmp_path / "ddp.pt")
    assert len(states["trainer"]["rng_states_per_rank"]) == 2 and states["trainer"]["global_step"] == 4
    assert states["trainer"]["module_extra"] == {"saves": 1} and states["trainer"]["callback_extra"] == 4
    assert isinstance(LoopModule.load_from_checkpoint(tmp_path / "ddp.pt"), Remembers)
