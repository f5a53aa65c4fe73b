#!/usr/bin/env python
"""Sharded checkpoints (torch.distributed.checkpoint, DCP) of `Trainer(strategy="fsdp")` on 2 gloo ranks: how long
one save blocks the training loop (per save the slower rank's) and what the saves add to the fit, next to a blocking
save, a full-state save, a hand-written FSDP2 loop calling `dcp.save` / `dcp.async_save` and Lightning Fabric's
FSDP2 `fabric.save`; how long a resume takes to load each checkpoint; and the 2-rank checkpoint loaded on 1 process
and on 4 ranks (resharding). The variants and checks are in benchmarks/README.md; the fits are in dcp_fits.py.

    .venv/bin/python benchmarks/bench_dcp.py --quick    # smoke test, ~6 MB of state, 75-150 s
    .venv/bin/python benchmarks/bench_dcp.py            # the real run, ~100 MB of state, ~7 min on 2 busy cores

Timing never makes this script fail; it exits with status 1 when a fit took the wrong number of steps or saves, a
checkpoint is not committed, a load is not bit for bit the state saved at its step, or the ranks disagree.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import dcp_fits as d
import harness as h
import torch
from fsdp_fits import Shape, StackModule
from ranks import agree, launch
from workloads import load_peer, state_difference

from tracktrain.checkpoint.state import read_checkpoint

FULL_SHAPE = Shape(width=1024, hidden=1024, blocks=4)  # 8.4 M parameters: 33.6 MB, 100.8 MB with AdamW's moments
QUICK_SHAPE = Shape(width=256, hidden=512, blocks=2)  # 0.53 M parameters: 6.3 MB with AdamW's moments
SAVING = [d.TT_ASYNC, d.TT_BLOCKING, d.TT_FULL_ASYNC, d.TT_FULL_BLOCKING, d.RAW_SAVE, d.RAW_ASYNC, d.FABRIC]
TITLES = {
    d.TT_ASYNC: "tracktrain sharded, async (default)",
    d.TT_BLOCKING: "tracktrain sharded, blocking",
    d.TT_FULL_ASYNC: 'tracktrain full, async (state_dict_type="full")',
    d.TT_FULL_BLOCKING: "tracktrain full, blocking",
    d.RAW_SAVE: "hand-written loop, dcp.save",
    d.RAW_ASYNC: "hand-written loop, dcp.async_save",
    d.FABRIC: "Lightning Fabric FSDP2, fabric.save",
    d.TT_NONE: "tracktrain, no checkpoints",
    d.RAW_NONE: "hand-written loop, no checkpoints",
    d.FABRIC_NONE: "Lightning Fabric, no checkpoints",
    d.LOAD_TT_SHARDED: "tracktrain sharded: fit(ckpt_path=<dir.dcp>)",
    d.LOAD_TT_FULL: "tracktrain full: fit(ckpt_path=<file.pt>)",
    d.LOAD_RAW: "hand-written: dcp.load + set_*_state_dict",
    d.LOAD_FABRIC: "Lightning Fabric: fabric.load",
}
ONE_TITLES = {
    d.LOAD_READ: "tracktrain sharded: read_checkpoint(url), every shard whole",
    d.LOAD_TT_1: "tracktrain sharded: single-process Trainer, fit(ckpt_path=<dir.dcp>)",
    d.LOAD_RAW_1: "hand-written: dcp.load(no_dist=True) + set_*_state_dict",
}


def per_save_max(ranks: list[dict[str, list[list[float]]]], variant: str) -> list[list[float]]:
    """Per fit, per save: the larger of the ranks' stalls (the other rank waits for it at the next collective)."""
    fits = zip(*(rank[variant] for rank in ranks))
    return [[max(values) for values in zip(*per_rank)] for per_rank in fits]


def slowest_rank(ranks: list[dict[str, Any]], key: str) -> dict[str, list[float]]:
    """Per kind, per repeat: the larger of the ranks' times, in ms."""
    kinds = ranks[0][key]
    return {kind: [max(values) * 1e3 for values in zip(*(rank[key][kind] for rank in ranks))] for kind in kinds}


