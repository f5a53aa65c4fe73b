"""ResumableEngine and DeterministicEngine: a run resumed from a checkpoint sees the same batches, in the same order,
with the same random augmentations as the run that was never interrupted. (DeterministicEngine, Ignite's name, also
selects deterministic CUDA kernels; the Trainer trains on a ResumableEngine, so exact resume is its default.)

How:

- Every pass over the data starts from a known seed, `state.seed + pass_index`, where
  `pass_index = iteration // len(data)`. The shuffle order is drawn right then (the batch sampler below
  materialises a whole pass eagerly), so it depends on nothing that happens later in the epoch.
- Resuming mid-pass skips the batches already seen by index: the sampler drops the first `k` batches of the
  re-drawn order, so skipped samples are never loaded.
- For a map-style DataLoader every batch carries its own seed, and the dataset wrapper seeds the generators
  with it just before loading that batch, in whichever process loads it. Random augmentations are therefore
  a function of (seed, pass, batch position), identical with `num_workers=0` or `> 0` and after a resume.
- `state_dict()` also saves the seed and the generators' states; a mid-pass resume restores them, so
  randomness in the model (dropout, ...) continues exactly.
- Data that keeps its own position (a loader with `state_dict()`/`load_state_dict()`, such as torchdata's
  `StatefulDataLoader`, or a DataLoader over an `IterableDataset` that has them, read in the main process) is
  left as it is: its state is saved with the engine's and loaded back on resume, instead of skipping batches.
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset

from tracktrain.engine.engine import Engine
from tracktrain.engine.events import Events
from tracktrain.engine.state import State
from tracktrain.rng import get_rng_states, manual_seed, set_rng_states

__all__ = [
    "DeterministicEngine",
    "ReproducibleBatchSampler",
    "ResumableEngine",
    "make_reproducible",
    "open_pass",
    "seed_pass",
    "stateful_data",
]

_SEED_SPACE = 2**62


class _SeededIndices(list):
    """The sample indices of one batch, plus the seed the batch is loaded with (survives pickling to workers)."""

    seed: int


class ReproducibleBatchSampler(BatchSampler):
    """Wraps a batch sampler: draws a whole pass at `iter()`, can start at a given batch, seeds each batch.

    Args:
        batch_sampler: the DataLoader's batch sampler.
        start_iteration: batches of the next pass to skip (set by the engine on resume).
    """

    # Copied from the wrapped batch sampler: `Sampler | Iterable[int] | None` and `int | None`, None where it has
    # none (any batch sampler can be wrapped). Any, because BatchSampler declares both as always set and a
    # subclass may not widen an attribute's type.
    sampler: Any
    batch_size: Any

    def __init__(self, batch_sampler: Any, start_iteration: int | None = None) -> None:
        # BatchSampler.__init__ would demand a batch size; this wraps any batch sampler instead.
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = getattr(batch_sampler, "drop_last", False)
        self.start_iteration = start_iteration
        self.pass_seed: int | None = None

    def __iter__(self) -> Iterator[list[int]]:
        # start_iteration and pass_seed are left as they are: a multi-process DataLoader calls iter() twice when
        # it creates its iterator (and a persistent one once per pass), and every call must draw the same pass.
        start = self.start_iteration or 0
        if self.pass_seed is None:
            return self._draw(start)
        # The pass is drawn from its own seed with the global generators set aside, so it is the same however
        # many other draws the DataLoader makes around it (persistent workers or not, num_workers 0 or > 0).
        saved = get_rng_states()
        try:
            manual_seed(self.pass_seed)
            own_generator = getattr(self.sampler, "generator", None)
            if isinstance(own_generator, torch.Generator):
                own_generator.manual_seed(self.pass_seed)
            return self._draw(start)
        finally:
            set_rng_states(saved)

    def _draw(self, start: int) -> Iterator[list[int]]:
        batches = list(self.batch_sampler)
        seed_base = int(torch.randint(0, _SEED_SPACE, ()).item())
        seeded = []
        for position in range(start, len(batches)):
            indices = _SeededIndices(batches[position])
            indices.seed = (seed_base + position) % _SEED_SPACE
            seeded.append(indices)
        return iter(seeded)

    def __len__(self) -> int:
        return len(self.batch_sampler)


class _BatchSeededDataset(Dataset):
    """Loads each batch under the seed its ReproducibleBatchSampler gave it. The original is `.dataset`."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        seed = getattr(indices, "seed", None)
        if seed is not None:
            manual_seed(seed)
        inner = getattr(self.dataset, "__getitems__", None)
        if inner is not None:
            return inner(list(indices))
        return [self.dataset[i] for i in indices]


