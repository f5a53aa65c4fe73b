"""Ignite's `ModelCheckpoint`: a `Checkpoint` into a directory, with the objects given at call time."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from tracktrain.checkpoint.handler import Checkpoint
from tracktrain.checkpoint.savers import saver_for
from tracktrain.checkpoint.state import check_objects
from tracktrain.engine import Engine

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(Checkpoint):
    """`Checkpoint` into a directory, with the objects given at call time: `handler(engine, to_save)`.

    .. code-block:: python

        handler = ModelCheckpoint("/runs/a", "best", n_saved=2, score_name="accuracy")
        evaluator.add_event_handler(Events.COMPLETED, handler, {"model": model})

    `dirname` may also be an fsspec URL; `kwargs` go to `torch.save`. Other arguments as `Checkpoint`,
    `DiskSaver`/`FsspecSaver`.
    """

    def __init__(
        self,
        dirname: str | os.PathLike,
        filename_prefix: str = "",
        score_function: Callable | None = None,
        score_name: str | None = None,
        n_saved: int | None = 1,
        atomic: bool = True,
        require_empty: bool = True,
        create_dir: bool = True,
        global_step_transform: Callable | None = None,
        filename_pattern: str | None = None,
        include_self: bool = False,
        greater_or_equal: bool = False,
        save_on_rank: int = 0,
        **kwargs: Any,
    ) -> None:
        saver = saver_for(
            dirname,
            atomic=atomic,
            create_dir=create_dir,
            require_empty=require_empty,
            save_on_rank=save_on_rank,
            **kwargs,
        )
        super().__init__(
            to_save={},
            save_handler=saver,
            filename_prefix=filename_prefix,
            score_function=score_function,
            score_name=score_name,
            n_saved=n_saved,
            global_step_transform=global_step_transform,
            filename_pattern=filename_pattern,
            include_self=include_self,
            greater_or_equal=greater_or_equal,
            save_on_rank=save_on_rank,
        )

    def __call__(self, engine: Engine, to_save: Mapping) -> None:
        if not isinstance(to_save, Mapping) or len(to_save) == 0:
            raise RuntimeError(f"No objects to checkpoint found: pass a non-empty dict of objects, got {to_save!r}.")
        check_objects(to_save, "state_dict", "to_save")
        if self.include_self and "checkpointer" in to_save:
            raise ValueError(f"Cannot have key 'checkpointer' if `include_self` is True: {to_save}. Rename that entry.")
        self.to_save = to_save
        super().__call__(engine)
