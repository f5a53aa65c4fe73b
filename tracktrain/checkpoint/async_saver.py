"""`AsyncSaver`: checkpoints are written in the background; the training loop only pays for a CPU snapshot.

`saver(checkpoint, filename, metadata)` copies every tensor of `checkpoint` to host memory (a clone: the
training step goes on changing the originals in place) and returns; a worker thread then serializes, writes,
and commits it through the wrapped saver. Around a saver that serializes before it returns (`FsspecSaver`,
`DiskSaver`), CUDA tensors are copied into page-locked host buffers kept from one save to the next, without
waiting: the copies are queued on the device's stream (so they read the state before any later step changes it)
and the worker thread waits for them, not the loop. Operations keep their order, so a retention `remove` queued after a
save runs only once that save is committed, and not at all if it failed. The next save, and `wait()` (called at
the end of training), wait for the previous one; a failed background write is raised there, naming the file.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from tracktrain.checkpoint.savers import CheckpointSkipped, CheckpointWriteError, FsspecSaver
from tracktrain.checkpoint.spool import Spool

__all__ = ["AsyncSaver", "PinnedStaging", "SaveHandler", "cpu_snapshot"]


class SaveHandler(Protocol):
    """What `AsyncSaver` wraps: a `Checkpoint` save handler (`BaseSaveHandler`'s two methods)."""

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None: ...

    def remove(self, filename: str) -> None: ...


class AsyncSaver:
    """Wraps a save handler (`FsspecSaver`, `DiskSaver`, or any `(checkpoint, filename, metadata)` callable with
    `remove`) so that saving returns after the snapshot.

    Around a saver of a directory (`FsspecSaver`, `DiskSaver`) it also shows that saver's `path_of`, `url`,
    `protected`, `spool`, `write_serialized` and `remove_now`, which `Checkpoint` and `ModelCheckpoint` use; around
    any other save handler those raise AttributeError."""

    def __init__(self, saver: SaveHandler) -> None:
        self.saver = saver
        self._queue: deque[tuple[str, Callable[[], None], bool]] = deque()  # (file, operation, is a save)
        # after a skipped save, what was queued for it (its retention, its callbacks) until the next save is dropped
        self._dropping_for_skipped = False
        self._condition = threading.Condition()
        self._busy = False
        self._error: BaseException | None = None
        self._failed_on: str | None = None
        self._thread: threading.Thread | None = None
        self._shared_copies: dict[tuple, tuple[torch.Tensor, torch.Tensor]] | None = None
        # page-locked buffers are reused by the next snapshot, so only around a saver that keeps no reference to
        # the checkpoint it was given (it serializes to bytes first); any other save handler gets fresh copies
        self._staging = PinnedStaging() if isinstance(saver, FsspecSaver) else None

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        if self._shared_copies is None:
            self.wait()  # one checkpoint in flight at most: memory stays at one snapshot, the buffers are free
            if self._staging is not None:
                self._staging.rewind()
        staging = self._staging
        snapshot = cpu_snapshot(checkpoint, self._shared_copies, staging)
        copied = staging.copies_done() if staging is not None else None

        def save() -> None:
            if copied is not None:
                copied()  # the device-to-host copies queued by the snapshot, waited for here, not in the loop
            self.saver(snapshot, filename, metadata)

        self._submit(filename, save, is_save=True)

    @contextlib.contextmanager
    def one_snapshot(self) -> Iterator[None]:
        """Saves made inside share one wait and one snapshot: several checkpoints of the same state at the same
        step (the top-k one and the latest one) cost the loop one copy, not a copy plus the first file's whole
        write, and memory holds one snapshot. Only for saves with no training in between: a tensor is copied
        once, the first time it is met inside."""
        self.wait()
        self._shared_copies = {}
        if self._staging is not None:
            self._staging.rewind()  # once for all the saves inside: they share one set of buffers
        try:
            yield
        finally:
            self._shared_copies = None

    def remove(self, filename: str) -> None:
        self._submit(filename, lambda: self.saver.remove(filename))

    def then(self, operation: Callable[[], None]) -> None:
        """Run `operation` in the background once everything queued before it is done (skipped if that failed)."""
        self._submit("", operation)

    @property
    def pending(self) -> bool:
        with self._condition:
            return bool(self._queue) or self._busy

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued save and removal is done (at most `timeout` seconds: then False). Raises
        what a background save raised, once."""
        with self._condition:
            finished = self._condition.wait_for(lambda: not (self._queue or self._busy), timeout)
            error, failed_on = self._error, self._failed_on
            self._error = self._failed_on = None
        if error is not None:
            if isinstance(error, CheckpointWriteError):  # says itself what was kept and what to do
                raise CheckpointWriteError(
                    error, failed_on or "", error.directory, error.size, when="in the background"
                ) from error
            raise RuntimeError(
                f"Saving checkpoint {failed_on!r} in the background failed: {error}. The previous checkpoints were "
                "kept; nothing queued after it (retention) was done."
            ) from error
        return finished

    # ------------------------------------------------------------------ the wrapped saver of a directory
    def path_of(self, filename: str) -> str | Path:
        """Where the wrapped saver stores `filename` (see `FsspecSaver.path_of`)."""
        return self._directory_saver("path_of").path_of(filename)

    @property
    def url(self) -> str:
        """The wrapped saver's directory."""
        return self._directory_saver("url").url

    @property
    def protected(self) -> set[str]:
        """The wrapped saver's names that `remove` never deletes (the set itself: callers add to it)."""
        return self._directory_saver("protected").protected

    @property
    def spool(self) -> Spool | None:
        """Where the wrapped saver keeps checkpoints while its store does not answer (None: it keeps none)."""
        return self._directory_saver("spool").spool

    def write_serialized(
        self, filename: str, data: bytes | memoryview, summary: Mapping[str, Any], metadata: Mapping | None = None
    ) -> None:
        """The wrapped saver's `write_serialized`, now, on the calling thread (not queued behind the background
        writes: call `wait()` first), for delivering what waits in its spool."""
        self._directory_saver("write_serialized").write_serialized(filename, data, summary, metadata)

    def remove_now(self, filename: str) -> None:
        """The wrapped saver's `remove_now`, now, on the calling thread (as `write_serialized`)."""
        self._directory_saver("remove_now").remove_now(filename)

    def _directory_saver(self, member: str) -> FsspecSaver:
        if not isinstance(self.saver, FsspecSaver):
            raise AttributeError(
                f"AsyncSaver.{member} is the wrapped saver's, and {type(self.saver).__name__} is not a saver of a "
                "directory (FsspecSaver, DiskSaver): use the wrapped save handler itself (AsyncSaver.saver)."
            )
        return self.saver

    def _submit(self, filename: str, operation: Callable[[], None], is_save: bool = False) -> None:
        with self._condition:
            self._queue.append((filename, operation, is_save))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="tracktrain-checkpoint-writer", daemon=True)
                self._thread.start()
            self._condition.notify_all()

    def _work(self) -> None:
        while True:
            with self._condition:
                if not self._queue:
                    self._condition.wait(5.0)  # idle a while, then let the thread go (a new save starts another)
                    if not self._queue:
                        self._thread = None
                        return
                filename, operation, is_save = self._queue.popleft()
                if is_save:
                    self._dropping_for_skipped = False
                elif self._dropping_for_skipped:
                    continue  # the retention or callback of a save that was skipped
                self._busy = True
            try:
                operation()
            except CheckpointSkipped as skipped:  # the store did not answer: said, and training goes on
                warnings.warn(str(skipped), stacklevel=1)
                with self._condition:
                    # what was queued for it is about a checkpoint that is not; the saves after it still run, in the
                    # same order on every rank (a sharded save is collective: a rank must not drop one another runs)
                    self._dropping_for_skipped = True
            except BaseException as error:  # kept for the training thread, which decides what to do
                with self._condition:
                    if self._error is None:
                        self._error, self._failed_on = error, filename
                    self._queue.clear()  # a removal must not follow a save that did not commit
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()


