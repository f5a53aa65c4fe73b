"""CombinedLoader: Lightning's modes and output (Lightning's own class as the oracle), and what Lightning's does not
do: each pass reproducible from its seed and resumable batch for batch, restarts included."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tracktrain.engine.combined_loader import COMBINED_MODES, CombinedLoader
from tracktrain.engine.deterministic import ResumableEngine

lightning_utilities = pytest.importorskip("lightning.pytorch.utilities")


class Counted(Dataset):
    """range(n) that counts the samples it loads."""

    def __init__(self, n: int, offset: int = 0) -> None:
        self.n, self.offset, self.loaded = n, offset, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.loaded += 1
        return index + self.offset


def plain(items):
    """A pass as comparable plain values (tensors to lists)."""
    return [torch.utils._pytree.tree_map(lambda v: v.tolist() if isinstance(v, torch.Tensor) else v, x) for x in items]


STRUCTURES = {
    "dict": lambda a, b: {"a": a, "b": b},
    "list": lambda a, b: [a, b],
    "tuple": lambda a, b: (a, b),
    "nested": lambda a, b: {"x": [a], "y": {"b": b}},
    "one": lambda a, b: a,
}


@pytest.mark.parametrize("mode", COMBINED_MODES)
@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_each_mode_and_structure_gives_what_lightnings_gives(mode, structure):
    def iterables():
        return STRUCTURES[structure](DataLoader(range(6), batch_size=4), DataLoader(range(15), batch_size=5))

    theirs = lightning_utilities.CombinedLoader(iterables(), mode)
    expected = plain(theirs)
    ours = CombinedLoader(iterables(), mode)
    assert plain(ours) == expected
    assert len(ours) == len(theirs)
    assert plain(ours) == expected  # a second pass: the same (unshuffled loaders)


def test_a_container_of_plain_values_is_one_loader_as_in_lightning():
    iterables = {"a": [1, 2, 3], "b": [[1, 2], [3, 4]]}
    for mode in COMBINED_MODES:
        assert plain(CombinedLoader(iterables, mode)) == plain(lightning_utilities.CombinedLoader(iterables, mode))


def shuffled(n: int, batch_size: int, offset: int = 0, **options) -> DataLoader:
    return DataLoader(Counted(n, offset), batch_size=batch_size, shuffle=True, **options)


def combined(mode: str, **options) -> CombinedLoader:
    """a: 3 batches, b: 5 batches; both shuffled."""
    return CombinedLoader({"a": shuffled(12, 4, **options), "b": shuffled(20, 4, offset=100, **options)}, mode)


@pytest.mark.parametrize("mode", COMBINED_MODES)
def test_a_pass_is_a_function_of_the_global_seed_and_restarts_reshuffle(mode):
    torch.manual_seed(0)
    first = plain(combined(mode))
    torch.manual_seed(0)
    assert plain(combined(mode)) == first
    torch.manual_seed(1)
    assert plain(combined(mode)) != first
    if mode == "max_size_cycle":
        a = [batch["a"] for batch, _, _ in first]
        assert sorted(itertools.chain(*a[:3])) == list(range(12))  # a's first pass: every sample once
        assert a[3:5] != a[0:2]  # its second start: drawn anew


@pytest.mark.parametrize("mode", COMBINED_MODES)
@pytest.mark.parametrize("where", ["after-one", "midway", "before-the-last"])
def test_a_pass_resumed_from_its_state_continues_exactly_without_loading_what_was_read(mode, where):
    torch.manual_seed(7)
    whole = plain(combined(mode))
    # max_size_cycle: a starts again at batch 3, so "before-the-last" (4) resumes its second start
    cut = {"after-one": 1, "midway": len(whole) // 2, "before-the-last": len(whole) - 1}[where]
    torch.manual_seed(7)
    cut_short = combined(mode)
    iterator = iter(cut_short)
    before = plain(itertools.islice(iterator, cut))
    state = cut_short.state_dict()
    del iterator

    resumed = combined(mode)
    resumed.load_state_dict(state)
    torch.manual_seed(12345)  # the global generator does not matter: the pass's seed is in the state
    after = plain(resumed)
    assert before + after == whole
    loaded = sum(loader.dataset.loaded for loader in resumed.flattened)
    consumed = sum(
        1 for batch, _, _ in after for sample in torch.utils._pytree.tree_leaves(batch) if sample is not None
    )
    # the samples before the cut are not loaded again; at most one batch more: the one min_size/max_size_cycle take
    # from a loader before another runs dry and ends the pass (Lightning's order)
    assert consumed <= loaded <= consumed + 4


def test_with_workers_the_pass_is_the_same_as_without():
    torch.manual_seed(3)
    without = plain(combined("max_size_cycle"))
    torch.manual_seed(3)
    assert plain(combined("max_size_cycle", num_workers=2)) == without


def test_under_a_resumable_engine_a_run_resumed_mid_pass_reads_what_the_uninterrupted_one_read():
    def run(engine_state=None, max_epochs=3):
        seen = []
        engine = ResumableEngine(lambda engine, batch: seen.append(plain([batch])[0]))
        if engine_state is not None:
            engine.load_state_dict(engine_state)
        engine.run(combined("max_size_cycle").batches(), max_epochs=max_epochs, seed=11)
        return engine, seen

    _, uninterrupted = run()
    cut = ResumableEngine(lambda engine, batch: engine.terminate() if engine.state.iteration == 7 else None)
    cut.run(combined("max_size_cycle").batches(), max_epochs=3, seed=11)
    state = cut.state_dict()
    assert state["data_state"]["given"] == 2  # epoch 2's second batch: the engine saved the loader's place
    _, resumed = run(state)
    assert resumed == uninterrupted[7:]


def test_bad_mode_loader_and_state_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"Unsupported mode 'zip'.*min_size"):
        CombinedLoader([[1]], "zip")
    with pytest.raises(TypeError, match="takes loaders.*got int: 3"):
        CombinedLoader({"a": 3, "b": [1]})
    state = {"mode": "min_size", "seed": 1, "given": 1, "current": 0, "loaders": [[1, 1, False]]}
    with pytest.raises(ValueError, match=r"mode='max_size'.*2 loaders.*mode='min_size' and 1 loaders"):
        CombinedLoader([[1], [2]], "max_size").load_state_dict(state)


def test_a_loader_without_length_makes_the_combined_length_unknown_except_when_another_is_empty():
    stream = iter(range(3))
    with pytest.raises(TypeError, match="no length"):
        len(CombinedLoader({"a": [1, 2], "b": map(int, stream)}, "max_size_cycle"))
    assert len(CombinedLoader({"a": [], "b": map(int, stream)}, "min_size")) == 0
