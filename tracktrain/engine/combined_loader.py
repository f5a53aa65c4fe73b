"""CombinedLoader (Lightning's): several loaders read together, one batch of each per step, or one after the other.

`CombinedLoader(iterables, mode)` takes a loader, or a dict, list or tuple of them (nested too), and yields
`(batch, batch_idx, dataloader_idx)` as Lightning's does; `batch` has the structure of `iterables`, with one batch of
each loader. The modes are Lightning's:

- "min_size": a pass ends with the shortest loader;
- "max_size_cycle": it ends with the longest, the others started again each time they run dry;
- "max_size": it ends with the longest, the others giving None once dry;
- "sequential": each loader's batches in turn, `dataloader_idx` saying whose.

What Lightning's does not: every pass is reproducible and resumable batch for batch. Each start of an inner loader
(its first in a pass, and each restart under "max_size_cycle") draws its order from its own seed, a function of the
pass's seed (drawn from torch's generator at `iter()`, which a `ResumableEngine` seeds for the pass), the loader's
place and the start's count; `state_dict()` saves the pass's seed and where each loader is, and `load_state_dict()`
makes the next `iter()` continue there, skipping the batches already read by index (nothing is loaded twice). Under a
`ResumableEngine` (the Trainer's) this happens by itself: the engine saves the state with its own and restores it on
resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.data import DataLoader

from tracktrain.engine.deterministic import make_reproducible, open_pass
from tracktrain.rng import get_rng_states, set_rng_states

__all__ = ["COMBINED_MODES", "CombinedBatches", "CombinedLoader", "loaders_in"]

COMBINED_MODES = ("min_size", "max_size_cycle", "max_size", "sequential")
_SEED_SPACE = 2**62
_SEED_STRIDE = 0x9E3779B97F4A7C15  # an odd constant that spreads the starts' seeds (the golden ratio's bits)


def _is_leaf(tree: Any) -> bool:
    # Lightning's rule: a container of plain values (a list of ints, ...) is one iterable, not several
    if pytree._get_node_type(tree) not in pytree.SUPPORTED_NODES:
        return True
    children, _ = pytree.tree_flatten(tree, is_leaf=lambda node: node is not tree)
    return all(isinstance(child, (int, float, str)) for child in children)


def loaders_in(collection: Any) -> list[DataLoader] | None:
    """The DataLoaders of Lightning's collection of loaders (a dict, list or tuple of them, nested too), in order;
    None when `collection` is not one (a loader, or a list of batches: only DataLoaders make a collection)."""
    if _is_leaf(collection):
        return None
    flattened, _ = pytree.tree_flatten(collection, is_leaf=_is_leaf)
    if flattened and all(isinstance(item, DataLoader) for item in flattened):
        return flattened
    return None


class CombinedLoader(Iterable):
    """Loaders read together (see the module's description).

    Args:
        iterables: a loader (any iterable of batches), or a dict, list or tuple of them.
        mode: "min_size" (Lightning's default), "max_size_cycle", "max_size" or "sequential".
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in COMBINED_MODES:
            raise ValueError(f"Unsupported mode {mode!r}, please select one of: {list(COMBINED_MODES)}.")
        flattened, self._spec = pytree.tree_flatten(iterables, is_leaf=_is_leaf)
        for loader in flattened:
            if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, Mapping)):
                raise TypeError(
                    f"CombinedLoader takes loaders (iterables of batches), or a dict, list or tuple of them; got "
                    f"{type(loader).__name__}: {loader!r:.80}."
                )
        self._iterables = iterables
        self._flattened: list[Any] = list(flattened)
        self._mode = mode
        self._readers: list[Any] | None = None  # the loaders as read: DataLoaders made reproducible, made once
        self._pass: _Pass | None = None  # the pass under way (what state_dict saves)
        self._loaded: dict[str, Any] | None = None  # a state to continue from at the next iter()

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def iterables(self) -> Any:
        """The loaders as given: a loader, or the dict, list or tuple of them."""
        return self._iterables

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in order (a dict's in its order)."""
        return list(self._flattened)

    @property
    def sampler(self) -> Any:
        """Each loader's sampler, in the structure of `iterables`."""
        return pytree.tree_unflatten([getattr(it, "sampler", None) for it in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        """Each loader's batch sampler, in the structure of `iterables`."""
        return pytree.tree_unflatten([getattr(it, "batch_sampler", None) for it in self._flattened], self._spec)

    def map(self, function: Callable[[Any], Any]) -> CombinedLoader:
        """A CombinedLoader of the same mode and structure over `function(loader)` for each loader (how the Trainer
        shards each for its strategy)."""
        return CombinedLoader(pytree.tree_unflatten([function(it) for it in self._flattened], self._spec), self._mode)

    def lengths(self) -> list[int | None]:
        """Each loader's length; None for one without."""
        lengths: list[int | None] = []
        for loader in self._flattened:
            try:
                lengths.append(len(loader))
            except TypeError:
                lengths.append(None)
        return lengths

    def __len__(self) -> int:
        """The batches of one pass: the shortest loader's ("min_size"), the longest's ("max_size_cycle",
        "max_size") or their sum ("sequential"). A TypeError when a loader it depends on has no length."""
        lengths = self.lengths()
        known = [length for length in lengths if length is not None]
        if self._mode == "min_size" and known and min(known) == 0:
            return 0
        if len(known) < len(lengths):
            raise TypeError("CombinedLoader: one of its loaders has no length")
        if not known:
            return 0
        if self._mode == "sequential":
            return sum(known)
        return min(known) if self._mode == "min_size" else max(known)

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        """A pass: `(batch, batch_idx, dataloader_idx)` for each step, as Lightning's."""
        if self._readers is None:
            self._readers = [make_reproducible(it) if isinstance(it, DataLoader) else it for it in self._flattened]
        loaded, self._loaded = self._loaded, None
        self._pass = _Pass(self._readers, self._mode, loaded)
        return self._pass.steps(self._spec)

    def batches(self) -> CombinedBatches:
        """This loader as an iterable of the batches alone (how a training loop reads it; Lightning's loop unpacks
        the triples the same way)."""
        return CombinedBatches(self)

    def state_dict(self) -> dict[str, Any]:
        """Where the pass under way is: its seed, the batches it gave, and each loader's starts and position."""
        if self._pass is None:
            return {}
        return self._pass.state()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """The next `iter()` continues the saved pass (an empty state: a new pass)."""
        if not state_dict:
            self._loaded = None
            return
        if len(state_dict["loaders"]) != len(self._flattened) or state_dict.get("mode") != self._mode:
            raise ValueError(
                f"This CombinedLoader (mode={self._mode!r}, {len(self._flattened)} loaders) cannot continue a pass "
                f"saved by one with mode={state_dict.get('mode')!r} and {len(state_dict['loaders'])} loaders: "
                "resume with the loaders the checkpoint was saved with."
            )
        self._loaded = dict(state_dict)

    def __repr__(self) -> str:
        return f"CombinedLoader({self._iterables!r}, mode={self._mode!r})"


class CombinedBatches(Iterable):
    """A CombinedLoader's batches without their indices; its length and state are the loader's."""

    def __init__(self, combined: CombinedLoader) -> None:
        self.combined = combined

    def __iter__(self) -> Iterator[Any]:
        return (batch for batch, _, _ in self.combined)

    def __len__(self) -> int:
        return len(self.combined)

    def state_dict(self) -> dict[str, Any]:
        return self.combined.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.combined.load_state_dict(state_dict)


class _Pass:
    """One pass of a CombinedLoader: each loader's iterator, how many times it was started and how far it is."""

    def __init__(self, readers: list[Any], mode: str, loaded: Mapping[str, Any] | None) -> None:
        self.readers, self.mode = readers, mode
        if loaded is None:
            self.seed = int(torch.randint(0, _SEED_SPACE, ()).item())
            self.given = 0  # batches of the pass given so far (batch_idx of the next)
            self.starts = [0] * len(readers)  # starts of each loader in this pass (restarts: > 1)
            self.positions = [0] * len(readers)  # batches each read since its last start
            self.dry = [False] * len(readers)  # ran dry at least once ("max_size_cycle", "max_size")
            self.current = 0  # "sequential": the loader being read
        else:
            self.seed, self.given, self.current = int(loaded["seed"]), int(loaded["given"]), int(loaded["current"])
            self.starts = [int(start) for start, _, _ in loaded["loaders"]]
            self.positions = [int(position) for _, position, _ in loaded["loaders"]]
            self.dry = [bool(dry) for _, _, dry in loaded["loaders"]]
        self.iterators: list[Iterator[Any] | None] = [None] * len(readers)

    def state(self) -> dict[str, Any]:
        loaders = [[start, position, dry] for start, position, dry in zip(self.starts, self.positions, self.dry)]
        return {"mode": self.mode, "seed": self.seed, "given": self.given, "current": self.current, "loaders": loaders}

    def _open(self, index: int, restart: bool) -> Iterator[Any]:
        """Loader `index`'s iterator: a new start (`restart`), or the one under way continued where it was."""
        if restart:
            self.starts[index] += 1
            self.positions[index] = 0
        elif self.starts[index] == 0:
            self.starts[index] = 1
        start = self.starts[index]
        # its own seed for each start, the same on every rank (a distributed sampler's epoch too)
        seed = (self.seed + _SEED_STRIDE * (index * 2**20 + start)) % _SEED_SPACE
        saved = get_rng_states()  # the global generators are left as they were: the step's draws do not depend on it
        try:
            iterator, _ = open_pass(self.readers[index], seed, seed % 2**31, self.positions[index])
        finally:
            set_rng_states(saved)
        self.iterators[index] = iterator
        return iterator

    def _next(self, index: int) -> Any:
        """Loader `index`'s next batch (StopIteration when it is dry)."""
        iterator = self.iterators[index]
        if iterator is None:
            iterator = self._open(index, restart=False)
        batch = next(iterator)
        self.positions[index] += 1
        return batch

    def steps(self, spec: Any) -> Iterator[tuple[Any, int, int]]:
        if self.mode == "sequential":
            yield from self._sequential()
            return
        step = {"min_size": self._min_size, "max_size_cycle": self._max_size_cycle, "max_size": self._max_size}
        take = step[self.mode]
        while True:
            try:
                out = take()
            except StopIteration:
                return
            index, self.given = self.given, self.given + 1
            yield pytree.tree_unflatten(out, spec), index, 0

    def _min_size(self) -> list[Any]:
        return [self._next(index) for index in range(len(self.readers))]

    def _max_size_cycle(self) -> list[Any]:
        out = []
        for index in range(len(self.readers)):
            try:
                out.append(self._next(index))
            except StopIteration:
                self.dry[index] = True
                if all(self.dry):
                    raise
                self._open(index, restart=True)  # started again, as Lightning's: the others are not dry yet
                out.append(self._next(index))
        return out

    def _max_size(self) -> list[Any]:
        out: list[Any] = []
        for index in range(len(self.readers)):
            if self.dry[index]:
                out.append(None)
                continue
            try:
                out.append(self._next(index))
            except StopIteration:
                self.dry[index] = True
                out.append(None)
        if all(self.dry):
            raise StopIteration
        return out

    def _sequential(self) -> Iterator[tuple[Any, int, int]]:
        while self.current < len(self.readers):
            try:
                batch = self._next(self.current)
            except StopIteration:
                self.iterators[self.current] = None
                self.current += 1
                continue
            yield batch, self.positions[self.current] - 1, self.current