class PinnedStaging:
    """Page-locked host buffers for snapshots of CUDA tensors, kept from one snapshot to the next (pinning memory
    costs far more than copying into it, and a copy from the device into pageable memory waits for the device and
    runs at a fraction of the bus's speed). Buffers are matched by the order tensors are met, shape and dtype; one
    snapshot's set is in use until its save is done, so `rewind()` only once the previous save finished. Holds as
    much host memory as the device tensors of one checkpoint, for the life of its owner."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._next = 0
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def rewind(self) -> None:
        """The next snapshot may reuse every buffer (the previous snapshot's save is done)."""
        self._next = 0
        self._streams = {}

    def copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of the CUDA `tensor`, queued on its device's current stream (the stream the step that
        changes it next runs on, so the copy reads the state as it is now)."""
        index = self._next
        self._next += 1
        buffer = self._buffers[index] if index < len(self._buffers) else None
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            if index < len(self._buffers):
                self._buffers[index] = buffer
            else:
                self._buffers.append(buffer)
        buffer.copy_(tensor, non_blocking=True)
        self._streams.setdefault(tensor.device, torch.cuda.current_stream(tensor.device))
        return buffer

    def copies_done(self) -> Callable[[], None]:
        """A function that waits until every copy queued so far has landed (an event on each stream used)."""
        events = []
        for stream in self._streams.values():
            event = torch.cuda.Event()
            event.record(stream)
            events.append(event)

        def wait() -> None:
            for event in events:
                event.synchronize()

        return wait


def cpu_snapshot(
    state: Any,
    copies: dict[tuple, tuple[torch.Tensor, torch.Tensor]] | None = None,
    staging: PinnedStaging | None = None,
) -> Any:
    """`state` with every tensor copied to host memory, containers rebuilt, and other leaves deep copied; tensors
    that are the same view of the same memory (tied weights, which `state_dict` returns as two tensor objects) stay
    one tensor, so they are saved once and load tied. `copies` (view -> (source, copy)) carries the copies over to
    the next call, for a state that has not changed since (see `AsyncSaver.one_snapshot`); it holds each source, so
    no other tensor can take its memory meanwhile. Without `staging`, copies are pageable and done on return; with
    it, CUDA tensors go into its page-locked buffers and the copies are done once `staging.copies_done()`'s
    function returns."""
    kind = type(state)
    if kind in _ATOMS:  # most leaves: exact types first, before the isinstance checks (Mapping's is an ABC's)
        return state
    if (kind is list or kind is tuple) and _ATOMS.issuperset(map(type, state)):
        return kind(state)  # the RNG states: ~1250 ints a checkpoint, copied in one call, not one each
    copies = {} if copies is None else copies
    if isinstance(state, torch.Tensor):
        key = _view_key(state)
        if key not in copies:
            detached = state.detach()
            if detached.device.type == "cpu":
                copy_ = detached.clone()
            elif staging is not None and _plain_cuda_tensor(detached):
                copy_ = staging.copy(detached)
            else:
                copy_ = detached.to("cpu")
            # the source itself is held: a tensor known by its object (a DTensor) must keep its id meanwhile
            copies[key] = (state, copy_)
        return copies[key][1]
    if isinstance(state, Mapping):
        items = [(key, cpu_snapshot(value, copies, staging)) for key, value in state.items()]
        try:
            rebuilt = type(state)(items)  # type: ignore[call-arg]  # an OrderedDict stays one (a Mapping may not)
        except TypeError:
            rebuilt = dict(items)
        metadata = getattr(state, "_metadata", None)
        if metadata is not None:  # a module's state_dict carries version info its load_state_dict reads
            rebuilt._metadata = copy.deepcopy(metadata)  # type: ignore[attr-defined]
        return rebuilt
    if isinstance(state, (list, tuple)) and not hasattr(state, "_fields"):
        return type(state)(cpu_snapshot(value, copies, staging) for value in state)
    if isinstance(state, (str, bytes, int, float, bool, type(None))):
        return state
    return copy.deepcopy(state)


_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})  # immutable leaves, kept as they are


def _plain_cuda_tensor(tensor: torch.Tensor) -> bool:
    # what a page-locked buffer of the same shape holds: not a subclass (a DTensor's shards), not sparse
    return tensor.device.type == "cuda" and type(tensor) is torch.Tensor and tensor.layout == torch.strided


def _view_key(tensor: torch.Tensor) -> tuple:
    # sparse layouts, devices whose storages have no data pointer to read (XLA), and tensor subclasses that wrap
    # others (a DTensor's own storage is empty: every shard would look like the same view): by object
    wrapper = type(tensor) not in (torch.Tensor, torch.nn.Parameter)
    if wrapper or tensor.layout != torch.strided or tensor.device.type not in ("cpu", "cuda"):
        return ("object", id(tensor))
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.device,
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )
