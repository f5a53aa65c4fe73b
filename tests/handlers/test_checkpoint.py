"""Checkpoint, DiskSaver, FsspecSaver and ModelCheckpoint: names, retention, round trips, loading, bad input.

Real components throughout: local directories, fsspec's memory://, torch objects, tracktrain engines, and
PyTorch-Ignite's own Checkpoint as the oracle for file names and retention.
"""

from __future__ import annotations

import copy
import itertools
import os
import uuid
from collections import OrderedDict

import fsspec
import pytest
import torch
from torch import nn

from tracktrain import storage
from tracktrain.engine import DeterministicEngine, Engine, Events, State
from tracktrain.handlers import Checkpoint, DiskSaver, FsspecSaver, ModelCheckpoint
from tracktrain.handlers.checkpoint import BaseSaveHandler, CheckpointEvents
from tracktrain.rng import get_rng_states


# ------------------------------------------------------------------------------------------------------ helpers
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.fc2 = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class PatienceCounter:
    """Stands in for a handler with state, like EarlyStopping."""

    def __init__(self) -> None:
        self.counter = 0
        self.best_score: float | None = None

    def state_dict(self) -> OrderedDict:
        return OrderedDict(counter=self.counter, best_score=self.best_score)

    def load_state_dict(self, state_dict: dict) -> None:
        self.counter = state_dict["counter"]
        self.best_score = state_dict["best_score"]


class FailingState:
    """An object whose state_dict raises, e.g. a handler in an inconsistent state."""

    def state_dict(self) -> dict:
        raise RuntimeError("state_dict exploded")

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class Unpicklable:
    """state_dict works, but what it returns cannot be serialized (a lambda inside)."""

    def state_dict(self) -> dict:
        return {"weight": torch.ones(1000), "fn": lambda: 0}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class RecordingSaver(BaseSaveHandler):
    """Keeps checkpoints in a dict and logs every save/remove, in order."""

    def __init__(self) -> None:
        self.files: dict[str, object] = {}
        self.log: list[tuple[str, str]] = []
        self.metadata: list[dict] = []

    def __call__(self, checkpoint, filename, metadata=None):
        self.files[filename] = checkpoint
        self.log.append(("save", filename))
        self.metadata.append(dict(metadata))

    def remove(self, filename):
        del self.files[filename]
        self.log.append(("remove", filename))


def ignite_recording_saver() -> RecordingSaver:
    """A RecordingSaver that Ignite recognises as a save handler (it only calls `remove` on its own base class)."""
    from ignite.handlers.checkpoint import BaseSaveHandler as IgniteBaseSaveHandler

    class IgniteRecordingSaver(RecordingSaver, IgniteBaseSaveHandler):
        pass

    return IgniteRecordingSaver()


def engine_at(iteration: int = 0, epoch: int = 0, **extra) -> Engine:
    engine = Engine(lambda e, b: None)
    engine.state = State(iteration=iteration, epoch=epoch, **extra)
    return engine


def trained(seed: int = 0):
    """A model, optimizer, scheduler and scaler after two real steps, so that every state is non-trivial."""
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    for _ in range(2):
        loss = model(torch.randn(8, 3)).pow(2).mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    return model, optimizer, scheduler, scaler