def save_rows(stalls: dict[str, list[list[float]]], totals: dict[str, list[float]], saves: int, stat: str) -> list:
    """The stall per save (ms, every save of every round; a pair is the same save of the same round) next to
    dcp.save's; what the saves added to the fit per save (ms: its time − the same framework's fit without
    checkpoints in the same round, / saves) next to dcp.save's; and each fit's time (s) next to its baseline."""
    saving = {name: [value * 1e3 for fit in fits for value in fit] for name, fits in stalls.items() if any(fits)}
    added = {
        name: [(total - base) / saves * 1e3 for total, base in zip(totals[name], totals[d.BASELINE_OF[name]])]
        for name in saving
    }
    fits = {TITLES[name]: values for name, values in totals.items()}
    return [
        *h.compare("stall", {TITLES[n]: v for n, v in saving.items()}, TITLES[d.RAW_SAVE], "ms/save", stat),
        *h.compare("added", {TITLES[n]: v for n, v in added.items()}, TITLES[d.RAW_SAVE], "ms/save", stat),
        *h.compare("fit", fits, {TITLES[name]: TITLES[base] for name, base in d.BASELINE_OF.items()}, "s", stat),
    ]


def size_mb(path: str) -> float:
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names) / 1e6


# ------------------------------------------------------------------------------------------------------ runs
def check_sources(
    sources: dict[str, str], references: dict[str, Any], config: d.DcpConfig, problems: list[str]
) -> None:
    """The sharded and the full checkpoint of the same step, read whole by one process, hold the same tensors (the
    same fit, deterministic on one thread each)."""
    if d.LOAD_TT_SHARDED not in sources or d.LOAD_TT_FULL not in sources:
        return
    names = [name for name, _ in StackModule(config.shape.build(0)).named_parameters()]
    sharded, full = read_checkpoint(sources[d.LOAD_TT_SHARDED]), read_checkpoint(sources[d.LOAD_TT_FULL])
    for what, states in (("sharded", sharded), ("full", full)):
        wrong = state_difference(
            d.plain_full_state(states["model"], states["optimizers"][0], names), references[d.LOAD_TT_SHARDED]
        )
        if wrong is not None:
            problems.append(f"[load] tracktrain's {what} checkpoint read whole is not the state the fit saved: {wrong}")


