"""Regression tests for review findings on Checkpoint: nothing is half-loaded, retention stays inside its
directory, a list entry round-trips, get_last_checkpoint reads only its own names, and a key typo is not
silently taken for "the whole file is this object's state"."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch import nn

from tracktrain.engine import Engine, Events, State
from tracktrain.handlers import Checkpoint, DiskSaver, FsspecSaver


def engine_at(iteration: int) -> Engine:
    engine = Engine(lambda e, b: None)
    engine.state = State(iteration=iteration, epoch=0)
    return engine


def snapshot(*objects) -> list:
    """Deep copies of every tensor and value in the objects' states, to prove later that nothing changed."""

    def copy(value):
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [copy(v) for v in value]
        return value

    return [copy(obj.state_dict()) for obj in objects]


def assert_equal_states(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_equal_states(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_equal_states(x, y)
    else:
        assert a == b


# ------------------------------------------------------------------------------- 1. validate before applying
def _trained_adam(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return optimizer


@pytest.mark.parametrize("strict", [True, False])
def test_a_shape_mismatch_loads_nothing_and_names_key_and_shapes(strict):
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3))
    checkpoint = {"model": source.state_dict(), "optimizer": torch.optim.SGD(source.parameters(), lr=0.5).state_dict()}
    target = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))  # the last layer differs
    optimizer = torch.optim.SGD(target.parameters(), lr=0.01)
    before = snapshot(target, optimizer)
    # the optimizer comes first in to_load: it used to be loaded before the model failed
    with pytest.raises(
        RuntimeError,
        match=r"^Error\(s\) in loading state_dict for Sequential:\n\tsize mismatch for "
        r"1\.weight: copying a param with shape torch\.Size\(\[3, 4\]\) from checkpoint, the shape in "
        r"current model is torch\.Size\(\[2, 4\]\)\. Cannot load \['model'\] \(Sequential\).*nothing was",
    ):
        Checkpoint.load_objects({"optimizer": optimizer, "model": target}, checkpoint, strict=strict)
    assert_equal_states(snapshot(target, optimizer), before)
    assert optimizer.param_groups[0]["lr"] == 0.01


def test_strict_key_mismatch_loads_nothing():
    source = nn.Sequential(nn.Linear(4, 2), nn.Linear(2, 1))
    target, counter_model = nn.Sequential(nn.Linear(4, 2)), nn.Linear(1, 1)
    before = snapshot(target, counter_model)
    with pytest.raises(
        RuntimeError,
        match=r'^Error\(s\) in loading state_dict for Sequential:\n\tUnexpected key\(s\) in state_dict: "1\.weight", '
        r'"1\.bias"\..*Cannot load \[\'features\'\]',
    ):
        Checkpoint.load_objects(
            {"head": counter_model, "features": target},
            {"head": nn.Linear(1, 1).state_dict(), "features": source.state_dict()},
        )
    assert_equal_states(snapshot(target, counter_model), before)
    # with strict=False, the keys both have load and the rest are skipped, as nn.Module does
    Checkpoint.load_objects({"features": target}, {"features": source.state_dict()}, strict=False)
    assert torch.equal(target[0].weight, source[0].weight)


def test_an_optimizer_with_other_param_groups_or_state_shapes_loads_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    saved = _trained_adam(model, lr=0.5).state_dict()
    # other parameter groups: the module, listed first, must stay as it was
    target = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    split = torch.optim.Adam([{"params": target[0].parameters()}, {"params": target[1].parameters()}], lr=0.01)
    before = snapshot(target, split)
    with pytest.raises(
        ValueError,
        match=r"^loaded state dict has a different number of parameter groups: the "
        r"checkpoint has 1, the optimizer 2\. Cannot load \['optimizer'\] \(Adam\)",
    ):
        Checkpoint.load_objects(
            {"model": target, "optimizer": split}, {"model": model.state_dict(), "optimizer": saved}
        )
    assert_equal_states(snapshot(target, split), before)
    # same counts, but state of another shape (a resumed optimizer of a different model): refused too
    other = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    other_optimizer = _trained_adam(other, lr=0.01)
    wrong = {**saved, "state": {**saved["state"], 2: {**saved["state"][2], "exp_avg": torch.zeros(7, 4)}}}
    before = snapshot(other, other_optimizer)
    with pytest.raises(
        ValueError,
        match=r"state\[2\]\['exp_avg'\] has shape \(7, 4\) in the checkpoint but "
        r"\(1, 4\) here",
    ):
        Checkpoint.load_objects(
            {"model": other, "optimizer": other_optimizer}, {"model": model.state_dict(), "optimizer": wrong}
        )
    assert_equal_states(snapshot(other, other_optimizer), before)


def test_an_unsafe_retention_list_in_the_file_loads_nothing(tmp_path):
    model = nn.Linear(2, 2)
    target = nn.Linear(2, 2)
    before = snapshot(target)
    checkpointer = Checkpoint({"model": target}, DiskSaver(tmp_path))
    with pytest.raises(ValueError, match=r"names the file '\.\./x\.pt'"):
        Checkpoint.load_objects(
            {"model": target, "checkpointer": checkpointer},
            {"model": model.state_dict(), "checkpointer": {"_saved": [(1, "../x.pt")]}},
        )
    assert_equal_states(snapshot(target), before)
    assert checkpointer.state_dict() == {"_saved": []}