def params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_state(a, b) -> None:
    """Equal nested state dicts, tensors compared by value."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            assert_same_state(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_state(x, y)
    else:
        assert a == b


def assert_same_tensors(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture
def memory_dir():
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


# -------------------------------------------------------------------------------------------- file names (oracle)
def _named_configs():
    for prefix, with_score, score_name, with_step, pattern, multi in itertools.product(
        ["", "best"],
        [False, True],
        [None, "acc"],
        [False, True],
        [None, "{global_step}-{name}-{score}.chk.{ext}"],
        [False, True],
    ):
        yield pytest.param(
            prefix,
            with_score,
            score_name,
            with_step,
            pattern,
            multi,
            id=f"{prefix or '-'}-{with_score}-{score_name}-{with_step}-{pattern is not None}-{multi}",
        )


@pytest.mark.parametrize("prefix, with_score, score_name, with_step, pattern, multi", list(_named_configs()))
def test_filenames_metadata_and_payload_match_ignite(prefix, with_score, score_name, with_step, pattern, multi):
    ignite = pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import State as IgniteState
    from ignite.handlers import Checkpoint as IgniteCheckpoint

    model = nn.Linear(2, 1)
    to_save = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)} if multi else {"model": model}
    kwargs = dict(
        filename_prefix=prefix,
        score_function=(lambda e: e.state.metrics["acc"]) if with_score else None,
        score_name=score_name,
        global_step_transform=(lambda e, _: e.state.epoch) if with_step else None,
        filename_pattern=pattern,
        n_saved=2,
    )
    ours, theirs = RecordingSaver(), ignite_recording_saver()
    checkpoint = Checkpoint(to_save, ours, **kwargs)
    oracle = IgniteCheckpoint(to_save, theirs, **kwargs)
    engine, ignite_engine = engine_at(), IgniteEngine(lambda e, b: None)
    for iteration, epoch, acc in [(10, 1, 0.5), (20, 2, 0.75), (30, 3, 0.25), (40, 4, 1.0)]:
        engine.state = State(iteration=iteration, epoch=epoch, metrics={"acc": acc})
        ignite_engine.state = IgniteState(iteration=iteration, epoch=epoch, metrics={"acc": acc})
        checkpoint(engine)
        oracle(ignite_engine)
        assert ours.files.keys() == theirs.files.keys()
        assert ours.metadata == theirs.metadata
        assert checkpoint.last_checkpoint == oracle.last_checkpoint
        assert checkpoint.state_dict() == oracle.state_dict()
    for filename, payload in ours.files.items():
        assert payload.keys() == theirs.files[filename].keys()  # one object: its state dict; several: a dict of them
        assert checkpoint.writes_filename(filename)  # what the sweep after a killed save recognizes as its own
        assert not checkpoint.writes_filename("x" + filename) and not checkpoint.writes_filename(filename + ".tmp")
    assert ignite  # the oracle ran


@pytest.mark.parametrize("n_saved", [1, 2, 3, None])
@pytest.mark.parametrize("greater_or_equal", [False, True])
@pytest.mark.parametrize("with_step", [False, True])
def test_best_k_retention_matches_ignite(n_saved, greater_or_equal, with_step):
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import State as IgniteState
    from ignite.handlers import Checkpoint as IgniteCheckpoint

    scores = [0.5, 0.7, 0.7, 0.6, 0.9, 0.9, 0.1, 0.95, 0.7, 0.95]
    to_save = {"model": nn.Linear(2, 1)}
    kwargs = dict(
        score_function=lambda e: e.state.metrics["acc"],
        score_name="acc",
        n_saved=n_saved,
        greater_or_equal=greater_or_equal,
        global_step_transform=(lambda e, _: e.state.epoch) if with_step else None,
    )
    ours, theirs = RecordingSaver(), ignite_recording_saver()
    checkpoint, oracle = Checkpoint(to_save, ours, **kwargs), IgniteCheckpoint(to_save, theirs, **kwargs)
    engine, ignite_engine = engine_at(), IgniteEngine(lambda e, b: None)
    for epoch, acc in enumerate(scores, start=1):
        engine.state = State(iteration=epoch * 10, epoch=epoch, metrics={"acc": acc})
        ignite_engine.state = IgniteState(iteration=epoch * 10, epoch=epoch, metrics={"acc": acc})
        checkpoint(engine)
        oracle(ignite_engine)
        assert sorted(ours.files) == sorted(theirs.files), f"epoch {epoch}"
        assert checkpoint.state_dict() == oracle.state_dict()


# ------------------------------------------------------------------------------------------ file names (literal)
def test_default_filenames(tmp_path):
    model = nn.Linear(2, 1)
    cases = [
        (dict(), {"model": model}, "model_203.pt"),
        (dict(filename_prefix="best"), {"model": model}, "best_model_203.pt"),
        (dict(score_function=lambda e: 0.99991), {"model": model}, "model_0.9999.pt"),
        (dict(score_function=lambda e: 7), {"model": model}, "model_7.pt"),
        (dict(score_name="acc"), {"model": model}, "model_acc=0.5000.pt"),
        (
            dict(score_name="acc", global_step_transform=lambda e, _: e.state.epoch),
            {"model": model},
            "model_12_acc=0.5000.pt",
        ),
        (dict(filename_pattern="{name}.{ext}"), {"a": model, "b": model}, "checkpoint.pt"),
    ]
    for i, (kwargs, to_save, expected) in enumerate(cases):
        checkpoint = Checkpoint(to_save, DiskSaver(tmp_path / str(i)), **kwargs)
        checkpoint(engine_at(iteration=203, epoch=12, metrics={"acc": 0.5}))
        assert checkpoint.last_checkpoint == tmp_path / str(i) / expected
        assert os.listdir(tmp_path / str(i)) == [expected]
        assert checkpoint.writes_filename(expected)


def test_setup_filename_pattern():
    assert Checkpoint.setup_filename_pattern() == "{filename_prefix}_{name}_{global_step}_{score_name}={score}.{ext}"
    assert Checkpoint.setup_filename_pattern(False, False, False) == "{name}_{global_step}.{ext}"
    assert Checkpoint.setup_filename_pattern(False, True, False, False) == "{name}_{score}.{ext}"
    with pytest.raises(ValueError, match="At least one of with_score and with_global_step"):
        Checkpoint.setup_filename_pattern(False, False, False, False)
    with pytest.raises(ValueError, match="with_score should be also True"):
        Checkpoint.setup_filename_pattern(True, False, True, True)


# ------------------------------------------------------------------------------------------------------ retention
def test_keeps_the_last_n_on_disk_and_deletes_only_after_the_new_file_is_committed(tmp_path):
    saver = DiskSaver(tmp_path)
    log: list[tuple[str, list[str]]] = []

    class LoggingSaver(BaseSaveHandler):
        def __call__(self, checkpoint, filename, metadata=None):
            saver(checkpoint, filename, metadata)
            log.append(("saved " + filename, sorted(os.listdir(tmp_path))))

        def remove(self, filename):
            log.append(("removing " + filename, sorted(os.listdir(tmp_path))))
            saver.remove(filename)

    trainer = Engine(lambda e, b: None)
    checkpoint = Checkpoint({"model": nn.Linear(2, 1), "trainer": trainer}, LoggingSaver(), n_saved=2)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=3), checkpoint)
    trainer.run(range(5), max_epochs=3)  # iterations 3, 6, 9, 12, 15

    assert sorted(os.listdir(tmp_path)) == ["checkpoint_12.pt", "checkpoint_15.pt"]
    assert checkpoint.state_dict() == {"_saved": [(12, "checkpoint_12.pt"), (15, "checkpoint_15.pt")]}
    assert log[2] == ("saved checkpoint_9.pt", ["checkpoint_3.pt", "checkpoint_6.pt", "checkpoint_9.pt"])
    assert log[3] == ("removing checkpoint_3.pt", ["checkpoint_3.pt", "checkpoint_6.pt", "checkpoint_9.pt"])


def test_n_saved_none_keeps_everything(memory_dir):
    checkpoint = Checkpoint({"model": nn.Linear(2, 1)}, memory_dir, n_saved=None)
    for iteration in range(1, 13):
        checkpoint(engine_at(iteration=iteration))
    assert storage.listdir(memory_dir) == sorted(f"model_{i}.pt" for i in range(1, 13))


def test_best_k_keeps_the_highest_scores(tmp_path):
    scores = iter([1.2, -2.0, 3.1, -4.0, 3.1])
    handler = ModelCheckpoint(tmp_path, "p", n_saved=2, score_function=lambda e: next(scores), score_name="val")
    for _ in range(5):
        handler(engine_at(), {"model": nn.Linear(2, 1)})
    assert sorted(os.listdir(tmp_path)) == ["p_model_val=1.2000.pt", "p_model_val=3.1000.pt"]


@pytest.mark.parametrize("greater_or_equal, kept_epoch", [(False, 1), (True, 3)])
def test_greater_or_equal_decides_ties(tmp_path, greater_or_equal, kept_epoch):
    engine = engine_at()
    checkpoint = Checkpoint(
        {"model": nn.Linear(2, 1)},
        DiskSaver(tmp_path),
        n_saved=1,
        score_function=lambda e: 0.5,
        global_step_transform=lambda e, _: e.state.epoch,
        greater_or_equal=greater_or_equal,
    )
    for epoch in (1, 2, 3):
        engine.state.epoch = epoch
        checkpoint(engine)
    assert os.listdir(tmp_path) == [f"model_{kept_epoch}_0.5000.pt"]


def test_best_models_from_an_evaluator_are_named_by_the_trainers_epoch(tmp_path):
    from tracktrain.handlers import global_step_from_engine

    accuracies = iter([0.5, 0.8, 0.6, 0.9])
    trainer, evaluator = Engine(lambda e, b: None), Engine(lambda e, b: None)
    evaluator.add_event_handler(Events.COMPLETED, lambda e: e.state.metrics.update(accuracy=next(accuracies)))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run([0]))
    checkpoint = Checkpoint(
        {"model": nn.Linear(2, 1)},
        DiskSaver(tmp_path),
        filename_prefix="best",
        n_saved=2,
        score_name="accuracy",
        global_step_transform=global_step_from_engine(trainer),
    )
    evaluator.add_event_handler(Events.COMPLETED, checkpoint)
    trainer.run([0, 1], max_epochs=4)
    assert sorted(os.listdir(tmp_path)) == ["best_model_2_accuracy=0.8000.pt", "best_model_4_accuracy=0.9000.pt"]


def test_a_fixed_filename_is_replaced_not_deleted(tmp_path):
    model = nn.Linear(2, 1)
    checkpoint = Checkpoint({"model": model}, DiskSaver(tmp_path), n_saved=1, filename_pattern="{name}.{ext}")
    for iteration in range(1, 4):
        with torch.no_grad():
            model.weight.fill_(iteration)
        checkpoint(engine_at(iteration=iteration))
    assert os.listdir(tmp_path) == ["model.pt"]
    assert torch.load(tmp_path / "model.pt")["weight"].eq(3).all()
    assert checkpoint.state_dict() == {"_saved": [(3, "model.pt")]}


def test_saved_checkpoint_event_fires_after_each_save_only(tmp_path):
    trainer = Engine(lambda e, b: None)
    fired: list[tuple[int, list[str]]] = []
    checkpoint = Checkpoint(
        {"model": nn.Linear(2, 1)}, DiskSaver(tmp_path), n_saved=1, score_function=lambda e: -abs(e.state.iteration - 3)
    )
    trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    trainer.register_events(*CheckpointEvents)
    trainer.add_event_handler(
        Checkpoint.SAVED_CHECKPOINT, lambda e: fired.append((e.state.iteration, os.listdir(tmp_path)))
    )
    trainer.run(range(6))
    # scores -2, -1, 0, -1, -2, -3: only the first three improve on the kept one
    assert fired == [(1, ["model_-2.pt"]), (2, ["model_-1.pt"]), (3, ["model_0.pt"])]


def test_checkpoint_on_exception_raised(tmp_path):
    def step(engine, batch):
        if engine.state.iteration == 4:
            raise RuntimeError("boom")

    trainer = Engine(step)
    checkpoint = Checkpoint({"trainer": trainer}, DiskSaver(tmp_path))
    trainer.add_event_handler(Events.EXCEPTION_RAISED, checkpoint)
    trainer.run(range(10))
    assert os.listdir(tmp_path) == ["trainer_4.pt"]


def test_reset_forgets_the_kept_files(tmp_path):
    checkpoint = Checkpoint({"model": nn.Linear(2, 1)}, DiskSaver(tmp_path), n_saved=1)
    checkpoint(engine_at(iteration=20))
    checkpoint.reset()
    assert checkpoint.last_checkpoint is None
    checkpoint(engine_at(iteration=5))
    assert sorted(os.listdir(tmp_path)) == ["model_20.pt", "model_5.pt"]


# --------------------------------------------------------------------------------------------- state round trips
def test_every_object_type_round_trips_through_a_file(tmp_path):
    model, optimizer, scheduler, scaler = trained(seed=0)
    trainer = Engine(lambda e, b: None)
    trainer.run(range(4), max_epochs=3)
    trainer.state.max_epochs = 5  # an unfinished run, as when checkpointing mid-training
    deterministic = DeterministicEngine(lambda e, b: torch.rand(1))
    deterministic.run(range(4), max_epochs=1, seed=7)
    patience = PatienceCounter()
    patience.counter, patience.best_score = 3, 0.25
    to_save = {
        "model": model,
        "optimizer": optimizer,
        "lr_scheduler": scheduler,
        "scaler": scaler,
        "trainer": trainer,
        "deterministic": deterministic,
        "early_stopping": patience,
    }
    checkpoint = Checkpoint(to_save, DiskSaver(tmp_path), include_self=True)
    saved_rng = get_rng_states()  # what DeterministicEngine.state_dict() captures in the next line
    checkpoint(trainer)

    model2, optimizer2, scheduler2, scaler2 = trained(seed=1)
    trainer2, deterministic2 = Engine(lambda e, b: None), DeterministicEngine(lambda e, b: None)
    patience2, checkpoint2 = PatienceCounter(), Checkpoint({"model": model2}, RecordingSaver())
    to_load = {
        "model": model2,
        "optimizer": optimizer2,
        "lr_scheduler": scheduler2,
        "scaler": scaler2,
        "trainer": trainer2,
        "deterministic": deterministic2,
        "early_stopping": patience2,
        "checkpointer": checkpoint2,
    }
    Checkpoint.load_objects(to_load, checkpoint.last_checkpoint)

    assert_same_tensors(model2.state_dict(), model.state_dict())
    state, state2 = optimizer.state_dict(), optimizer2.state_dict()
    assert state["param_groups"] == state2["param_groups"]
    for index in state["state"]:
        assert_same_tensors(state["state"][index], state2["state"][index])
    assert scheduler2.state_dict() == scheduler.state_dict() and scheduler2.get_last_lr() == scheduler.get_last_lr()
    assert scaler2.state_dict() == scaler.state_dict() and scaler2.get_scale() == scaler.get_scale()
    assert trainer2.state_dict() == trainer.state_dict() == {"epoch_length": 4, "iteration": 12, "max_epochs": 5}
    assert deterministic2.state.seed == 7 and deterministic2.state.iteration == 4
    assert torch.equal(deterministic2.state.rng_states["torch"], saved_rng["torch"])
    assert deterministic2.state.rng_states["numpy"] == saved_rng["numpy"]
    assert patience2.state_dict() == {"counter": 3, "best_score": 0.25}
    assert checkpoint2.state_dict() == checkpoint.state_dict() == {"_saved": [(12, "checkpoint_12.pt")]}
    assert checkpoint2.last_checkpoint == "checkpoint_12.pt"


def test_wrapped_models_are_saved_as_their_inner_module(tmp_path):
    import torch.distributed as dist

    model = nn.Linear(3, 2)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for i, wrapped in enumerate([nn.DataParallel(model), nn.parallel.DistributedDataParallel(model)]):
            checkpoint = Checkpoint({"model": wrapped}, DiskSaver(tmp_path / str(i)))
            checkpoint(engine_at(iteration=1))
            saved = torch.load(checkpoint.last_checkpoint)
            assert list(saved) == ["weight", "bias"]  # no "module." prefix
            fresh = nn.Linear(3, 2)
            Checkpoint.load_objects({"model": nn.DataParallel(fresh)}, checkpoint.last_checkpoint)
            assert_same_tensors(fresh.state_dict(), model.state_dict())
    finally:
        dist.destroy_process_group()


def test_nested_objects_round_trip(memory_dir):
    models = [nn.Linear(2, 2), nn.Linear(2, 3)]
    heads = {"a": {"b": nn.Linear(3, 1)}}
    checkpoint = Checkpoint({"models": models, "heads": heads}, memory_dir)
    checkpoint(engine_at(iteration=1))
    fresh_models, fresh_heads = [nn.Linear(2, 2), nn.Linear(2, 3)], {"a": {"b": nn.Linear(3, 1)}}
    Checkpoint.load_objects({"models": fresh_models, "heads": fresh_heads}, checkpoint.last_checkpoint)
    for old, new in zip(models + [heads["a"]["b"]], fresh_models + [fresh_heads["a"]["b"]]):
        assert_same_tensors(new.state_dict(), old.state_dict())


def test_retention_continues_after_a_resume(tmp_path):
    """The checkpoint's own state travels in the file (include_self), so a new process keeps deleting old files."""

    def build():
        trainer = Engine(lambda e, b: None)
        model = nn.Linear(2, 1)
        checkpoint = Checkpoint(
            {"trainer": trainer, "model": model}, DiskSaver(tmp_path, require_empty=False), n_saved=2, include_self=True
        )
        trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
        return trainer, model, checkpoint

    trainer, model, checkpoint = build()
    trainer.run(range(3), max_epochs=3)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_6.pt", "checkpoint_9.pt"]

    trainer2, model2, checkpoint2 = build()
    last = Checkpoint.get_last_checkpoint(tmp_path)
    Checkpoint.load_objects({"trainer": trainer2, "model": model2, "checkpointer": checkpoint2}, last)
    assert checkpoint2.last_checkpoint == tmp_path / "checkpoint_9.pt"
    trainer2.run(range(3), max_epochs=5)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_12.pt", "checkpoint_15.pt"]
    assert torch.load(tmp_path / "checkpoint_15.pt")["checkpointer"] == {
        "_saved": [(12, "checkpoint_12.pt"), (15, "checkpoint_15.pt")]
    }


