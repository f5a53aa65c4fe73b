#!/usr/bin/env python
"""Sharded checkpoints (torch.distributed.checkpoint, DCP) of `Trainer(strategy="fsdp")` on 2 gloo ranks: how long
one save blocks the training loop, next to a blocking save, a full-state save, a hand-written loop calling
`dcp.save` / `dcp.async_save`, and Lightning Fabric's FSDP2 checkpoint; how long a resume takes to load one; and
loading the 2-rank checkpoint on 1 process and on 4 ranks (resharding).

1. Loop stall. 2 gloo processes on the CPU, one thread each, started by `tracktrain.distributed.spawn`, fit the
   block stack (Linear/GELU/Linear blocks with residuals in an nn.ModuleList, then a Linear head; cross-entropy,
   AdamW; each rank its half of the batches, in order) from the same initial weights, saving every N steps, K
   times, then N−1 more steps. Interleaved in the same processes, in an order shuffled per round (alike on both
   ranks), a barrier before each fit:
   - tracktrain sharded async: `Trainer(strategy="fsdp")` (`FSDPStrategy(state_dict_type="sharded")`, the default)
     with `ModelCheckpoint(every_n_train_steps=N, save_top_k=None)` (`async_save=True`, the default): the loop
     waits for the previous write, if any, and a CPU snapshot of its shards; a thread writes them with DCP and
     rank 0 the manifest;
   - tracktrain sharded blocking: the same with `async_save=False`;
   - tracktrain full async / blocking: `FSDPStrategy(state_dict_type="full")`: the full state gathered to rank 0,
     which writes one file;
   - dcp.save: a hand-written FSDP2 loop calling `dcp.save({"model": ..., "optim": ...})` (the state dicts of
     `torch.distributed.checkpoint.state_dict`, as torchtitan builds them);
   - dcp.async_save: the same loop with `dcp.async_save` on a gloo group of its own, waiting for the previous
     save's future before each save (torchtitan's `async_mode="async"`);
   - Lightning Fabric: `ModelParallelStrategy` (its FSDP2 strategy), `fabric.save(path, {"model", "optimizer",
     "step"})`, which writes a DCP checkpoint (and rank 0's meta.pt), blocking;
   - and the same three loops without checkpoints, each framework's baseline.
   **Stall**: the time around the save call in the loop (tracktrain: `ModelCheckpoint._save`, which
   `on_train_batch_end` calls when a checkpoint is due), per save the larger of the 2 ranks'. **Added per
   checkpoint**: (the fit's time from its first step to its end, every write finished − the same framework's fit
   without checkpoints in the same round) / K: what the saves cost in all, the background writes' CPU included.
2. Load. One checkpoint of each kind (written by a fit of N steps saving at its last) loaded on the same 2 ranks
   into a model of other weights: tracktrain's sharded one and its full one by `fit(ckpt_path=...)` of a Trainer
   whose max_steps the checkpoint already reached (the fit loads, then returns; timed: the loading in it,
   `trainer.checkpoints.load`, and the whole call), the raw loop's by `dcp.load` + `set_model_state_dict` /
   `set_optimizer_state_dict`, Fabric's by `fabric.load`.
3. Resharding. The 2-rank sharded checkpoint on 1 process: `read_checkpoint(url)` (every shard, whole), and a
   single-process Trainer's `fit(ckpt_path=...)`; the raw one with `dcp.load(no_dist=True)`; and both on 4 ranks
   (`fit(ckpt_path=...)` under FSDP, `dcp.load`), each rank reading its new part.

    .venv/bin/python benchmarks/bench_dcp.py --quick    # smoke test, ~6 MB of state, 75-150 s
    .venv/bin/python benchmarks/bench_dcp.py            # the real run, ~100 MB of state, ~7 min on 2 busy cores

Timing never makes this script fail. It exits with status 1 only when a sanity check fails: a fit took the wrong
number of steps or saves; a checkpoint written is not committed (tracktrain: no manifest, or one that does not list
every rank's shards; DCP and Fabric: no `.metadata`); a loaded model or AdamW state is not bit for bit the one saved,
or not at the saved step; the ranks disagree on what they loaded. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import harness as h
import torch
from dcp_fits import (
    BASELINE_OF,
    FABRIC,
    FABRIC_NONE,
    LOAD_FABRIC,
    LOAD_RAW,
    LOAD_TT_FULL,
    LOAD_TT_SHARDED,
    RAW_ASYNC,
    RAW_NONE,
    RAW_SAVE,
    RESHARD_WORLD_SIZE,
    TT_ASYNC,
    TT_BLOCKING,
    TT_FULL_ASYNC,
    TT_FULL_BLOCKING,
    TT_NONE,
    WORLD_SIZE,
    DcpConfig,
    Load,
    check_load,
    dcp_process,
    difference,
    plain_full_state,
    quiet,
    rank_file,
    reshard_process,
    run_load,
)
from fsdp_fits import Shape, StackModule
from workloads import load_peer

from tracktrain.distributed import spawn
from tracktrain.handlers.checkpoint_state import read_checkpoint

FULL_SHAPE = Shape(width=1024, hidden=1024, blocks=4)  # 8.4 M parameters: 33.6 MB, 100.8 MB with AdamW's moments
QUICK_SHAPE = Shape(width=256, hidden=512, blocks=2)  # 0.53 M parameters: 6.3 MB with AdamW's moments
SAVING = [TT_ASYNC, TT_BLOCKING, TT_FULL_ASYNC, TT_FULL_BLOCKING, RAW_SAVE, RAW_ASYNC, FABRIC]
TITLES = {
    TT_ASYNC: "tracktrain sharded, async (default)",
    TT_BLOCKING: "tracktrain sharded, blocking",
    TT_FULL_ASYNC: 'tracktrain full, async (state_dict_type="full")',
    TT_FULL_BLOCKING: "tracktrain full, blocking",
    RAW_SAVE: "hand-written loop, dcp.save",
    RAW_ASYNC: "hand-written loop, dcp.async_save",
    FABRIC: "Lightning Fabric FSDP2, fabric.save",
    TT_NONE: "tracktrain, no checkpoints",
    RAW_NONE: "hand-written loop, no checkpoints",
    FABRIC_NONE: "Lightning Fabric, no checkpoints",
    LOAD_TT_SHARDED: "tracktrain sharded: fit(ckpt_path=<dir.dcp>)",
    LOAD_TT_FULL: "tracktrain full: fit(ckpt_path=<file.pt>)",
    LOAD_RAW: "hand-written: dcp.load + set_*_state_dict",
    LOAD_FABRIC: "Lightning Fabric: fabric.load",
}
ONE_READ, ONE_TRAINER, ONE_RAW = "read_checkpoint(url)", "tt-1-process", "dcp.load-1-process"
ONE_TITLES = {
    ONE_READ: "tracktrain sharded: read_checkpoint(url), every shard whole",
    ONE_TRAINER: "tracktrain sharded: single-process Trainer, fit(ckpt_path=<dir.dcp>)",
    ONE_RAW: "hand-written: dcp.load(no_dist=True) + set_*_state_dict",
}
fmt = functools.partial(h.format_cell, decimals=1)


# ------------------------------------------------------------------------------------------------- summaries
def per_save_max(ranks: list[dict[str, list[list[float]]]], variant: str) -> list[list[float]]:
    """Per fit, per save: the larger of the ranks' stalls (the other rank waits for it at the next collective)."""
    fits = zip(*(rank[variant] for rank in ranks))
    return [[max(values) for values in zip(*per_rank)] for per_rank in fits]