# -------------------------------------------------------------------------------- 2. retention stays inside
@pytest.mark.parametrize("bad", ["ABSOLUTE", "../sibling.pt", "sub/model_1.pt", "..", os.path.join("a", "b.pt")])
def test_load_state_dict_refuses_file_names_outside_the_directory(tmp_path, bad):
    bad = str(tmp_path / "victim.txt") if bad == "ABSOLUTE" else bad
    checkpoint = Checkpoint({"model": nn.Linear(2, 2)}, DiskSaver(tmp_path / "run"), n_saved=1)
    with pytest.raises(ValueError, match=rf"state_dict\['_saved'\] names the file {bad!r}".replace(".", r"\.")):
        checkpoint.load_state_dict({"_saved": [(0, bad)]})
    assert checkpoint.state_dict() == {"_saved": []}
    checkpoint.load_state_dict({"_saved": [(0, "model..v2_0.pt")]})  # ".." inside a plain name is harmless


def test_retention_never_deletes_a_file_outside_the_directory(tmp_path):
    victim = tmp_path / "important.txt"
    victim.write_text("x")
    run = tmp_path / "run"
    checkpoint = Checkpoint({"model": nn.Linear(2, 2)}, DiskSaver(run), n_saved=1)
    with pytest.raises(ValueError):
        checkpoint.load_state_dict({"_saved": [(0, str(victim))]})
    engine = Engine(lambda e, b: None)
    engine.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    engine.run([0, 1], max_epochs=1)
    assert victim.read_text() == "x"
    assert os.listdir(run) == ["model_2.pt"]


@pytest.mark.parametrize("saver_class", [DiskSaver, FsspecSaver])
def test_savers_refuse_names_that_are_not_plain(tmp_path, saver_class):
    victim = tmp_path / "important.txt"
    victim.write_text("x")
    saver = saver_class(tmp_path / "run")
    for bad in [str(victim), "../important.txt", "..", ""]:
        with pytest.raises(ValueError, match="is not a plain file name"):
            saver.remove(bad)
        with pytest.raises(ValueError, match="is not a plain file name"):
            saver({"a": torch.ones(1)}, bad)
    assert victim.read_text() == "x"


# -------------------------------------------------------------------------------- 3. a list entry round-trips
def test_a_single_list_entry_round_trips(tmp_path):
    torch.manual_seed(0)
    models = [nn.Linear(2, 2), nn.Linear(2, 3)]
    checkpoint = Checkpoint({"models": models}, DiskSaver(tmp_path))
    checkpoint(engine_at(iteration=1))
    fresh = [nn.Linear(2, 2), nn.Linear(2, 3)]
    Checkpoint.load_objects({"models": fresh}, checkpoint.last_checkpoint)
    for a, b in zip(models, fresh):
        assert_equal_states(a.state_dict(), b.state_dict())
    with pytest.raises(ValueError, match=r"list of 1 objects"):
        Checkpoint.load_objects({"models": fresh[:1]}, checkpoint.last_checkpoint)
    with pytest.raises(ValueError, match="holds a list, not a dict of state dicts"):
        Checkpoint.load_objects({"model": nn.Linear(2, 2)}, checkpoint.last_checkpoint)


# ----------------------------------------------------------------------------- 4. get_last_checkpoint's names
def test_get_last_checkpoint_skips_score_files_and_other_prefixes(tmp_path):
    latest, prefixed = tmp_path / "latest", tmp_path / "prefixed"
    latest.mkdir(), prefixed.mkdir()
    for name in ["model_300.pt", "best_model_9512.pt", "model_200_9000.pt", "model_acc=9.pt"]:
        (latest / name).write_bytes(b"x")
    assert Checkpoint.get_last_checkpoint(latest) == str(latest / "model_300.pt")
    for name in ["run_model_300.pt", "run_b_model_900.pt", "run_model_5_acc=9000.pt", "runner_model_999.pt"]:
        (prefixed / name).write_bytes(b"x")
    assert Checkpoint.get_last_checkpoint(prefixed, "run") == str(prefixed / "run_model_300.pt")
    assert Checkpoint.get_last_checkpoint(prefixed, "run_b") == str(prefixed / "run_b_model_900.pt")


# --------------------------------------------------------------------------- 5. a key typo is not swallowed
def test_a_key_absent_from_a_multi_object_file_is_missing_not_the_whole_file():
    torch.manual_seed(0)
    source, target = nn.Linear(2, 2), nn.Linear(2, 2)
    before = snapshot(target)
    checkpoint = {"model": source.state_dict(), "optimizer": {}}
    with pytest.raises(
        ValueError,
        match=r"^Key 'net' from to_load is not found in the checkpoint dict: dict_keys\(\['model', 'optimizer'\]\)",
    ):
        Checkpoint.load_objects({"net": target}, checkpoint)
    with pytest.warns(UserWarning, match=r"no state for \['net'\] \(it holds \['model', 'optimizer'\]\)"):
        Checkpoint.load_objects({"net": target}, checkpoint, strict=False)
    assert_equal_states(snapshot(target), before)


def test_a_single_objects_own_state_still_loads_under_any_key(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    optimizer = _trained_adam(nn.Sequential(nn.Linear(4, 1)), lr=0.5)  # its state: {"state": {...}, ...}
    fresh_optimizer = torch.optim.Adam(nn.Sequential(nn.Linear(4, 1)).parameters(), lr=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Checkpoint.load_objects({"anything": fresh_optimizer}, optimizer.state_dict())
        fresh = nn.Linear(2, 2)
        Checkpoint.load_objects({"anything": fresh}, model.state_dict())
    assert fresh_optimizer.param_groups[0]["lr"] == 0.5
    assert_equal_states(fresh.state_dict(), model.state_dict())