def test_include_self_with_one_object_writes_a_loadable_dict(tmp_path):
    """Ignite would put "checkpointer" inside the model's state dict, which the model then refuses to load."""
    model = nn.Linear(2, 1)
    checkpoint = Checkpoint({"model": model}, DiskSaver(tmp_path), include_self=True)
    checkpoint(engine_at(iteration=4))
    assert os.listdir(tmp_path) == ["model_4.pt"]  # named as Ignite names it
    fresh, fresh_checkpoint = nn.Linear(2, 1), Checkpoint({"model": model}, RecordingSaver())
    Checkpoint.load_objects({"model": fresh, "checkpointer": fresh_checkpoint}, tmp_path / "model_4.pt")
    assert_same_tensors(fresh.state_dict(), model.state_dict())
    assert fresh_checkpoint.state_dict() == {"_saved": [(4, "model_4.pt")]}
    Checkpoint.load_objects({"model": nn.Linear(2, 1)}, tmp_path / "model_4.pt")  # strict, the model alone


def test_checkpoint_state_dict_validation():
    checkpoint = Checkpoint({"model": nn.Linear(2, 1)}, RecordingSaver())
    checkpoint.load_state_dict({"_saved": [(0, "model_0.pt"), (10, "model_10.pt")]})
    assert checkpoint.last_checkpoint == "model_10.pt"
    with pytest.raises(ValueError, match=r"'_saved' is absent .*\['saved'\]"):
        checkpoint.load_state_dict({"saved": []})
    with pytest.raises(ValueError, match=r"must be \(priority, filename\), got \('a', 'b'\)"):
        checkpoint.load_state_dict({"_saved": [("a", "b")]})
    with pytest.raises(TypeError, match="should be a dictionary"):
        checkpoint.load_state_dict([1])
    assert checkpoint.last_checkpoint == "model_10.pt"  # failed loads changed nothing