def summarize_saves(
    stalls: dict[str, list[list[float]]], totals: dict[str, list[float]], saves: int, statistic: str
) -> dict[str, Any]:
    """Each variant's stall (ms per save: the statistic over every save of every round, and its IQR), its ratio to
    `dcp.save`'s (of the figures, and the median of the per-round ratios), and the time its saves added to the fit
    beyond the same framework's fit without checkpoints in the same round (ms per save)."""
    center = h.STATISTICS[statistic]
    rows: dict[str, Any] = {}
    raw_rounds = [statistics.median(fit) for fit in stalls.get(RAW_SAVE, [])]
    for variant, fits in stalls.items():
        flat = [value * 1e3 for fit in fits for value in fit]
        baseline = totals.get(BASELINE_OF.get(variant, ""), [])
        added = [(total - base) / saves * 1e3 for total, base in zip(totals[variant], baseline)] if saves else []
        rows[variant] = {
            "stall_ms": center(flat) if flat else None,
            "stall_iqr_ms": h.iqr(flat) if flat else None,
            "stall_samples_ms": flat,
            "added_ms": center(added) if added else None,
            "added_samples_ms": added,
            "fit_s": center(totals[variant]),
            "fit_samples_s": totals[variant],
        }
    raw = rows.get(RAW_SAVE, {}).get("stall_ms")
    for variant, row in rows.items():
        row["ratio_to_dcp_save"] = row["stall_ms"] / raw if raw and row["stall_ms"] is not None else None
        rounds = [statistics.median(fit) for fit in stalls[variant] if fit]
        paired = [ours / hand for ours, hand in zip(rounds, raw_rounds) if ours and hand]
        row["paired_ratio"] = statistics.median(paired) if paired and row["stall_ms"] is not None else None
    return rows