# DataLoader arguments that describe *how* batches are formed; the rebuilt loader replaces them.
_REPLACED_LOADER_ARGS = {"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}


def stateful_data(data: Any) -> Any:
    """What keeps the position of `data` itself, if anything: the loader when it has `state_dict()` and
    `load_state_dict()` (torchdata's `StatefulDataLoader`), or the `IterableDataset` of a DataLoader that reads it
    in this process (with workers, each worker holds a copy: only a StatefulDataLoader can gather their states)."""
    if _has_state(data):
        return data
    dataset = getattr(data, "dataset", None)
    if isinstance(data, DataLoader) and isinstance(dataset, IterableDataset) and _has_state(dataset):
        return dataset if data.num_workers == 0 else None
    return None


def _has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def make_reproducible(loader: DataLoader) -> DataLoader:
    """A copy of `loader` whose batches are reproducible by pass and position (see the module docstring).

    Loaders over iterable datasets, or without automatic batching, are returned unchanged.
    """
    from torch.utils.data.dataloader import _DatasetKind

    if getattr(loader, "_dataset_kind", _DatasetKind.Map) != _DatasetKind.Map or loader.batch_sampler is None:
        return loader
    if stateful_data(loader) is not None:
        return loader  # it restores its own position; a rebuilt copy would lose that
    if isinstance(loader.batch_sampler, ReproducibleBatchSampler):
        return loader
    kwargs = {
        name: getattr(loader, name)
        for name in inspect.signature(DataLoader.__init__).parameters
        if name not in _REPLACED_LOADER_ARGS and hasattr(loader, name)
    }
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
    return DataLoader(
        _BatchSeededDataset(loader.dataset), batch_sampler=ReproducibleBatchSampler(loader.batch_sampler), **kwargs
    )


class ResumableEngine(Engine):
    """An Engine whose runs are reproducible and resumable batch for batch.

    Differences from `Engine`: data is required; a DataLoader is rebuilt with a `ReproducibleBatchSampler`
    (`engine.state.dataloader` is that copy); every pass over the data is reseeded from `state.seed` (given
    to `run(seed=...)`, or drawn from torch's generator at the start of the run); and `state_dict()` saves
    `seed`, `rng_states` and, for data that keeps its own position, `data_state` (see the module docstring).
    """

    def __init__(self, process_function: Any, restart_data_each_epoch: bool = False) -> None:
        super().__init__(process_function)
        # Lightning's loop (the Trainer's engine): every epoch starts a new pass over the data, also when the one
        # before took only `epoch_length` of its batches (`limit_train_batches`); Ignite's continues that pass
        self.restart_data_each_epoch = restart_data_each_epoch
        # Which pass over the data is running and at which iteration it started. Counted, not derived from
        # the iteration, because terminate_epoch() and set_data() start passes early.
        self._pass_index = 0
        self._pass_start = 0
        # set by load_state_dict: the saved (pass index, pass start), or "derive" for state dicts without them
        self._loaded_pass: tuple[int, int] | str | None = None
        self._loaded_data_state: Any = None  # the saved position of data that keeps its own, applied on resume
        self.state_dict_user_keys.append("rng_states")
        if not hasattr(self.state, "rng_states"):
            self.state.rng_states = None

    def state_dict(self) -> OrderedDict:
        state_dict = super().state_dict()
        state_dict["rng_states"] = get_rng_states()
        state_dict["seed"] = self.state.seed
        state_dict["data_pass"] = (self._pass_index, self._pass_start)
        keeper = stateful_data(self.state.dataloader)
        if keeper is not None:
            state_dict["data_state"] = keeper.state_dict()
        return state_dict

    def load_state_dict(self, state_dict: Mapping) -> None:
        super().load_state_dict(state_dict)
        # seed and data_pass are optional, so that state dicts saved by Ignite's DeterministicEngine still load
        self.state.seed = state_dict.get("seed")
        if self.state.seed is None:
            warnings.warn(
                "The state_dict has no 'seed' (it was not saved by tracktrain's DeterministicEngine): the resumed "
                "run draws a new seed and will not replay the original data order. Pass the original seed to "
                "run(seed=...) to replay it.",
                stacklevel=2,
            )
        data_pass = state_dict.get("data_pass")
        self._loaded_pass = (int(data_pass[0]), int(data_pass[1])) if data_pass is not None else "derive"
        self._loaded_data_state = state_dict.get("data_state")

    def _pass_length(self) -> int:
        assert self.state.dataloader is not None  # only called by _setup_engine, which rejects data=None
        length = self._get_data_length(self.state.dataloader)
        return length or self.state.epoch_length or 1

    def _setup_engine(self) -> None:
        data = self.state.dataloader
        if data is None:
            raise ValueError(
                "DeterministicEngine needs data to run on (it reseeds and replays it); got data=None. Pass an "
                "iterable to run(), or use Engine for runs without data."
            )
        if self.state.seed is None:  # run(seed=None) on a fresh run: a drawn seed, saved by state_dict()
            self.state.seed = int(torch.randint(0, int(1e9), (1,)).item())
        if isinstance(data, DataLoader):
            if hasattr(data.sampler, "set_epoch") and self._get_data_length(data) != self.state.epoch_length:
                warnings.warn(
                    f"epoch_length={self.state.epoch_length} differs from the DataLoader's length "
                    f"{self._get_data_length(data)}: the distributed sampler's epoch follows passes over the data, "
                    "not engine epochs.",
                    stacklevel=5,  # the caller of run() (frames: here, _internal_run_as_gen, _advance_run, run)
                )
            self.state.dataloader = make_reproducible(data)

        iteration = self.state.iteration
        if iteration == 0:
            self._pass_index, self._pass_start = 0, 0
        elif isinstance(self._loaded_pass, tuple):
            self._pass_index, self._pass_start = self._loaded_pass
        elif self._get_data_length(data) is None and (self._loaded_pass == "derive" or self._pass_start > iteration):
            # a state dict without pass bookkeeping (Ignite's) over data without a length (an endless stream):
            # Ignite's rule, the data replayed from its start up to the iteration (the passes it ran dry are
            # found on the way)
            self._pass_index, self._pass_start = 0, 0
        elif self._loaded_pass == "derive" or self._pass_start > iteration:
            # a state dict without pass bookkeeping (Ignite's): passes are assumed to have been full
            length = self._pass_length()
            self._pass_index, self._pass_start = iteration // length, iteration - iteration % length
        self._loaded_pass = None
        position = iteration - self._pass_start
        data_state, self._loaded_data_state = self._loaded_data_state, None
        self._dataloader_iter = self._pass_iterator(skip=position, data_state=data_state)
        if self._init_iter is None:
            self._init_iter = iteration % self.state.epoch_length if self.state.epoch_length else iteration
        rng_states = getattr(self.state, "rng_states", None)
        if rng_states is not None and position > 0:
            # resuming mid-pass: continue the generators from where the saved run was
            set_rng_states(rng_states)
        self.state.rng_states = None

    def replace_data(self, data: Any, epoch_length: int | None) -> None:
        """Between epochs (Lightning's `reload_dataloaders_every_n_epochs`): the next epoch reads `data`, a new pass
        reseeded as every pass is, for `epoch_length` batches (None: its length)."""
        self.state.dataloader = make_reproducible(data) if isinstance(data, DataLoader) else data
        self.state.epoch_length = epoch_length or self._get_data_length(data) or self.state.epoch_length
        self._setup_dataloader_iter()

    def _run_once_on_dataset_as_gen(self) -> Generator[State, None, float]:
        starts_an_epoch = not self._init_iter  # not a resume in the middle of one
        if self.restart_data_each_epoch and starts_an_epoch and self.state.iteration > self._pass_start:
            self._setup_dataloader_iter()  # the epoch before left this pass part-read: a new one, reseeded
        return (yield from super()._run_once_on_dataset_as_gen())

    def _setup_dataloader_iter(self) -> None:
        # a fresh pass: the data ran dry, or terminate_epoch() ended the epoch early
        self._pass_index += 1
        self._pass_start = self.state.iteration
        self._dataloader_iter = self._pass_iterator(skip=0)

    def _pass_iterator(self, skip: int, data_state: Any = None) -> Iterator[Any]:
        """An iterator over the current pass, `skip` batches in, with every generator seeded for the pass. Data
        that keeps its own position is set to `data_state` (saved `skip` batches in) rather than skipped."""
        data, seed = self.state.dataloader, self.state.seed
        # _setup_engine rejects data=None and draws a seed before any pass; set_data() only takes iterables
        assert data is not None and seed is not None
        pass_seed = seed + self._pass_index
        keeper = stateful_data(data) if data_state is not None else None
        if keeper is not None:  # its own position, also at a pass boundary (an iterable may count its passes)
            seed_pass(data, pass_seed, self._pass_index)
            keeper.load_state_dict(data_state)
            iterator = iter(data)
            manual_seed(pass_seed)
            return iterator
        iterator, skipped = open_pass(data, pass_seed, self._pass_index, skip)
        if skipped < skip:  # it ran dry on the way: the next pass, as the run that saved it went on
            self._pass_index += 1
            self._pass_start += skipped
            return self._pass_iterator(skip - skipped)
        return iterator


def seed_pass(data: Any, pass_seed: int, epoch: int) -> None:
    """Seed what draws a pass of `data`: its sampler's or loader's own generator, a distributed sampler's epoch
    (`epoch`, the same on every rank), and the global generators (worker seeds, an unwrapped sampler's shuffle)."""
    batch_sampler = getattr(data, "batch_sampler", None)
    # the sampler that orders the data: inside our batch sampler when the loader was made reproducible
    sampler = getattr(batch_sampler, "sampler", None) or getattr(data, "sampler", None)
    own_generators = (getattr(sampler, "generator", None), getattr(data, "generator", None))
    for generator in dict.fromkeys(g for g in own_generators if isinstance(g, torch.Generator)):
        generator.manual_seed(pass_seed)  # a sampler or loader with its own generator ignores the global seed
    if sampler is not None and hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    manual_seed(pass_seed)


def open_pass(data: Any, pass_seed: int, epoch: int, skip: int = 0) -> tuple[Iterator[Any], int]:
    """An iterator over one pass of `data` drawn from `pass_seed` (`seed_pass`), `skip` batches in, and how many
    batches it skipped: fewer than `skip` when data without index access ran dry on the way. A loader made
    reproducible skips by index (the skipped samples are never loaded); other data is replayed up to `skip`."""
    seed_pass(data, pass_seed, epoch)
    batch_sampler = getattr(data, "batch_sampler", None)
    if isinstance(batch_sampler, ReproducibleBatchSampler):
        batch_sampler.start_iteration, batch_sampler.pass_seed = skip, pass_seed
        try:
            iterator = iter(data)
        finally:
            batch_sampler.start_iteration = None
    else:
        iterator = iter(data)
        for skipped in range(skip):
            try:
                next(iterator)
            except StopIteration:
                return iterator, skipped
        if skip > 0:
            # the generators are where the replayed batches left them, as in the run that saved
            return iterator, skip
    # and again after iter(): the training step's randomness starts the same however many draws iter() made
    manual_seed(pass_seed)
    return iterator, skip


class DeterministicEngine(ResumableEngine):
    """Ignite's DeterministicEngine: a `ResumableEngine` that also selects deterministic algorithms on CUDA (as
    Ignite does) when a run starts."""

    def __init__(self, process_function: Any) -> None:
        super().__init__(process_function)
        # A plain function, not a bound method: the engine's handler list then holds no reference to itself.
        self.add_event_handler(Events.STARTED, _use_deterministic_algorithms)


def _use_deterministic_algorithms(engine: DeterministicEngine) -> None:
    if torch.cuda.is_available():
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