# ------------------------------------------------------------------------------------------------- load_objects
def test_load_objects_from_a_dict_a_path_and_urls(tmp_path, memory_dir):
    model, optimizer, _, _ = trained(seed=0)
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(payload, tmp_path / "c.pt")
    with fsspec.open(f"{memory_dir}/c.pt", "wb") as f:
        torch.save(payload, f)

    for source in [payload, str(tmp_path / "c.pt"), tmp_path / "c.pt", f"file://{tmp_path}/c.pt", f"{memory_dir}/c.pt"]:
        fresh, fresh_optimizer, _, _ = trained(seed=1)
        Checkpoint.load_objects({"model": fresh, "optimizer": fresh_optimizer}, source)
        assert_same_tensors(fresh.state_dict(), model.state_dict())
        assert fresh_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_load_objects_single_object_and_subset():
    model, optimizer, _, _ = trained(seed=0)
    fresh = Net()
    Checkpoint.load_objects({"anything": fresh}, model.state_dict())  # the file is that object's state dict
    assert_same_tensors(fresh.state_dict(), model.state_dict())
    fresh = Net()
    Checkpoint.load_objects({"model": fresh}, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    assert_same_tensors(fresh.state_dict(), model.state_dict())


def test_load_objects_strict_false_skips_missing_keys_and_loads_modules_partially():
    source = nn.Sequential(nn.Linear(4, 2, bias=False), nn.Linear(2, 1))
    features = nn.Sequential(nn.Linear(4, 2, bias=False))
    with pytest.raises(RuntimeError, match="Unexpected key"):
        Checkpoint.load_objects({"features": features}, source.state_dict())
    counter = PatienceCounter()
    with pytest.warns(UserWarning, match=r"no state for \['counter'\]"):
        Checkpoint.load_objects(
            {"features": features, "counter": counter}, {"features": source.state_dict()}, strict=False
        )
    assert torch.equal(features[0].weight, source[0].weight)
    assert counter.counter == 0


def test_load_objects_checks_every_key_before_loading_anything():
    model, optimizer, _, _ = trained(seed=0)
    fresh = Net()
    before = params(fresh)
    with pytest.raises(
        ValueError,
        match=r"^Key 'optimizer' from to_load is not found in the checkpoint dict: dict_keys\(\['model'\]\)\. It has no "
        r"state for \['optimizer', 'trainer'\]\. Nothing was loaded",
    ):
        Checkpoint.load_objects(
            {"model": fresh, "optimizer": optimizer, "trainer": Engine(lambda e, b: None)},
            {"model": model.state_dict()},
        )
    assert_same_tensors(params(fresh), before)  # "model" is present, but was not loaded either
    with pytest.raises(ValueError, match=r"list of 2 objects"):
        Checkpoint.load_objects(
            {"model": fresh, "heads": [nn.Linear(1, 1), nn.Linear(1, 1)]},
            {"model": model.state_dict(), "heads": [nn.Linear(1, 1).state_dict()]},
        )
    assert_same_tensors(params(fresh), before)


def test_an_optimizer_state_that_is_not_a_mapping_is_refused_before_anything_loads():
    model, optimizer, _, _ = trained(seed=0)
    saved = {"model": model.state_dict(), "optimizer": {**optimizer.state_dict(), "state": [0.5, 0.5]}}
    target_model, target_optimizer, _, _ = trained(seed=1)
    before = params(target_model)
    with pytest.raises(
        ValueError,
        match=r"^its 'state' is a list, not a mapping of parameter index to state\. Cannot "
        r"load \['optimizer'\] \(Adam\) from the checkpoint dict: nothing was loaded",
    ):
        Checkpoint.load_objects({"model": target_model, "optimizer": target_optimizer}, saved)
    assert_same_tensors(params(target_model), before)


def test_a_failing_load_state_dict_names_the_object_and_leaves_every_object_as_it_was(tmp_path):
    # a failure that cannot be foreseen before loading: the handler's own load_state_dict rejects its state
    counter = PatienceCounter()
    model = nn.Linear(3, 4)
    before = params(model)
    with pytest.raises(KeyError, match="best_score") as failure:
        Checkpoint.load_objects(
            {"model": model, "counter": counter},
            {
                "model": nn.Linear(3, 4).state_dict(),
                "counter": {"counter": 1},
            },
        )
    assert_same_tensors(params(model), before)  # modules load last: the counter failed before the model was touched
    notes = "".join(getattr(failure.value, "__notes__", []))
    if hasattr(failure.value, "add_note"):
        assert "['counter']" in notes and "every object was left as it was" in notes


@pytest.mark.parametrize("malformed", ["optimizer", "scheduler", "trainer"])
def test_a_malformed_state_found_only_while_loading_changes_no_object(malformed):
    """Each of these passes the checks before loading and fails inside its object's own load_state_dict, after
    other objects were loaded: every object is restored to what it was."""
    model, optimizer, scheduler, scaler = trained(seed=0)
    saved = copy.deepcopy(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "trainer": engine_at(iteration=10).state_dict(),
        }
    )
    if malformed == "optimizer":
        group = saved["optimizer"]["param_groups"][0]  # as many parameters, but as lists: torch cannot index them
        group["params"] = [[index] for index in group["params"]]
    elif malformed == "scheduler":
        saved["scheduler"] = None  # torch's LRScheduler.load_state_dict calls .pop on it
    else:
        saved["trainer"] = {"epoch_length": 4, "max_epochs": 2}  # neither iteration nor epoch
    target_model, target_optimizer, target_scheduler, target_scaler = trained(seed=1)
    objects = {
        "model": target_model,
        "optimizer": target_optimizer,
        "scheduler": target_scheduler,
        "scaler": target_scaler,
        "trainer": engine_at(iteration=3, epoch_length=4, max_epochs=2),
    }
    before = {name: copy.deepcopy(obj.state_dict()) for name, obj in objects.items()}
    with pytest.raises(Exception) as failure:  # each object's own error type
        Checkpoint.load_objects(objects, saved)
    for name, obj in objects.items():
        assert_same_state(obj.state_dict(), before[name])
    if hasattr(failure.value, "add_note"):
        assert f"while loading ['{malformed}'] from the checkpoint dict; every object was left as it was" in "".join(
            failure.value.__notes__
        )


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage", "empty"])
def test_a_missing_or_corrupted_file_names_it_and_changes_nothing(tmp_path, damage):
    model, optimizer, _, _ = trained(seed=0)
    path = tmp_path / "checkpoint_10.pt"
    checkpoint = Checkpoint({"model": model, "optimizer": optimizer}, DiskSaver(tmp_path))
    checkpoint(engine_at(iteration=10))
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    else:
        path.write_bytes(b"")

    fresh, fresh_optimizer, _, _ = trained(seed=1)
    before, optimizer_before = params(fresh), fresh_optimizer.state_dict()["state"][0]["exp_avg"].clone()
    error = FileNotFoundError if damage == "missing" else RuntimeError
    message = (
        rf"^\[Errno 2\] No such file or directory: '{path}'\. Check the path"
        if damage == "missing"
        else rf"Checkpoint file {path}.*truncated or corrupted"
    )
    with pytest.raises(error, match=message):
        Checkpoint.load_objects({"model": fresh, "optimizer": fresh_optimizer}, path)
    assert_same_tensors(params(fresh), before)
    assert torch.equal(fresh_optimizer.state_dict()["state"][0]["exp_avg"], optimizer_before)