def summarize_loads(samples: dict[str, list[float]], reference: str, statistic: str) -> dict[str, Any]:
    """ms per load (the statistic over the repeats, IQR) and the ratio to `reference`'s figure."""
    center = h.STATISTICS[statistic]
    rows = {
        kind: {"ms": center(values) * 1e3, "iqr_ms": h.iqr(values) * 1e3, "samples_ms": [v * 1e3 for v in values]}
        for kind, values in samples.items()
        if values
    }
    base = rows.get(reference, {}).get("ms")
    for row in rows.values():
        row["ratio"] = row["ms"] / base if base else None
    return rows


def slowest_rank(ranks: list[dict[str, Any]], key: str) -> dict[str, list[float]]:
    """Per kind, per repeat: the larger of the ranks' times."""
    kinds = ranks[0][key]
    return {kind: [max(values) for values in zip(*(rank[key][kind] for rank in ranks))] for kind in kinds}


def ratio_cell(value: float | None, base: bool = False) -> str:
    return "1" if base else ("—" if value is None else f"{value:.3f}")


def size_mb(path: str) -> float:
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names) / 1e6


# ------------------------------------------------------------------------------------------------ reporting
def report_saves(rows: dict[str, Any], config: DcpConfig, stat: str, fabric_status: str) -> None:
    print(f"\n## Loop stall per checkpoint, {WORLD_SIZE} gloo ranks\n")
    print(f"`{h.command_line()}`\n")
    lines = [["variant", "stall ms/save", "IQR ms", "× dcp.save", "paired × dcp.save", "added ms/save", "fit s"]]
    for variant in SAVING + [TT_NONE, RAW_NONE, FABRIC_NONE]:
        row = rows.get(variant)
        if row is None:
            continue
        lines.append(
            [
                TITLES[variant],
                fmt(row["stall_ms"]),
                fmt(row["stall_iqr_ms"]),
                ratio_cell(row["ratio_to_dcp_save"], variant == RAW_SAVE) if row["stall_ms"] is not None else "—",
                ratio_cell(row["paired_ratio"], variant == RAW_SAVE) if row["stall_ms"] is not None else "—",
                fmt(row["added_ms"]),
                f"{row['fit_s']:.2f}",
            ]
        )
    print(h.markdown_table(lines, "lrrrrrr") + "\n")
    print(
        f"{config.saves} saves per fit (every {config.every} steps, {config.max_steps} steps, batch "
        f"{config.batch_size} per rank), {config.repeats} timed round(s) after a warm-up. stall: the time around the "
        f"save call in the loop, the larger of the {WORLD_SIZE} ranks', {stat} over every save (IQR: its spread). "
        "× dcp.save: over the hand-written loop's blocking `dcp.save`; paired: the median over the rounds of the "
        "ratio of the two fits' median stalls in that round. added: (the fit's time − the same framework's fit "
        "without checkpoints, same round) / saves, which holds the background writes' CPU too. fit: first step to "
        f"the end of the fit, every write finished. Lightning Fabric: {fabric_status}."
    )


