"""A benchmark's fits on several processes: each rank joins the gloo group `tracktrain.distributed.spawn` describes (as
a script would: the Trainers find it running) and writes what it measured to a file of its own; the parent starts the
ranks, reads the files back and makes the checks every distributed benchmark makes of them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from workloads import max_difference

from tracktrain.distributed import spawn


def join_group(threads: int) -> int:
    """Joins the gloo group from the environment `spawn` sets, with the timed process's torch settings; the rank."""
    dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    return dist.get_rank()


def result_file(out_dir: str, name: str, rank: int) -> str:
    return os.path.join(out_dir, f"{name}_rank{rank}.pt")


def save(result: Any, out_dir: str, name: str) -> None:
    """This rank's result (its "problems" and "threads", if given, are checked by `launch`)."""
    torch.save(result, result_file(out_dir, name, dist.get_rank()))


def launch(
    process: Callable[..., None],
    world: int,
    args: tuple,
    out_dir: str,
    name: str,
    problems: list[str],
    threads: int | None = None,
    start_method: str | None = None,
    where: str | None = None,
) -> tuple[list[Any], float]:
    """`world` ranks running `process(*args)`, each saving its result as `name`: (the results by rank, the launch's
    seconds); no result, and the failure among `problems` (said `where`, default `[name]`), when a rank fails. Each
    result's "problems" join `problems`, and its "threads" must be `threads`."""
    started = time.perf_counter()
    try:
        spawn(process, world, args=args, start_method=start_method)
    except Exception as error:  # a failing rank: reported with the others' problems
        problems.append(f"{where or f'[{name}]'}: the {world} processes failed: {type(error).__name__}: {error}")
        return [], time.perf_counter() - started
    seconds = time.perf_counter() - started
    results = [torch.load(result_file(out_dir, name, rank)) for rank in range(world)]
    for rank, result in enumerate(results):
        if isinstance(result, dict):
            problems += result.get("problems", [])
            if threads is not None and result.get("threads", threads) != threads:
                problems.append(f"[{name}] rank {rank} ran {result['threads']} torch threads, not {threads}")
    return results, seconds


def agree(values: dict[int, Any], where: str, problems: list[str]) -> None:
    """The same value on every rank (rank -> value): a checksum of what each loaded or trained."""
    if len({str(value) for value in values.values()}) > 1:
        problems.append(f"{where}: the ranks ended with different states ({values})")


def trained_weights(
    ranks: list[dict[str, Any]], reference: str, where: str, problems: list[str], within: Callable[..., bool]
) -> dict[str, float]:
    """Every variant's weights (each rank's result "weights": variant -> its tensors) the same on every rank and
    `within(ours, reference's)`: variant -> its largest |Δ| to `reference`'s."""
    theirs = ranks[0]["weights"][reference]
    max_diff = {}
    for variant, ours in ranks[0]["weights"].items():
        for rank, result in enumerate(ranks[1:], 1):
            if not all(torch.equal(a, b) for a, b in zip(ours, result["weights"][variant])):
                problems.append(f"{where} {variant}: rank 0 and rank {rank} ended with different weights")
        max_diff[variant] = difference = max_difference(ours, theirs)
        if not within(ours, theirs):
            problems.append(
                f"{where} {variant}: the trained weights differ from the {reference} loop's (max |Δ| {difference:.3g})"
            )
    return max_diff