def test_a_directory_instead_of_a_file_is_named(tmp_path):
    with pytest.raises(IsADirectoryError, match=rf"Checkpoint {tmp_path} is a directory.*get_last_checkpoint"):
        Checkpoint.load_objects({"model": nn.Linear(1, 1)}, tmp_path)


def test_a_file_with_arbitrary_python_objects_is_refused_with_the_way_out(tmp_path):
    torch.save({"model": PatienceCounter()}, tmp_path / "pickled.pt")
    with pytest.raises(RuntimeError, match=r"pickled\.pt holds Python objects .*weights_only=False"):
        Checkpoint.load_objects({"model": PatienceCounter()}, tmp_path / "pickled.pt")


def test_load_objects_bad_arguments():
    with pytest.raises(TypeError, match="should be a string or a dictionary"):
        Checkpoint.load_objects({"model": nn.Linear(1, 1)}, [1])
    with pytest.raises(
        TypeError, match=r"^Object <class 'int'> should have `load_state_dict` method \(to_load\['a'\]\['b'\]\)"
    ):
        Checkpoint.load_objects({"a": {"b": 3}}, {"a": {"b": {}}})
    with pytest.raises(ValueError, match=r"holds a list at \['a'\], where to_load has a dict \['x'\]"):
        Checkpoint.load_objects({"a": {"x": nn.Linear(1, 1)}, "b": nn.Linear(1, 1)}, {"a": [], "b": {}})


