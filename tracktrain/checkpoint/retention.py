"""Which checkpoints `Checkpoint` keeps: a checkpoint's priority (its score, or else its step), whether a new one
makes the cut, which ones it pushes out, the committed ones a resumed run adopts, and the kept list as a state
dict, checked when it is read back (retention deletes the files it names)."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from tracktrain.checkpoint.discovery import CommittedCheckpoint
from tracktrain.checkpoint.manifest import is_plain_name
from tracktrain.checks.numeric import is_real
from tracktrain.engine import Engine

__all__ = ["Item", "adopted", "items_of", "makes_the_cut", "metric_score", "state_dict_of", "with_new_item"]


class Item(NamedTuple):
    """A kept checkpoint: its priority (the higher, the longer it is kept) and its file name."""

    priority: int | float
    filename: str


def metric_score(metric_name: str, score_sign: float = 1.0) -> Callable[[Engine], float]:
    """A score function reading `engine.state.metrics[metric_name]`; `score_sign=-1.0` for losses."""
    if score_sign not in (1.0, -1.0):
        raise ValueError(f"Argument score_sign should be 1 or -1, got {score_sign!r}.")

    def score(engine: Engine) -> float:
        return score_sign * engine.state.metrics[metric_name]

    return score


def makes_the_cut(saved: Sequence[Item], priority: int | float, n_saved: int | None, greater_or_equal: bool) -> bool:
    """Whether a checkpoint of `priority` is kept, with `saved` kept so far (sorted by priority, worst first)."""
    if n_saved is None or len(saved) < n_saved:
        return True
    # the worst of the n_saved best: the first one unless the list holds more (adopted, see `adopted`)
    worst = saved[-n_saved].priority
    return priority >= worst if greater_or_equal else priority > worst


def with_new_item(saved: Sequence[Item], item: Item, n_saved: int | None) -> tuple[list[Item], list[Item]]:
    """The kept list once `item` is saved (sorted by priority, worst first), and the items it pushes out: one
    when the list was full, more when it held more than `n_saved` (after `adopted`)."""
    kept = [old for old in saved if old.filename != item.filename]  # replaced under the same name
    kept.append(item)
    kept.sort(key=lambda old: old.priority)  # stable: among equal priorities, the oldest goes first
    surplus = max(len(kept) - n_saved, 0) if n_saved is not None else 0
    return kept[surplus:], kept[:surplus]


def adopted(
    saved: Sequence[Item],
    committed: Sequence[CommittedCheckpoint],
    owns: Callable[[str], bool],
    n_saved: int | None,
    keep: Collection[str] = (),
) -> tuple[list[Item], list[Item]]:
    """The kept list made of the `committed` checkpoints that `owns` says are the handler's, and the items to
    delete now: beyond `n_saved`, the worst, except those named in `keep`.

    Entries of `saved` whose checkpoint is no longer committed are dropped; a checkpoint `saved` does not know
    takes the priority its manifest recorded (warned about and left alone when it recorded none)."""
    mine = {checkpoint.data_filename: checkpoint for checkpoint in committed if owns(checkpoint.data_filename)}
    kept = [item for item in saved if item.filename in mine]
    known = {item.filename for item in kept}
    for checkpoint in sorted(mine.values(), key=lambda checkpoint: checkpoint.order):  # ties: oldest first
        if checkpoint.data_filename in known:
            continue
        priority = checkpoint.manifest["metadata"].get("priority")
        if not is_real(priority) or isinstance(priority, bool):
            warnings.warn(
                f"Checkpoint {checkpoint.url} records no priority in its manifest, so retention cannot rank it "
                "and leaves it alone; delete it yourself if it is not wanted.",
                stacklevel=3,
            )
            continue
        kept.append(Item(priority, checkpoint.data_filename))
    kept.sort(key=lambda item: item.priority)
    surplus = len(kept) - n_saved if n_saved is not None else 0
    evicted = [item for item in kept[: max(surplus, 0)] if item.filename not in keep]
    return [item for item in kept if item not in evicted], evicted


def state_dict_of(saved: Sequence[Item]) -> OrderedDict:
    """The kept list as `Checkpoint.state_dict` gives it: `(priority, filename)` pairs under "_saved"."""
    return OrderedDict([("_saved", [(item.priority, item.filename) for item in saved])])


def items_of(state_dict: Mapping) -> list[Item]:
    """The retention list in `state_dict`, checked: retention deletes these files, so each must be a plain
    file name inside the save handler's directory."""
    items = []
    for entry in state_dict["_saved"]:
        if not (isinstance(entry, Sequence) and len(entry) == 2 and is_real(entry[0]) and isinstance(entry[1], str)):
            raise ValueError(f"Each entry of state_dict['_saved'] must be (priority, filename), got {entry!r}.")
        if not is_plain_name(entry[1]):
            raise ValueError(
                f"state_dict['_saved'] names the file {entry[1]!r}, which is not a plain file name in the save "
                "directory (it is absolute, or has a path separator or '..'); retention would delete it. Pass "
                "what Checkpoint.state_dict() returned, which only holds plain names."
            )
        items.append(Item(entry[0], entry[1]))
    return items
