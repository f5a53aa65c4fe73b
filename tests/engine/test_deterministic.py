"""DeterministicEngine: a run resumed from its state_dict replays exactly what the uninterrupted run saw."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tracktrain.engine import DeterministicEngine, Engine, Events


class NoisyDataset(Dataset):
    """Random augmentation from torch and python's generators; counts which indices were loaded."""

    def __init__(self, size: int = 20) -> None:
        self.size = size
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        self.loaded.append(index)
        return torch.tensor([float(index), torch.rand(()).item(), random.random()])


def _step(engine, batch):
    # stands in for dropout: randomness drawn in the training step itself
    return batch, torch.rand(())


def _run(
    loader_kwargs: dict,
    stop_at: int | None = None,
    resume_from: dict | None = None,
    max_epochs: int = 3,
    end_epoch_at: tuple[int, ...] = (),
):
    """Return [(iteration, batch, step_noise)] and, when stop_at is set, the state_dict taken there."""
    dataset = NoisyDataset()
    loader = DataLoader(dataset, batch_size=4, shuffle=True, **loader_kwargs)
    engine = DeterministicEngine(_step)
    seen, saved = [], {}
    if end_epoch_at:
        engine.add_event_handler(Events.ITERATION_COMPLETED(once=list(end_epoch_at)), lambda e: e.terminate_epoch())
    engine.add_event_handler(
        Events.ITERATION_COMPLETED,
        lambda e: seen.append((e.state.iteration, e.state.output[0], e.state.output[1])),
    )
    if stop_at is not None:

        @engine.on(Events.ITERATION_COMPLETED(once=stop_at))
        def crash(e):
            saved.update(e.state_dict())
            e.terminate()

    if resume_from is not None:
        engine.load_state_dict(resume_from)
        torch.manual_seed(12345)  # a new process: the generators start anywhere
        random.seed(12345)
        engine.run(loader, max_epochs=max_epochs)
    else:
        engine.run(loader, max_epochs=max_epochs, seed=7)
    return seen, saved, dataset


def _assert_same(resumed, reference):
    assert [i for i, _, _ in resumed] == [i for i, _, _ in reference]
    for (i, batch, noise), (_, ref_batch, ref_noise) in zip(resumed, reference):
        assert torch.equal(batch, ref_batch), f"batch of iteration {i} differs"
        assert torch.equal(noise, ref_noise), f"step randomness of iteration {i} differs"


@pytest.mark.parametrize(
    "loader_kwargs",
    [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}],
    ids=["workers0", "workers2", "persistent"],
)
@pytest.mark.parametrize("stop_at", [3, 5, 7, 10])  # mid-epoch 1, at its end, mid-epoch 2, at its end
def test_resume_replays_batches_augmentations_and_step_randomness(loader_kwargs, stop_at):
    num_workers = loader_kwargs["num_workers"]
    reference, _, _ = _run(loader_kwargs)
    partial, saved, _ = _run(loader_kwargs, stop_at=stop_at)
    _assert_same(partial, reference[:stop_at])
    assert saved["seed"] == 7 and saved["iteration"] == stop_at and "rng_states" in saved

    resumed, _, dataset = _run(loader_kwargs, resume_from=saved)
    _assert_same(resumed, reference[stop_at:])
    if num_workers == 0:
        # skipped batches are skipped by index: only the samples still to come were loaded
        assert len(dataset.loaded) == 4 * (15 - stop_at)


def test_the_data_order_does_not_depend_on_worker_processes():
    in_process, _, _ = _run({"num_workers": 0})
    with_workers, _, _ = _run({"num_workers": 2})
    for (i, batch, _), (_, ref_batch, _) in zip(with_workers, in_process):
        assert torch.equal(batch, ref_batch), f"batch of iteration {i} differs"


@pytest.mark.parametrize("stop_at", [1, 3, 6])
def test_resume_after_terminate_epoch_started_a_pass_early(stop_at):
    reference, _, _ = _run({}, end_epoch_at=(2,))
    first_pass = [b[:, 0].tolist() for _, b, _ in reference[:2]]
    second_pass = [b[:, 0].tolist() for _, b, _ in reference[2:4]]
    assert first_pass != second_pass, "the pass started by terminate_epoch() must be a new pass"
    _, saved, _ = _run({}, stop_at=stop_at, end_epoch_at=(2,))
    resumed, _, _ = _run({}, resume_from=saved, end_epoch_at=(2,))
    # The data replays exactly. The run itself is longer: an Engine state_dict holds the iteration, not the
    # epoch, so the epoch cut short by terminate_epoch() cannot be told from a full one (as in Ignite).
    _assert_same(resumed[: len(reference) - stop_at], reference[stop_at:])


def test_resume_in_the_first_pass_of_data_without_length():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    def run(stop_at=None, resume_from=None):
        engine = DeterministicEngine(lambda e, b: b.tolist())
        seen, saved = [], {}
        engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.output))
        if stop_at:
            engine.add_event_handler(
                Events.ITERATION_COMPLETED(once=stop_at), lambda e: (saved.update(e.state_dict()), e.terminate())
            )
        loader = DataLoader(Stream(), batch_size=2)
        if resume_from:
            engine.load_state_dict(resume_from)
            state = engine.run(loader)
        else:
            state = engine.run(loader, max_epochs=3, seed=0)
        return seen, saved, state

    reference, _, _ = run()
    _, saved, _ = run(stop_at=2)
    assert saved["epoch_length"] is None
    resumed, _, state = run(resume_from=saved)
    assert resumed == reference[2:] and state.epoch_length == 5 and state.iteration == 15


def test_every_pass_is_reseeded_and_the_seed_decides_the_order():
    first, _, _ = _run({})
    again, _, _ = _run({})
    _assert_same(again, first)
    epoch1 = torch.cat([b[:, 0] for _, b, _ in first[:5]])
    epoch2 = torch.cat([b[:, 0] for _, b, _ in first[5:10]])
    assert sorted(epoch1.tolist()) == sorted(epoch2.tolist()) == [float(i) for i in range(20)]
    assert not torch.equal(epoch1, epoch2), "each pass must be shuffled differently"

    engine = DeterministicEngine(_step)
    orders = []
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: orders.append(e.state.output[0][:, 0].tolist()))
    engine.run(DataLoader(NoisyDataset(), batch_size=4, shuffle=True), max_epochs=1, seed=8)
    assert orders[0] != epoch1[-4:].tolist()


def test_sampler_with_its_own_generator_is_reseeded_too():
    def run(stop_at=None, resume_from=None):
        loader = DataLoader(NoisyDataset(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
        engine = DeterministicEngine(lambda e, b: b[:, 0].tolist())
        seen, saved = [], {}
        engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.output))
        if stop_at:
            engine.add_event_handler(
                Events.ITERATION_COMPLETED(once=stop_at), lambda e: (saved.update(e.state_dict()), e.terminate())
            )
        if resume_from:
            engine.load_state_dict(resume_from)
            engine.run(loader)
        else:
            engine.run(loader, max_epochs=2, seed=3)
        return seen, saved

    reference, _ = run()
    _, saved = run(stop_at=7)
    resumed, _ = run(resume_from=saved)
    assert resumed == reference[7:]


def test_plain_iterables_are_replayed_to_the_resume_point():
    data = list(range(6))
    reference = []
    DeterministicEngine(lambda e, b: reference.append(b)).run(data, max_epochs=2, seed=1)

    engine = DeterministicEngine(lambda e, b: b)
    engine.load_state_dict({"epoch_length": 6, "iteration": 8, "max_epochs": 2, "rng_states": None, "seed": 1})
    seen = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.batch))
    engine.run(data)
    assert seen == reference[8:] == [2, 3, 4, 5]


def test_plain_engine_does_not_replay_data_position():
    """The contrast that makes DeterministicEngine necessary: Engine restarts the data iterator on resume."""
    engine = Engine(lambda e, b: b)
    engine.load_state_dict({"epoch_length": 6, "iteration": 8, "max_epochs": 2})
    seen = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.batch))
    engine.run(list(range(6)))
    assert seen == [0, 1, 2, 3]


def test_loads_ignite_state_dicts_without_seed_and_warns():
    engine = DeterministicEngine(lambda e, b: b)
    with pytest.warns(UserWarning, match="no 'seed'.*run\\(seed=...\\)"):
        engine.load_state_dict({"epoch_length": 4, "iteration": 2, "max_epochs": 1, "rng_states": None})
    assert engine.state.seed is None
    state = engine.run(list(range(4)))
    assert state.iteration == 4 and isinstance(state.seed, int)


def test_needs_data():
    with pytest.raises(ValueError, match="needs data"):
        DeterministicEngine(lambda e, b: b).run(epoch_length=3)


def test_state_dataloader_is_the_reproducible_copy_and_keeps_settings():
    dataset = NoisyDataset()
    loader = DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, collate_fn=lambda items: len(items))
    engine = DeterministicEngine(lambda e, b: b)
    engine.run(loader)
    copy = engine.state.dataloader
    assert copy is not loader and copy.dataset.dataset is dataset
    assert copy.collate_fn is loader.collate_fn and len(copy) == len(loader) == 5
    assert engine.state.output == 4