def test_a_file_that_is_not_a_dict_of_states_is_refused(tmp_path):
    torch.save([torch.ones(1)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match=r"list\.pt holds a list, not a dict of state dicts"):
        Checkpoint.load_objects({"model": nn.Linear(1, 1)}, tmp_path / "list.pt")


def test_reload_objects_finds_the_file_by_its_parts(tmp_path):
    model = nn.Linear(2, 1)
    handler = ModelCheckpoint(tmp_path, "prefix", n_saved=None)
    handler(engine_at(iteration=7), {"model": model})
    fresh = nn.Linear(2, 1)
    handler.reload_objects({"model": fresh}, global_step=7)
    assert_same_tensors(fresh.state_dict(), model.state_dict())


# ---------------------------------------------------------------------------------------------------- atomicity
@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize("bad", [FailingState, Unpicklable])
def test_a_failed_save_leaves_no_file_and_the_previous_checkpoint_intact(tmp_path, memory_dir, where, bad):
    directory = tmp_path if where == "local" else memory_dir
    model = nn.Linear(2, 1)
    to_save = {"model": model, "extra": PatienceCounter()}
    checkpoint = Checkpoint(to_save, directory, n_saved=1)
    checkpoint(engine_at(iteration=1))
    good = storage.read_bytes(storage.join(directory, "checkpoint_1.pt"))

    to_save["extra"] = bad()
    with pytest.raises(Exception) as failure:
        checkpoint(engine_at(iteration=2))
    if bad is FailingState:
        assert "state_dict exploded" in str(failure.value)
        if hasattr(failure.value, "add_note"):
            assert "to_save['extra']" in "".join(failure.value.__notes__)
    assert storage.listdir(directory) == ["checkpoint_1.pt"]  # no new file, no temporary file
    assert storage.read_bytes(storage.join(directory, "checkpoint_1.pt")) == good
    assert checkpoint.state_dict() == {"_saved": [(1, "checkpoint_1.pt")]}

    to_save["extra"] = PatienceCounter()  # and the next save works and applies retention as usual
    checkpoint(engine_at(iteration=3))
    assert storage.listdir(directory) == ["checkpoint_3.pt"]


def test_a_failing_save_handler_deletes_nothing():
    class FlakySaver(RecordingSaver):
        fail = False

        def __call__(self, checkpoint, filename, metadata=None):
            if self.fail:
                raise OSError("storage unavailable")
            super().__call__(checkpoint, filename, metadata)

    saver = FlakySaver()
    checkpoint = Checkpoint({"model": nn.Linear(2, 1)}, saver, n_saved=1)
    checkpoint(engine_at(iteration=1))
    saver.fail = True
    with pytest.raises(OSError, match="storage unavailable"):
        checkpoint(engine_at(iteration=2))
    assert list(saver.files) == ["model_1.pt"] and ("remove", "model_1.pt") not in saver.log
    assert checkpoint.last_checkpoint == "model_1.pt"


def test_plain_function_save_handlers_with_and_without_metadata():
    calls = []
    Checkpoint({"m": nn.Linear(1, 1)}, lambda c, f: calls.append((f,)))(engine_at(iteration=3))
    Checkpoint({"m": nn.Linear(1, 1)}, lambda c, f, m: calls.append((f, m["priority"])))(engine_at(iteration=4))
    assert calls == [("m_3.pt",), ("m_4.pt", 4)]


# -------------------------------------------------------------------------------------------- savers and storage
def test_string_save_handlers_pick_the_saver(tmp_path, memory_dir):
    local = Checkpoint({"m": nn.Linear(1, 1)}, str(tmp_path / "new"))
    assert type(local.save_handler) is DiskSaver and (tmp_path / "new").is_dir()
    remote = Checkpoint({"m": nn.Linear(1, 1)}, memory_dir)
    assert type(remote.save_handler) is FsspecSaver
    remote(engine_at(iteration=2))
    assert remote.last_checkpoint == f"{memory_dir}/m_2.pt"


def test_checkpoints_to_s3(s3_bucket, s3_secret):  # noqa: F811
    url = f"{s3_bucket}/run-{uuid.uuid4().hex[:8]}"
    model = nn.Linear(2, 1)
    checkpoint = Checkpoint({"model": model, "counter": PatienceCounter()}, url, n_saved=2)
    for iteration in (1, 2, 3):
        checkpoint(engine_at(iteration=iteration))
    assert storage.listdir(url) == ["checkpoint_2.pt", "checkpoint_3.pt"]
    assert Checkpoint.get_last_checkpoint(url) == f"{url}/checkpoint_3.pt"
    fresh = nn.Linear(2, 1)
    Checkpoint.load_objects({"model": fresh, "counter": PatienceCounter()}, checkpoint.last_checkpoint)
    assert_same_tensors(fresh.state_dict(), model.state_dict())
    with pytest.raises(ValueError, match=r"already present in the directory s3://"):
        FsspecSaver(url)
    # credentials come from fsspec's configuration and end up in no checkpoint, nor in the handler's state
    for name in storage.listdir(url):
        assert s3_secret.encode() not in storage.read_bytes(f"{url}/{name}")
    assert s3_secret not in repr(vars(checkpoint)) + repr(vars(checkpoint.save_handler))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_require_empty_refuses_a_directory_with_checkpoints(tmp_path, memory_dir, where):
    directory = str(tmp_path) if where == "local" else memory_dir
    storage.makedirs(directory)
    storage.write_bytes_atomic(storage.join(directory, "notes.txt"), b"")
    FsspecSaver(directory)  # other files are fine
    storage.write_bytes_atomic(storage.join(directory, "PREFIX_model_1.pt"), b"")
    with pytest.raises(ValueError) as failure:
        ModelCheckpoint(directory, "PREFIX")
    message = str(failure.value)
    assert "['PREFIX_model_1.pt']" in message and directory in message and "require_empty=False" in message
    ModelCheckpoint(directory, "PREFIX", require_empty=False)


def test_saver_arguments_are_checked(tmp_path, memory_dir):
    with pytest.raises(ValueError, match=r"Directory path '.*missing' is not found.*create_dir=True"):
        DiskSaver(tmp_path / "missing", create_dir=False)
    with pytest.raises(ValueError, match="DiskSaver writes to a local directory, got the URL 'memory://"):
        DiskSaver(memory_dir)
    with pytest.raises(TypeError, match="torch.save.*unexpected keyword argument 'unknown_keyword'"):
        DiskSaver(tmp_path, unknown_keyword="")
    saver = DiskSaver(f"file://{tmp_path}", _use_new_zipfile_serialization=False)
    assert saver.dirname == tmp_path
    saver({"a": torch.ones(2)}, "a.pt")
    assert torch.equal(torch.load(tmp_path / "a.pt")["a"], torch.ones(2))
    saver.remove("a.pt")
    saver.remove("a.pt")  # already gone is fine
    assert os.listdir(tmp_path) == []
    in_place = FsspecSaver(tmp_path, atomic=False)
    in_place({"a": torch.zeros(2)}, "b.pt")
    assert os.listdir(tmp_path) == ["b.pt"] and torch.equal(torch.load(tmp_path / "b.pt")["a"], torch.zeros(2))


def test_checkpoint_arguments_are_checked():
    model = nn.Linear(1, 1)
    saver = RecordingSaver()
    with pytest.raises(TypeError, match="`to_save` should be a dictionary"):
        Checkpoint([model], saver)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"^Object <class 'int'> should have `state_dict` method \(to_save\['model'\]\['abc'\]\)"
    ):
        Checkpoint({"model": {"abc": 12}}, saver)
    with pytest.raises(TypeError, match=r"^Object <class 'str'> should have `state_dict` method \(to_save\['name'\]\)"):
        Checkpoint({"name": "text"}, saver)
    with pytest.raises(TypeError, match="`save_handler` should be a string or Path .* got int: 12"):
        Checkpoint({"model": model}, 12)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must accept \(checkpoint, filename\)"):
        Checkpoint({"model": model}, lambda x: x)
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"n_saved must be a positive integer or None, got {bad}"):
            Checkpoint({"model": model}, saver, n_saved=bad)
    for bad in ("2", 1.5, True):
        with pytest.raises(TypeError, match="n_saved must be a positive integer or None"):
            Checkpoint({"model": model}, saver, n_saved=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="score_function should be a function"):
        Checkpoint({"model": model}, saver, score_function=0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="global_step_transform should be a function"):
        Checkpoint({"model": model}, saver, global_step_transform=1234)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown fields \['random_key'\]"):
        Checkpoint({"model": model}, saver, filename_pattern="SAVE-{random_key}.{ext}")
    with pytest.raises(ValueError, match="Cannot have key 'checkpointer' if `include_self` is True"):
        Checkpoint({"checkpointer": model}, saver, include_self=True)
    with pytest.raises(ValueError, match="score_sign should be 1 or -1"):
        Checkpoint.get_default_score_fn("acc", 2.0)
    tensor_score = Checkpoint({"model": model}, saver, score_function=lambda e: torch.tensor(0.5))
    with pytest.raises(ValueError, match=r"score_function should be a number, got Tensor.*\.item\(\)"):
        tensor_score(engine_at())
    assert saver.log == []


