"""The tables and summaries `bench_checkpoint.py` prints: stall, added time and commit per checkpoint, and the
time to the first step of a resumed fit."""

from __future__ import annotations

import functools
import statistics
from typing import Any

import harness as h
from checkpoint_fits import LIGHTNING, TRACKTRAIN

TT_ASYNC, TT_BLOCKING = "tracktrain async", "tracktrain blocking"
SAVING_VARIANTS = (TT_ASYNC, TT_BLOCKING, LIGHTNING)
# how each variant is configured, for the table and the JSON file
DESCRIPTIONS = {
    TT_ASYNC: "tracktrain ModelCheckpoint(async_save=True)",
    TT_BLOCKING: "tracktrain ModelCheckpoint(async_save=False)",
    LIGHTNING: "Lightning ModelCheckpoint (torch.save, blocking)",
}


def library_of(variant: str) -> str:
    return LIGHTNING if variant == LIGHTNING else TRACKTRAIN


# ------------------------------------------------------------------------------------------------ summaries
def summarize_case(case: Any, settings: Any, stat: str) -> dict[str, Any]:
    center = h.STATISTICS[stat]
    ms = {
        name: [getattr(sample, name) * 1e3 for sample in case.samples] for name in ("stall", "added", "committed_after")
    }
    row: dict[str, Any] = {
        "storage": case.storage.key,
        "variant": case.variant,
        "description": DESCRIPTIONS[case.variant],
        "every_n_train_steps": settings.every[case.storage.key],
        "error": case.error,
        "checkpoints": len(case.samples),
        "checkpoint_mb": statistics.median(case.checkpoint_bytes) / 1e6 if case.checkpoint_bytes else None,
        "waited_for_previous": sum(sample.waited for sample in case.samples),
        # CPU the storage server (moto, on the same cores) used per checkpoint, median over the fits
        "server_cpu_ms": statistics.median(case.server_cpu) * 1e3 if case.server_cpu else None,
        "samples_ms": ms,
    }
    for name, values in ms.items():
        row[f"{name}_ms"] = center(values) if values else None
        row[f"{name}_iqr_ms"] = h.iqr(values) if values else None
    return row


def summarize_resume(rows: list[dict[str, Any]], stat: str) -> list[dict[str, Any]]:
    center = h.STATISTICS[stat]
    scratch = {
        (row["storage"], row["library"]): center(row["samples_s"]) * 1e3
        for row in rows
        if row["how"] == "from scratch" and row["samples_s"]
    }
    for row in rows:
        row["ms"] = center(row["samples_s"]) * 1e3 if row["samples_s"] else None
        base = scratch.get((row["storage"], row["library"]))
        row["load_ms"] = (
            row["ms"] - base if row["ms"] is not None and base is not None and row["how"] != "from scratch" else None
        )
    return rows


# ------------------------------------------------------------------------------------------------- reporting
fmt = functools.partial(h.format_cell, decimals=1)  # milliseconds


def stall_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        [
            "storage",
            "variant",
            "every N steps",
            "checkpoints",
            "MB",
            "stall at the save ms",
            "(IQR)",
            "added per checkpoint ms",
            "(IQR)",
            "committed after ms",
            "stall × lightning's",
            "waited for the previous",
            "server CPU ms",
        ]
    ]
    lightning = {row["storage"]: row["stall_ms"] for row in rows if row["variant"] == LIGHTNING}
    for row in rows:
        if row["error"] is not None:
            lines.append(
                [
                    row["storage"],
                    row["description"],
                    str(row["every_n_train_steps"]),
                    "0",
                    "—",
                    f"cannot save there: {row['error']}",
                ]
                + ["—"] * 7
            )
            continue
        theirs = lightning.get(row["storage"])
        ratio = (
            "—" if theirs is None or not theirs > 0 or row["stall_ms"] is None else f"{row['stall_ms'] / theirs:.3f}"
        )
        lines.append(
            [
                row["storage"],
                row["description"],
                str(row["every_n_train_steps"]),
                str(row["checkpoints"]),
                fmt(row["checkpoint_mb"]),
                fmt(row["stall_ms"]),
                fmt(row["stall_iqr_ms"]),
                fmt(row["added_ms"]),
                fmt(row["added_iqr_ms"]),
                fmt(row["committed_after_ms"]),
                ratio,
                f"{row['waited_for_previous']} of {row['checkpoints']}",
                fmt(row["server_cpu_ms"]),
            ]
        )
    return h.markdown_table(lines, "llrrrrrrrrrrr")


def resume_table(rows: list[dict[str, Any]]) -> str:
    lines = [["storage", "framework", "fit(..., ckpt_path=...)", "fits", "to the first step ms", "loading ms"]]
    for row in rows:
        failed = f"failed: {row['error']}" if row["error"] else "—"
        lines.append(
            [
                row["storage"],
                row["library"],
                row["how"],
                str(len(row["samples_s"])),
                fmt(row["ms"]) if row["ms"] is not None else failed,
                fmt(row["load_ms"], True) if row["load_ms"] is not None else "—",
            ]
        )
    return h.markdown_table(lines, "lllrrr")


def report(
    rows: list[dict[str, Any]],
    resume_rows: list[dict[str, Any]],
    baselines: dict[str, list[Any]],
    lightning_identical: dict[int, bool],
    stat: str,
    lightning_status: str,
    notes: list[str],
) -> None:
    print(f"\n## Stall per checkpoint\n\n$ {h.command_line()}\n")
    print(stall_table(rows) + "\n")
    libraries: dict[str, list[Any]] = {}
    for variant, values in baselines.items():
        libraries.setdefault(library_of(variant), []).extend(values)
    steps = ", ".join(
        f"{library} {statistics.median(b.step for b in values) * 1e3:.1f} ms per step + "
        f"{statistics.median(b.gap for b in values) * 1e3:.2f} ms between steps"
        for library, values in libraries.items()
    )
    print(
        f"ms: {stat} over all checkpoints of all repeats. stall at the save: the gap between the saving step's "
        "optimizer step and the next step's forward, minus the median gap between the steps of the same fit before "
        "its first checkpoint. added per checkpoint: the N steps from the saving one to the next save, minus N × "
        "the median step period before the first checkpoint (what a background write costs the steps that run "
        "beside it is in here). committed after: from the end of the saving step until the file (and tracktrain's "
        "manifest) is complete. waited for the previous: async saves that found the previous write still running "
        "(raise the steps between saves to avoid it). server CPU: what moto's server process used per checkpoint, "
        "on the same cores as the training (a real S3 spends none of this machine's CPU). "
        f"Before the first checkpoint: {steps}."
    )
    if lightning_identical:
        how = "bit for bit" if all(lightning_identical.values()) else "within rtol=1e-5, not all bit for bit"
        print(
            f"- Lightning's checkpoints of steps {sorted(lightning_identical)} hold the same weights and AdamW "
            f"moments as tracktrain's ({how})."
        )
    for note in notes:
        print(f"- {note}")
    print("\n## Resume: from the Trainer's construction to the first step's forward\n")
    print(resume_table(resume_rows) + "\n")
    print(
        f"ms: {stat} over the fits. loading: that fit − the same framework's fit from scratch (same callbacks, an "
        "empty directory). Each resumes from the newest checkpoint of the first repeat's fit."
    )