def report_loads(
    loads: dict[str, Any], calls: dict[str, Any], sizes: dict[str, float], config: DcpConfig, stat: str
) -> None:
    print(f"\n## Load on {WORLD_SIZE} gloo ranks\n")
    lines = [["checkpoint, loaded by", "MB", "load ms", "IQR ms", "× dcp.load", "whole fit() call ms"]]
    for kind in (LOAD_TT_SHARDED, LOAD_TT_FULL, LOAD_RAW, LOAD_FABRIC):
        row = loads.get(kind)
        if row is None:
            continue
        call = calls.get(kind, {}).get("ms") if kind in (LOAD_TT_SHARDED, LOAD_TT_FULL) else None
        lines.append(
            [
                TITLES[kind],
                fmt(sizes.get(kind)),
                fmt(row["ms"]),
                fmt(row["iqr_ms"]),
                ratio_cell(row["ratio"], kind == LOAD_RAW),
                fmt(call),
            ]
        )
    print(h.markdown_table(lines, "lrrrrr") + "\n")
    print(
        f"{config.load_repeats} timed load(s) of each after a warm-up, {stat}, the larger of the ranks' times. load: "
        "tracktrain: `trainer.checkpoints.load` inside `fit(ckpt_path=...)` (reading, every rank its own shards or "
        "the whole file, the manifest's SHA-256 check, `Checkpoint.load_objects`); the whole call adds the Trainer's "
        "set-up (sharding the model, the run's seed and settings) and returns, max_steps being reached. "
        "dcp.load: building the state dicts (AdamW's state made empty first), `dcp.load`, then setting them."
    )


def report_reshard(rows: dict[str, Any], two: dict[str, Any], stat: str) -> None:
    print("\n## Resharding: the 2-rank checkpoints loaded on 1 process and on 4 ranks\n")
    lines = [["where", "loaded by", "load ms", "IQR ms", f"× on {WORLD_SIZE} ranks"]]
    for where, kind, title in (
        ("1 process", ONE_READ, ONE_TITLES[ONE_READ]),
        ("1 process", ONE_TRAINER, ONE_TITLES[ONE_TRAINER]),
        ("1 process", ONE_RAW, ONE_TITLES[ONE_RAW]),
        (f"{RESHARD_WORLD_SIZE} ranks", LOAD_TT_SHARDED, TITLES[LOAD_TT_SHARDED]),
        (f"{RESHARD_WORLD_SIZE} ranks", LOAD_RAW, TITLES[LOAD_RAW]),
    ):
        key = kind if where == "1 process" else f"{RESHARD_WORLD_SIZE}:{kind}"
        row = rows.get(key)
        if row is None:
            continue
        base = two.get(LOAD_RAW if kind in (ONE_RAW, LOAD_RAW) else LOAD_TT_SHARDED, {}).get("ms")
        lines.append([where, title, fmt(row["ms"]), fmt(row["iqr_ms"]), ratio_cell(row["ms"] / base if base else None)])
    print(h.markdown_table(lines, "llrrr") + "\n")
    print(
        f"{stat} over the repeats; on {RESHARD_WORLD_SIZE} ranks the larger of the ranks' times (4 processes on this "
        f"machine's cores). × on {WORLD_SIZE} ranks: over the same checkpoint's load on the {WORLD_SIZE} ranks "
        "that wrote it (read_checkpoint and the single-process Trainer over tracktrain's). Every load was checked "
        "bit for bit against the state saved."
    )


# ------------------------------------------------------------------------------------------------------ runs
def one_process_loads(
    config: DcpConfig, sources: dict[str, str], references: dict[str, Any], rng: Any, problems: list[str]
) -> dict[str, list[float]]:
    """The 2-rank checkpoints loaded by this process alone: `read_checkpoint` (whole), a single-process Trainer's
    resume, `dcp.load(no_dist=True)`; interleaved, a warm-up round first, each checked against its reference."""
    names = [name for name, _ in StackModule(config.shape.build(0)).named_parameters()]
    kinds = [
        kind
        for kind, needs in ((ONE_READ, LOAD_TT_SHARDED), (ONE_TRAINER, LOAD_TT_SHARDED), (ONE_RAW, LOAD_RAW))
        if needs in sources
    ]
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for repeat, kind in h.interleaved(kinds, config.load_repeats + 1, rng):
        h.before_run(config.threads)
        where = f"[reshard] {kind} on 1 process"
        if kind == ONE_READ:
            start = time.perf_counter()
            states = read_checkpoint(sources[LOAD_TT_SHARDED])
            seconds = time.perf_counter() - start
            loaded = Load(
                seconds,
                seconds,
                plain_full_state(states["model"], states["optimizers"][0], names),
                int(states["trainer"]["global_step"]),
            )
            reference = references[LOAD_TT_SHARDED]
        else:
            source = LOAD_TT_SHARDED if kind == ONE_TRAINER else LOAD_RAW
            loaded = run_load(config, source, sources[source], config.every)
            reference = references[source]
        problems += check_load(loaded, reference, config.every, where)
        if repeat:
            samples[kind].append(loaded.seconds)
    return samples