def test_model_checkpoint_as_in_ignites_docs(tmp_path, memory_dir):
    trainer = Engine(lambda e, b: None)
    handler = ModelCheckpoint(tmp_path / "models", "myprefix", n_saved=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED(every=2), handler, {"mymodel": nn.Linear(3, 3)})
    trainer.run([0, 1, 2, 3, 4], max_epochs=6)
    assert sorted(os.listdir(tmp_path / "models")) == ["myprefix_mymodel_20.pt", "myprefix_mymodel_30.pt"]
    assert handler.last_checkpoint == tmp_path / "models" / "myprefix_mymodel_30.pt"

    remote = ModelCheckpoint(memory_dir, n_saved=1)
    remote(engine_at(iteration=3), {"m": nn.Linear(1, 1)})
    assert remote.last_checkpoint == f"{memory_dir}/m_3.pt"
    with pytest.raises(RuntimeError, match="No objects to checkpoint found"):
        remote(engine_at(), {})
    with pytest.raises(TypeError, match=r"should have `state_dict` method \(to_save\['m'\]\)"):
        remote(engine_at(), {"m": 1})


# ---------------------------------------------------------------------------------------------- finding the last
def test_get_last_checkpoint_orders_by_global_step(tmp_path, memory_dir):
    assert Checkpoint.get_last_checkpoint(tmp_path / "missing") is None
    assert Checkpoint.get_last_checkpoint(tmp_path) is None
    for name in [
        "checkpoint_9.pt",
        "checkpoint_10.pt",
        "best_checkpoint_99.pt",
        "checkpoint_11.txt",
        "model_acc=0.9000.pt",
        ".checkpoint_12.pt.0123abcd.tmp",
        "checkpoint_100_acc=0.5000.pt",
    ]:
        (tmp_path / name).write_bytes(b"")
        storage.write_bytes_atomic(f"{memory_dir}/{name}", b"")
    # "best_checkpoint_99.pt" has a prefix: without one, only `{name}_{step}.pt` counts
    assert Checkpoint.get_last_checkpoint(tmp_path) == str(tmp_path / "checkpoint_10.pt")
    assert Checkpoint.get_last_checkpoint(tmp_path, "best") == str(tmp_path / "best_checkpoint_99.pt")
    assert Checkpoint.get_last_checkpoint(tmp_path, "other") is None
    assert Checkpoint.get_last_checkpoint(memory_dir, "best") == f"{memory_dir}/best_checkpoint_99.pt"
    (tmp_path / "best_checkpoint_99.pt").unlink()
    assert Checkpoint.get_last_checkpoint(tmp_path) == str(tmp_path / "checkpoint_10.pt")


LOAD_OBJECTS_ERRORS = {
    "checkpoint_of_a_wrong_type": lambda m: ({"model": m}, 3),
    "object_without_load_state_dict": lambda m: ({"model": object()}, {"model": {}}),
    "a_key_not_in_the_checkpoint": lambda m: (
        {"model": m, "opt": torch.optim.SGD(m.parameters(), 0.1)},
        {"model": m.state_dict()},
    ),
    "a_missing_file": lambda m: ({"model": m}, "/nonexistent/checkpoint_1.pt"),
    "a_missing_module_key": lambda m: ({"model": m}, {"model": {"weight": torch.zeros(2, 2)}}),
    "a_shape_mismatch": lambda m: ({"model": m}, {"model": {"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}}),
    "fewer_parameter_groups": lambda m: (
        {"opt": torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias]}], 0.1)},
        {"opt": torch.optim.SGD(m.parameters(), 0.1).state_dict()},
    ),
}


