"""The six conformance behaviours issue 48 lists, each run under Ignite 0.5.5 and here: the same (a loader without
`.dataset`, a scaler without AMP, TPU without torch_xla), or a deliberate difference that docs/migration/ignite.md
lists and this test pins (DeterministicEngine.state_dict's keys, include_self with one object, DiskSaver's temporary
file name)."""

from __future__ import annotations

import os
import re

import pytest
import torch

import tracktrain.engine as ours
import tracktrain.handlers as our_handlers

ignite_engine = pytest.importorskip("ignite.engine")
ignite_handlers = pytest.importorskip("ignite.handlers")


class NoDataset:
    """Data with a length but no `.dataset`, `.sampler` or `.batch_sampler` (not a DataLoader)."""

    def __iter__(self):
        return iter([1, 2, 3])

    def __len__(self):
        return 3


@pytest.mark.parametrize("engine_name", ["Engine", "DeterministicEngine"])
def test_a_loader_without_dataset_runs_as_in_ignite(engine_name):
    runs = []
    for module in (ignite_engine, ours):
        seen = []
        engine = getattr(module, engine_name)(lambda e, batch: seen.append(batch))
        state = engine.run(NoDataset(), max_epochs=2)
        runs.append((state.iteration, state.epoch, seen))
    assert runs[1] == runs[0] == (6, 2, [1, 2, 3, 1, 2, 3])


def test_deterministic_state_dict_has_ignites_keys_and_more_and_loads_ignites():
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    theirs = ignite_engine.DeterministicEngine(lambda e, b: b)
    theirs.run(loader, max_epochs=1)
    mine = ours.DeterministicEngine(lambda e, b: b)
    mine.run(loader, max_epochs=1)
    their_keys, our_keys = list(theirs.state_dict()), list(mine.state_dict())
    assert our_keys[: len(their_keys)] == their_keys  # Ignite's, in Ignite's order
    assert our_keys[len(their_keys) :] == ["seed", "data_pass"]  # the deliberate addition (the migration page)
    resumed = ours.DeterministicEngine(lambda e, b: b)
    with pytest.warns(UserWarning, match="has no 'seed'"):  # an Ignite-written state loads, saying what it lacks
        resumed.load_state_dict(theirs.state_dict())
    assert resumed.run(loader, max_epochs=2).iteration == 8


def test_a_scaler_without_amp_is_refused_as_in_ignite():
    model = torch.nn.Linear(2, 1)
    for module in (ignite_engine, ours):
        for scaler in (True, torch.amp.GradScaler("cpu")):
            with pytest.raises(
                ValueError, match=r"scaler argument is .*, but amp_mode is None\. Consider using amp_mode='amp'"
            ):
                module.create_supervised_trainer(
                    model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.MSELoss(), scaler=scaler
                )


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch_xla") is not None, reason="torch_xla is installed")
def test_tpu_without_torch_xla_fails_as_in_ignite():
    model = torch.nn.Linear(2, 1)
    for module in (ignite_engine, ours):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(RuntimeError, match="In order to run on TPU, please install PyTorch XLA"):
            module.create_supervised_trainer(model, optimizer, torch.nn.MSELoss(), device="xla")
        with pytest.raises(ModuleNotFoundError, match="torch_xla cannot be imported, please install PyTorch XLA"):
            module.supervised_training_step_tpu(model, optimizer, torch.nn.MSELoss())


class One:
    def __init__(self):
        self.loaded = None

    def state_dict(self):
        return {"v": 1}

    def load_state_dict(self, state):
        self.loaded = state


def test_include_self_with_one_object_keeps_the_object_whole(tmp_path):
    """Ignite puts `checkpointer` into the one object's own state (its load_state_dict then sees a key it does not
    know); here the file holds both under their names (the migration page's row), and loads back."""
    for name, handlers, engine_module in (("ignite", ignite_handlers, ignite_engine), ("ours", our_handlers, ours)):
        folder = tmp_path / name
        checkpoint = handlers.Checkpoint({"model": One()}, handlers.DiskSaver(folder), include_self=True)
        engine = engine_module.Engine(lambda e, b: b)
        engine.run([0], max_epochs=1)
        checkpoint(engine)
    (their_file,) = os.listdir(tmp_path / "ignite")
    (our_file,) = os.listdir(tmp_path / "ours")
    assert their_file == our_file
    assert set(torch.load(tmp_path / "ignite" / their_file, weights_only=False)) == {"v", "checkpointer"}
    saved = torch.load(tmp_path / "ours" / our_file, weights_only=False)
    assert set(saved) == {"model", "checkpointer"}
    target = One()
    our_handlers.Checkpoint.load_objects({"model": target}, saved)
    assert target.loaded == {"v": 1}


def test_disk_saver_writes_through_a_hidden_temporary_named_after_the_file(tmp_path, monkeypatch):
    """Both write a temporary file in the directory and rename it into place. Ignite's is `tmpXXXXXXXX`, and stays
    when the rename fails; ours is `.<file>.<12 hex>.tmp` (the migration page's row): hidden, named after the
    checkpoint it would have become (a crash's leftover says what it was), and removed when the rename fails."""
    renamed = []
    real_replace = os.replace

    def failing_replace(source, target):
        renamed.append(os.path.basename(source))
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    for name, handlers in (("ignite", ignite_handlers), ("ours", our_handlers)):
        with pytest.raises(OSError, match="disk gone"):
            handlers.DiskSaver(tmp_path / name, atomic=True)({"w": torch.ones(2)}, "model_1.pt")
    monkeypatch.setattr(os, "replace", real_replace)
    their_temporary, our_temporary = renamed
    assert os.listdir(tmp_path / "ignite") == [their_temporary]  # Ignite's stays behind
    assert os.listdir(tmp_path / "ours") == []  # ours does not, and no partial checkpoint either
    assert re.fullmatch(r"tmp\w+", their_temporary)
    assert re.fullmatch(r"\.model_1\.pt\.[0-9a-f]{12}\.tmp", our_temporary)
    our_handlers.DiskSaver(tmp_path / "ours", atomic=True)({"w": torch.ones(2)}, "model_1.pt")
    assert os.listdir(tmp_path / "ours") == ["model_1.pt"]