def check_sources(sources: dict[str, str], references: dict[str, Any], config: DcpConfig, problems: list[str]) -> None:
    """The sharded and the full checkpoint of the same step, read whole by one process, hold the same tensors (the
    same fit, deterministic on one thread each)."""
    if LOAD_TT_SHARDED not in sources or LOAD_TT_FULL not in sources:
        return
    names = [name for name, _ in StackModule(config.shape.build(0)).named_parameters()]
    sharded, full = read_checkpoint(sources[LOAD_TT_SHARDED]), read_checkpoint(sources[LOAD_TT_FULL])
    for what, states in (("sharded", sharded), ("full", full)):
        wrong = difference(
            plain_full_state(states["model"], states["optimizers"][0], names), references[LOAD_TT_SHARDED]
        )
        if wrong is not None:
            problems.append(f"[load] tracktrain's {what} checkpoint read whole is not the state the fit saved: {wrong}")


def run_all(args: argparse.Namespace, config: DcpConfig, rng: Any, problems: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        spawn(dcp_process, WORLD_SIZE, args=(config,))
    except Exception as error:  # a failing rank: reported with the others' problems
        problems.append(f"[save] the processes failed: {type(error).__name__}: {error}")
        return {}
    print(f"  [saves and loads on {WORLD_SIZE} ranks: {time.perf_counter() - started:.1f} s]", flush=True)
    ranks = [torch.load(rank_file(config.out_dir, "save", rank)) for rank in range(WORLD_SIZE)]
    for rank, result in enumerate(ranks):
        problems += result["problems"]
        if result["threads"] != config.threads:
            problems.append(f"rank {rank} ran {result['threads']} torch threads, not {config.threads}")
    for kind in ranks[0]["checksums"]:
        values = {rank["checksums"].get(kind) for rank in ranks}
        if len(values) != 1:
            problems.append(f"[load] {kind}: the ranks loaded different states (checksums {sorted(map(str, values))})")
    sources, references = ranks[0]["sources"], ranks[0]["references"]
    if ranks[1]["sources"] != sources:
        problems.append(f"the ranks wrote their sources at different paths: {sources} and {ranks[1]['sources']}")
    stalls = {variant: per_save_max([rank["stalls"] for rank in ranks], variant) for variant in config.variants}
    totals = {
        variant: [max(values) for values in zip(*(rank["totals"][variant] for rank in ranks))]
        for variant in config.variants
    }
    saves = summarize_saves(stalls, totals, config.saves, args.stat)
    loads = summarize_loads(slowest_rank(ranks, "loads"), LOAD_RAW, args.stat)
    calls = summarize_loads(slowest_rank(ranks, "load_calls"), LOAD_RAW, args.stat)
    sizes = {kind: size_mb(path) for kind, path in sources.items()}
    check_sources(sources, references, config, problems)

    started = time.perf_counter()
    reshard: dict[str, Any] = {}
    if sources:
        one = one_process_loads(config, sources, references, rng, problems)
        reshard.update(summarize_loads(one, LOAD_RAW, args.stat))
        reference_file = os.path.join(config.out_dir, "references.pt")
        torch.save(references, reference_file)
        try:
            spawn(reshard_process, RESHARD_WORLD_SIZE, args=(config, sources, reference_file))
            four = [torch.load(rank_file(config.out_dir, "reshard", rank)) for rank in range(RESHARD_WORLD_SIZE)]
            for result in four:
                problems += result["problems"]
            for kind in four[0]["checksums"]:
                if len({result["checksums"].get(kind) for result in four}) != 1:
                    problems.append(
                        f"[reshard] {kind} on {RESHARD_WORLD_SIZE} ranks: the ranks loaded different states"
                    )
            rows = summarize_loads(slowest_rank(four, "loads"), LOAD_RAW, args.stat)
            reshard.update({f"{RESHARD_WORLD_SIZE}:{kind}": row for kind, row in rows.items()})
        except Exception as error:
            problems.append(f"[reshard] the {RESHARD_WORLD_SIZE} processes failed: {type(error).__name__}: {error}")
        print(f"  [resharding: {time.perf_counter() - started:.1f} s]", flush=True)
    return {"saves": saves, "loads": loads, "load_calls": calls, "reshard": reshard, "sizes_mb": sizes}


# ------------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = h.make_parser(__doc__, root_dir="the checkpoints", stat_of="the saves (loads: the repeats)")
    add = parser.add_argument
    add("--repeats", type=int, help="timed rounds of one fit per variant, after a warm-up round (default 2; --quick 1)")
    add("--saves", type=int, help="checkpoints per fit (default 2; --quick 2)")
    add("--every", type=int, help="steps between checkpoints (default 6; --quick 4)")
    add("--batch-size", type=int, help="samples per step per rank (default 8; --quick 8)")
    add("--load-repeats", type=int, help="timed loads of each kind, after a warm-up one (default 3; --quick 1)")
    defaults = {"repeats": (2, 1), "saves": (2, 2), "every": (6, 4), "batch_size": (8, 8), "load_repeats": (3, 1)}
    args = h.finish_args(
        parser,
        argv,
        defaults,
        positive=["repeats", "saves", "batch_size", "load_repeats", "threads"],
        at_least_two=["every"],
    )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = h.prepare(args)
    quiet()
    lightning, lightning_version = load_peer("lightning", "lightning.fabric.strategies", skip=args.no_lightning)
    root_dir = h.temporary_root("tracktrain-bench-dcp-", args.root_dir)
    out_dir = tempfile.mkdtemp(prefix="out-", dir=root_dir)
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    variants = [v for v in SAVING if lightning is not None or v != FABRIC] + [TT_NONE, RAW_NONE]
    variants += [FABRIC_NONE] if lightning is not None else []
    loads = [LOAD_TT_SHARDED, LOAD_TT_FULL, LOAD_RAW] + ([LOAD_FABRIC] if lightning is not None else [])
    config = DcpConfig(
        shape,
        args.batch_size,
        args.every,
        args.saves,
        args.repeats,
        args.load_repeats,
        args.seed,
        args.threads,
        out_dir,
        root_dir,
        tuple(variants),
        tuple(loads),
    )
    env = h.environment(args.threads, lightning=lightning_version)
    h.print_heading(
        'tracktrain Trainer(strategy="fsdp") sharded checkpoints (DCP): loop stall, load, resharding',
        env,
        args,
        f"lightning {lightning_version}",
        f"{args.repeats} interleaved round(s) of fits, {args.load_repeats} of loads",
    )
    state_mb = 3 * 4 * shape.parameters / 1e6
    print(
        f"- {shape.describe()}; AdamW: {state_mb:.1f} MB of weights and moments, {state_mb / WORLD_SIZE:.1f} MB per rank",
        flush=True,
    )
    problems: list[str] = []
    results = run_all(args, config, rng, problems)
    fabric_status = (
        "not run" if lightning is None else f"lightning {lightning_version}, `fabric.save` works on CPU/gloo"
    )
    if results:
        report_saves(results["saves"], config, args.stat, fabric_status)
        report_loads(results["loads"], results["load_calls"], results["sizes_mb"], config, args.stat)
        report_reshard(results["reshard"], results["loads"], args.stat)
    payload = {
        "environment": env,
        "arguments": vars(args),
        "workload": shape.describe(),
        "state_mb": state_mb,
        "max_steps": config.max_steps,
        **results,
    }
    return h.finish(args, payload, problems)


if __name__ == "__main__":
    sys.exit(main())