@pytest.mark.parametrize("case", list(LOAD_OBJECTS_ERRORS))
def test_load_objects_errors_are_ignites_type_and_start_with_its_words(case):
    from ignite.handlers import Checkpoint as IgniteCheckpoint

    def error_of(checkpoint_class):
        torch.manual_seed(0)
        to_load, checkpoint = LOAD_OBJECTS_ERRORS[case](nn.Linear(2, 2))
        with pytest.raises(Exception) as caught:
            checkpoint_class.load_objects(to_load, checkpoint)
        return caught.value

    ours, theirs = error_of(Checkpoint), error_of(IgniteCheckpoint)
    assert type(ours) is type(theirs)
    # Ignite names the two dicts "x" and "y"; we name them
    expected = str(theirs).replace("from x is not found in y", "from to_load is not found in the checkpoint dict")
    assert str(ours).startswith(expected.rstrip(". ")), (str(ours), str(theirs))


@pytest.mark.parametrize("with_metadata", [False, True])
def test_a_plain_callable_save_handler_is_called_as_ignite_calls_it(with_metadata):
    """Ignite accepts `(checkpoint, filename)` and `(checkpoint, filename, metadata)` callables."""
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import Checkpoint as IgniteCheckpoint

    from tracktrain.engine import Engine, Events

    def calls_of(checkpoint_class, engine_class, events):
        calls = []
        if with_metadata:

            def handler(checkpoint, filename, metadata):
                calls.append((filename, sorted(checkpoint), metadata))
        else:

            def handler(checkpoint, filename):
                calls.append((filename, sorted(checkpoint)))

        torch.manual_seed(0)
        engine = engine_class(lambda e, b: None)
        engine.add_event_handler(
            events.EPOCH_COMPLETED, checkpoint_class({"model": nn.Linear(2, 2)}, handler, "run", n_saved=None)
        )
        engine.run([1, 2], max_epochs=2)
        return calls

    assert calls_of(Checkpoint, Engine, Events) == calls_of(IgniteCheckpoint, IgniteEngine, IgniteEvents)


def test_positional_arguments_follow_ignites_order(tmp_path):
    from ignite.handlers import Checkpoint as IgniteCheckpoint
    from ignite.handlers import DiskSaver as IgniteDiskSaver
    from ignite.handlers import ModelCheckpoint as IgniteModelCheckpoint

    from tracktrain.handlers import ModelCheckpoint

    def fields(checkpoint_class, saver_class, model_checkpoint_class, folder):
        score = lambda engine: 1.0  # noqa: E731
        checkpoint = checkpoint_class({"model": nn.Linear(2, 2)}, saver_class(folder / "a"), "pre", score, "acc")
        model_checkpoint = model_checkpoint_class(folder / "b", "pfx")
        return (
            checkpoint.filename_prefix,
            checkpoint.score_name,
            checkpoint.score_function is score,
            model_checkpoint.filename_prefix,
        )

    assert (
        fields(Checkpoint, DiskSaver, ModelCheckpoint, tmp_path / "ours")
        == fields(IgniteCheckpoint, IgniteDiskSaver, IgniteModelCheckpoint, tmp_path / "ignite")
        == ("pre", "acc", True, "pfx")
    )


def test_disk_saver_refuses_an_unknown_keyword_when_built_not_at_the_first_save(tmp_path):
    with pytest.raises(TypeError, match="bogus"):
        DiskSaver(tmp_path, bogus=1)


def test_an_atomic_write_of_a_new_file_leaves_what_ignites_leaves(tmp_path):
    """The target does not exist yet: one file, readable as Ignite's is (its temporary file is 0600, then opened up
    for group and others), and no temporary left."""
    import stat

    from ignite.handlers import DiskSaver as IgniteDiskSaver

    def result(saver_class, folder):
        saver_class(folder, atomic=True, require_empty=False)({"w": torch.ones(2)}, "model_1.pt")
        return sorted(os.listdir(folder)), stat.S_IMODE(os.stat(folder / "model_1.pt").st_mode)

    assert result(DiskSaver, tmp_path / "ours") == result(IgniteDiskSaver, tmp_path / "ignite")


@pytest.mark.parametrize("objects", ["several", "one"])
def test_a_run_checkpointed_by_ignite_resumes_here_and_retention_goes_on(tmp_path, objects):
    """Ignite writes, tracktrain loads the same file and keeps deleting Ignite's old files (its `_saved` layout).

    With one object Ignite puts "checkpointer" inside that object's state: loading the model takes the rest."""
    pytest.importorskip("ignite")
    from ignite.engine import Engine as IgniteEngine
    from ignite.engine import Events as IgniteEvents
    from ignite.handlers import Checkpoint as IgniteCheckpoint
    from ignite.handlers import DiskSaver as IgniteDiskSaver

    torch.manual_seed(0)
    ignite_trainer, ignite_model = IgniteEngine(lambda e, b: None), nn.Linear(2, 1)
    to_save = {"trainer": ignite_trainer, "model": ignite_model} if objects == "several" else {"model": ignite_model}
    ignite_trainer.add_event_handler(
        IgniteEvents.EPOCH_COMPLETED,
        IgniteCheckpoint(
            to_save,
            IgniteDiskSaver(tmp_path, require_empty=False),
            n_saved=2,
            include_self=True,
            global_step_transform=lambda engine, event: engine.state.epoch,
        ),
    )
    ignite_trainer.run(range(3), max_epochs=3)
    name = "checkpoint" if objects == "several" else "model"
    assert sorted(os.listdir(tmp_path)) == [f"{name}_2.pt", f"{name}_3.pt"]

    trainer, model = Engine(lambda e, b: None), nn.Linear(2, 1)
    ours = {"trainer": trainer, "model": model} if objects == "several" else {"model": model}
    checkpoint = Checkpoint(
        ours,
        DiskSaver(tmp_path, require_empty=False),
        n_saved=2,
        include_self=True,
        global_step_transform=lambda engine, event: engine.state.epoch,
    )
    state = torch.load(tmp_path / f"{name}_3.pt", weights_only=False)
    if objects == "one":  # Ignite's layout: the checkpointer's state inside the model's
        checkpoint.load_state_dict(state.pop("checkpointer"))
        model.load_state_dict(state)
    else:
        Checkpoint.load_objects({**ours, "checkpointer": checkpoint}, state)
    assert_same_tensors(model.state_dict(), ignite_model.state_dict())
    if objects == "several":
        assert trainer.state.epoch == 3
    else:
        trainer.load_state_dict({"epoch_length": 3, "epoch": 3, "max_epochs": 3})
    trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
    trainer.run(range(3), max_epochs=5)
    assert sorted(os.listdir(tmp_path)) == [f"{name}_4.pt", f"{name}_5.pt"]  # Ignite's files were retired