def run_all(config: d.DcpConfig, args: Any, rng: Any, problems: list[str]) -> list[dict[str, Any]]:
    ranks, seconds = launch(d.dcp_process, d.WORLD_SIZE, (config,), config.out_dir, "save", problems, config.threads)
    if not ranks:
        return []
    print(f"  [saves and loads on {d.WORLD_SIZE} ranks: {seconds:.1f} s]", flush=True)
    for kind in ranks[0]["checksums"]:
        agree({rank: result["checksums"].get(kind) for rank, result in enumerate(ranks)}, f"[load] {kind}", problems)
    sources, references = ranks[0]["sources"], ranks[0]["references"]
    if ranks[1]["sources"] != sources:
        problems.append(f"the ranks wrote their sources at different paths: {sources} and {ranks[1]['sources']}")
    stalls = {variant: per_save_max([rank["stalls"] for rank in ranks], variant) for variant in config.variants}
    totals = {
        variant: [max(values) for values in zip(*(rank["totals"][variant] for rank in ranks))]
        for variant in config.variants
    }
    rows = save_rows(stalls, totals, config.saves, args.stat)
    check_sources(sources, references, config, problems)
    # the loads: on the 2 ranks next to dcp.load; on 1 process and on 4 ranks next to the same checkpoint's on 2 ranks
    loads = {TITLES[kind]: values for kind, values in slowest_rank(ranks, "loads").items()}
    bases: dict[str, str] = dict.fromkeys(loads, TITLES[d.LOAD_RAW])
    calls = slowest_rank(ranks, "load_calls")
    calls = {TITLES[kind]: calls[kind] for kind in (d.LOAD_TT_SHARDED, d.LOAD_TT_FULL) if kind in calls}
    if sources:
        started = time.perf_counter()
        kinds = [kind for kind, source in d.ONE_PROCESS_SOURCE.items() if source in sources]
        paths = {kind: sources[d.ONE_PROCESS_SOURCE[kind]] for kind in kinds}
        states = {kind: references[d.ONE_PROCESS_SOURCE[kind]] for kind in kinds}
        one, _, _ = d.measure_loads(config, kinds, paths, states, rng, "[reshard] on 1 process", problems)
        loads.update({ONE_TITLES[kind]: [s * 1e3 for s in values] for kind, values in one.items()})
        bases.update({ONE_TITLES[kind]: TITLES[d.ONE_PROCESS_SOURCE[kind]] for kind in one})
        reference_file = os.path.join(config.out_dir, "references.pt")
        torch.save(references, reference_file)
        arguments = (config, sources, reference_file)
        four, _ = launch(d.reshard_process, d.RESHARD_WORLD_SIZE, arguments, config.out_dir, "reshard", problems)
        for kind in four[0]["checksums"] if four else []:
            where = f"[reshard] {kind} on {d.RESHARD_WORLD_SIZE} ranks"
            agree({rank: result["checksums"].get(kind) for rank, result in enumerate(four)}, where, problems)
        for kind, values in slowest_rank(four, "loads").items() if four else []:
            loads[f"{d.RESHARD_WORLD_SIZE} ranks: {TITLES[kind]}"] = values
            bases[f"{d.RESHARD_WORLD_SIZE} ranks: {TITLES[kind]}"] = TITLES[kind]
        print(f"  [resharding: {time.perf_counter() - started:.1f} s]", flush=True)
    sizes = {TITLES[kind]: size_mb(path) for kind, path in sources.items()}
    rows += h.compare("load", loads, bases, "ms", args.stat, MB=sizes)
    rows += h.compare("whole fit(ckpt_path) call", calls, None, "ms", args.stat)
    return rows


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = h.parse(
        __doc__,
        argv,
        {
            "repeats": (2, 1, "timed rounds of one fit per variant, after a warm-up round"),
            "saves": (2, 2, "checkpoints per fit"),
            "every": (6, 4, "steps between checkpoints"),
            "batch_size": (8, 8, "samples per step per rank"),
            "load_repeats": (3, 1, "timed loads of each kind, after a warm-up one"),
        },
        positive=["repeats", "saves", "batch_size", "load_repeats", "threads"],
        at_least_two=["every"],
        root_dir="the checkpoints",
        stat_of="the saves (loads: the repeats)",
    )
    rng = h.prepare(args)
    d.quiet()
    lightning, lightning_version = load_peer("lightning", "lightning.fabric.strategies", skip=args.no_lightning)
    root_dir = h.temporary_root("tracktrain-bench-dcp-", args.root_dir)
    out_dir = tempfile.mkdtemp(prefix="out-", dir=root_dir)
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    variants = [v for v in SAVING if lightning is not None or v != d.FABRIC] + [d.TT_NONE, d.RAW_NONE]
    variants += [d.FABRIC_NONE] if lightning is not None else []
    loads = [d.LOAD_TT_SHARDED, d.LOAD_TT_FULL, d.LOAD_RAW] + ([d.LOAD_FABRIC] if lightning is not None else [])
    config = d.DcpConfig(
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
    env = h.start(
        'tracktrain Trainer(strategy="fsdp") sharded checkpoints (DCP): loop stall, load, resharding',
        args,
        f"{args.repeats} interleaved round(s) of fits, {args.load_repeats} of loads",
        lightning=lightning_version,
    )
    state_mb = 3 * 4 * shape.parameters / 1e6
    print(
        f"- {shape.describe()}; AdamW: {state_mb:.1f} MB of weights and moments, {state_mb / d.WORLD_SIZE:.1f} MB per rank",
        flush=True,
    )
    problems: list[str] = []
    rows = run_all(config, args, rng, problems)
    h.report(rows, "MB", decimals=1)
    print(
        f"{args.saves} saves per fit (every {args.every} steps, {config.max_steps} steps, batch {args.batch_size} per "
        "rank). stall: the time around the save call in the loop, per save the slower rank's; added: (the fit − the "
        "same framework's fit without checkpoints in the same round) / saves, the background writes' CPU included; "
        "fit: first step to the end, every write finished. load: the slower rank's, tracktrain's inside "
        "fit(ckpt_path=...), each checked bit for bit against the state saved."
    )
    payload = {"environment": env, "arguments": vars(args), "workload": shape.describe(), "state_mb": state_mb}
    return h.finish(args, {**payload, "rows": rows}, problems)


if __name__ == "__main__":
    sys.exit(main())
