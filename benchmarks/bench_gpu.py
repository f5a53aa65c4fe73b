#!/usr/bin/env python
"""What tracktrain costs on a GPU: the `Trainer`'s step next to a hand-written loop and Lightning's, the training
loop's stall when a checkpoint of about 1 GB is saved from device memory (async next to blocking), and peak memory.

On a GPU a small model's step takes about a millisecond, so what a Trainer does on the host per step shows there
far more than on a CPU: unless it waits for the device (a `.item()`, a sync), its host work overlaps the kernels
the step queued and costs nothing; when it does, the device idles. Two workloads:

- `transformer`: a small decoder (a few million parameters) predicting the next token, bf16 autocast
  (`precision="bf16-mixed"`), AdamW; the case the project's goal is set on (Trainer / hand-written ≤ 1.02).
- `mlp`: the template project's model (64-128-10 MLP with dropout, SGD with momentum, batch 64), fp32: a step
  of a few tiny kernels, where any host work per step shows.

Time per step is measured as in `bench_trainer_overhead.py`, without start-up: each repeat runs a short and a long
fit of every variant (interleaved, in a shuffled order), and (long − short) / (extra steps) is one sample; the
device is synchronized before each clock read. The Trainers run with no progress bar, checkpoints or loggers;
each module logs its loss with `self.log` every step (read back every 50 steps, both libraries' default).

The checkpoint case saves a state of about `--checkpoint-mb` MB of device tensors through tracktrain's
`FsspecSaver` (blocking: the loop waits for the copy, serialization, write, fsync and commit) and through
`AsyncSaver` around it (the loop waits for the host snapshot only), into a local directory; the stall is the time
the call keeps the loop, and the time to commit is measured too.

    python benchmarks/bench_gpu.py                       # on a CUDA device, ~2 min
    python benchmarks/bench_gpu.py --quick --device cpu  # the dry run: every path, tiny counts, any machine

Timing never makes it fail; it exits with status 1 only when a sanity check fails (a fit ran the wrong number of
steps, a Trainer's weights differ from the hand-written loop's, a saved checkpoint does not load back equal).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness as h
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from workloads import bare_trainer, lightning_trainer, lightning_twin, load_peer, max_difference, weights

from tracktrain import LoopModule
from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.checkpoint.savers import FsspecSaver

RAW, TRACKTRAIN, LIGHTNING = "hand-written", "tracktrain", "lightning"
GOAL_RATIO = 1.02  # Trainer step / hand-written step on the transformer (issue 36)


# ---------------------------------------------------------------------------------------------------- models
class Block(nn.Module):
    """A pre-norm decoder block as users write one today (nanoGPT's): causal scaled-dot-product attention and a GELU
    MLP, nothing in it that waits for the device (torch's nn.TransformerEncoder checks its mask on the host)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Token embedding + learned positions, decoder blocks, tied output layer."""

    def __init__(self, vocab: int, width: int, depth: int, heads: int, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(length, width))
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.blocks(self.embed(tokens) + self.position[: tokens.shape[1]])
        return self.norm(hidden) @ self.embed.weight.T


def decoder_loss(net: nn.Module, batch: Any) -> torch.Tensor:
    tokens = batch[0]
    logits = net(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())


def mlp_loss(net: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(net(x), y)


@dataclass
class Workload:
    """A model's initial weights, its data (a pinned-memory DataLoader over CPU tensors, in order), its loss, its
    optimizer and its precision: every variant trains a fresh copy of the same weights on the same batches."""

    key: str
    title: str
    make_net: Callable[[], nn.Module]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    make_optimizer: Callable[[Any], torch.optim.Optimizer]
    precision: str  # "32-true" or "bf16-mixed", the same string for both Trainers
    random: bool  # dropout: each library draws its own masks, so weights are compared for finiteness only
    dataset: TensorDataset
    batch_size: int
    device: torch.device
    initial: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        torch.manual_seed(0)
        self.initial = {name: value.clone() for name, value in self.make_net().state_dict().items()}
        self.parameters = sum(value.numel() for value in self.initial.values())

    def fresh_net(self) -> nn.Module:
        net = self.make_net()
        net.load_state_dict(self.initial)
        return net.to(self.device)

    def loader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, pin_memory=self.device.type == "cuda")

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def make_workloads(args: argparse.Namespace, device: torch.device) -> dict[str, Workload]:
    generator = torch.Generator().manual_seed(args.seed)
    vocab, width, depth, heads, length = (8192, 256, 4, 4, 256) if not args.quick else (256, 32, 1, 2, 16)
    batch = 64 if not args.quick else 4  # 16k tokens a step: the device, not the host, sets the pace
    tokens = torch.randint(0, vocab, (args.batches * batch, length + 1), generator=generator)
    samples = args.batches * 64
    features, labels = (
        torch.randn(samples, 64, generator=generator),
        torch.randint(0, 10, (samples,), generator=generator),
    )
    return {
        "transformer": Workload(
            "transformer",
            f"decoder {depth}×{width} (vocab {vocab}, context {length}), bf16-mixed, AdamW, batch {batch}",
            lambda: Decoder(vocab, width, depth, heads, length),
            decoder_loss,
            lambda params: torch.optim.AdamW(params, lr=3e-4),
            "bf16-mixed",
            False,
            TensorDataset(tokens),
            batch,
            device,
        ),
        "mlp": Workload(
            "mlp",
            "the template's MLP 64-128-10 with dropout 0.1, fp32, SGD momentum 0.9, batch 64",
            lambda: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10)),
            mlp_loss,
            lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
            "32-true",
            True,
            TensorDataset(features, labels),
            64,
            device,
        ),
    }


# -------------------------------------------------------------------------------------------------- variants
@dataclass
class Run:
    seconds: float  # construction of the Trainer (the raw loop: of its optimizer) to the end of fit, synchronized
    steps: int
    net: nn.Module
    peak_mb: float | None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fit_raw(workload: Workload, epochs: int, run_dir: str) -> Run:
    """The hand-written loop a user would write: batches to the device without waiting, zero_grad, forward under
    autocast, backward, step; nothing read back."""
    net = workload.fresh_net()
    device = workload.device
    synchronize(device)
    start = time.perf_counter()
    optimizer = workload.make_optimizer(net.parameters())
    net.train()
    steps = 0
    for _ in range(epochs):
        for batch in workload.loader():
            batch = [tensor.to(device, non_blocking=True) for tensor in batch]
            optimizer.zero_grad(set_to_none=True)
            with workload.autocast():
                loss = workload.loss(net, batch)
            loss.backward()
            optimizer.step()
            steps += 1
    synchronize(device)
    return Run(time.perf_counter() - start, steps, net, None)


class StepperCode:
    """The module of both Trainers (Lightning's is `lightning_twin` of it): the workload's loss, logged."""

    def __init__(self, net: nn.Module, workload: Workload) -> None:
        super().__init__()
        self.net = net
        self.workload = workload

    def train_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.workload.loss(self.net, batch)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.workload.make_optimizer(self.parameters())


class Stepper(StepperCode, LoopModule):
    pass


def fit_tracktrain(workload: Workload, epochs: int, run_dir: str) -> Run:
    net = workload.fresh_net()
    module = Stepper(net, workload)
    synchronize(workload.device)
    start = time.perf_counter()
    trainer = bare_trainer(
        max_epochs=epochs,
        precision=workload.precision,
        accelerator=workload.device.type,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=run_dir,
    )
    trainer.fit(module, workload.loader())
    synchronize(workload.device)
    return Run(time.perf_counter() - start, trainer.global_step, net, None)


def lightning_fitter(lightning: Any) -> Callable[[Workload, int, str], Run]:
    LightningStepper = lightning_twin(StepperCode, lightning)

    def fit(workload: Workload, epochs: int, run_dir: str) -> Run:
        net = workload.fresh_net()
        module = LightningStepper(net, workload)
        synchronize(workload.device)
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = lightning_trainer(
                lightning,
                max_epochs=epochs,
                precision=workload.precision,
                accelerator=workload.device.type,
                default_root_dir=run_dir,
            )
            trainer.fit(module, train_dataloaders=workload.loader())
        synchronize(workload.device)
        return Run(time.perf_counter() - start, trainer.global_step, net, None)

    return fit


def run_once(fit: Callable[[Workload, int, str], Run], workload: Workload, epochs: int, root: str, threads: int) -> Run:
    run_dir = tempfile.mkdtemp(prefix="run-", dir=root)
    try:
        h.before_run(threads)
        if workload.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(workload.device)
        run = fit(workload, epochs, run_dir)
        if workload.device.type == "cuda":
            run.peak_mb = torch.cuda.max_memory_allocated(workload.device) / 2**20
        return run
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def measure_steps(
    workload: Workload, fits: dict[str, Callable], args: argparse.Namespace, root: str, rng: Any, problems: list[str]
) -> dict[str, Any]:
    """Per variant: µs per step (samples), the peak device memory (MB) of its long fits, and the weights check."""
    short, long = args.short_epochs, args.long_epochs
    # on the host: Lightning moves the module there at the end of its fit
    reference = [w.cpu() for w in weights(run_once(fit_raw, workload, short, root, args.threads).net)]
    result: dict[str, Any] = {"title": workload.title, "parameters": workload.parameters, "variants": {}}
    # the same arithmetic in the same order: equal up to kernels whose reduction order varies (bf16 most)
    tolerance = math.inf if workload.random else 1e-5 if workload.precision == "32-true" else 1e-2

    def warm_up(name: str) -> None:  # first-call paths, lazy imports, the allocator, cuBLAS handles
        run = run_once(fits[name], workload, short, root, args.threads)
        difference = max_difference([w.cpu() for w in weights(run.net)], reference)
        if run.steps != short * workload.batches_per_epoch:
            problems.append(
                f"[{workload.key}] {name}: {run.steps} steps, expected {short * workload.batches_per_epoch}"
            )
        if not math.isfinite(difference) or difference > tolerance:
            problems.append(f"[{workload.key}] {name}: weights differ from the hand-written loop's by {difference:.3g}")
        result["variants"][name] = {"max_weight_difference": difference}

    def run(name: str) -> tuple[float, float | None]:
        """A short and a long fit, in shuffled order: µs per step between them, and the long fit's peak memory."""
        lengths = [short, long]
        rng.shuffle(lengths)
        runs = {epochs: run_once(fits[name], workload, epochs, root, args.threads) for epochs in lengths}
        return (runs[long].seconds - runs[short].seconds) / extra_steps * 1e6, runs[long].peak_mb

    extra_steps = (long - short) * workload.batches_per_epoch
    samples = h.measure(list(fits), args.repeats, rng, run, warm_up)
    syncs = count_syncs(workload, fits, root, args.threads)
    c = h.against({name: [us for us, _ in values] for name, values in samples.items()}, RAW, args.stat)
    for name, values in samples.items():
        peaks = [mb for _, mb in values if mb is not None]
        result["variants"][name].update(
            samples_us=[us for us, _ in values],
            us_per_step=c["figure"][name],
            iqr_us=c["iqr"][name],
            ratio=c["ratio"].get(name, 1.0),
            peak_mb=max(peaks) if peaks else None,
        )
    for name, per_step in syncs.items():
        result["variants"][name]["syncs_per_step"] = per_step
    return result


def count_syncs(workload: Workload, fits: dict[str, Callable], root: str, threads: int) -> dict[str, float | None]:
    """Per variant, the host-device synchronizations per step of a short fit (torch's sync debug mode warns at
    each): a Trainer that waits for the device every step leaves it idle while the host prepares the next one."""
    if workload.device.type != "cuda":
        return dict.fromkeys(fits)
    counts = {}
    for name, fit in fits.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run = run_once(fit, workload, 2, root, threads)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        counts[name] = len(syncs) / max(1, run.steps)
    return counts


# ----------------------------------------------------------------------------------------------- checkpoints
class ForeignHandler:
    """A save handler that is not an `FsspecSaver` (it forwards to one): `AsyncSaver` cannot know that it keeps no
    reference to the checkpoint, so it snapshots into fresh pageable memory, as it did for every saver before."""

    def __init__(self, saver: FsspecSaver) -> None:
        self.saver = saver

    def __call__(self, checkpoint: Any, filename: str, metadata: Any = None) -> None:
        self.saver(checkpoint, filename, metadata)

    def remove(self, filename: str) -> None:
        self.saver.remove(filename)


def measure_checkpoint_stall(args: argparse.Namespace, device: torch.device, root: str, problems: list[str]) -> dict:
    """The stall of a save of ~`checkpoint_mb` MB of device tensors (a model's and its optimizer's state):
    blocking `FsspecSaver` next to `AsyncSaver` around it, `repeats` times each, interleaved."""
    tensors = max(1, args.checkpoint_mb // 64)
    numel = args.checkpoint_mb * 2**20 // 4 // tensors
    generator = torch.Generator(device=device).manual_seed(args.seed)
    state = {
        "model": {f"layer{i}.weight": torch.randn(numel, device=device, generator=generator) for i in range(tensors)},
        "step": 0,
    }
    size_mb = sum(t.numel() * t.element_size() for t in state["model"].values()) / 2**20

    directories: dict[str, FsspecSaver] = {}

    def directory(kind: str) -> FsspecSaver:
        name = kind.replace(", ", "-").replace(" ", "-")
        directories[kind] = FsspecSaver(os.path.join(root, name), manifest=True, require_empty=False)
        return directories[kind]

    savers = {
        "blocking": directory("blocking"),
        # page-locked buffers, reused from one save to the next, copies waited for by the writer thread
        "async": AsyncSaver(directory("async")),
        # the same around a handler AsyncSaver does not know: pageable copies, made before the call returns
        "async, pageable copies": AsyncSaver(ForeignHandler(directory("async, pageable copies"))),
    }
    stalls: dict[str, list[float]] = {kind: [] for kind in savers}
    commits: dict[str, list[float]] = {kind: [] for kind in savers}
    rng = h.prepare(args)
    for repeat, kind in h.interleaved(list(savers), args.checkpoint_repeats, rng):
        saver = savers[kind]
        filename = f"checkpoint_{repeat}.pt"
        state["step"] = repeat
        expected = state["model"]["layer0.weight"][:1024].clone()
        synchronize(device)
        start = time.perf_counter()
        saver(state, filename)
        returned = time.perf_counter()
        state["model"]["layer0.weight"].add_(1.0)  # the next steps change the weights in place at once
        if isinstance(saver, AsyncSaver):
            saver.wait()
        committed = time.perf_counter()
        stalls[kind].append((returned - start) * 1e3)
        commits[kind].append((committed - start) * 1e3)
        loaded = torch.load(directories[kind].path_of(filename), map_location="cpu", weights_only=True)
        if not torch.equal(loaded["model"]["layer0.weight"][:1024], expected.cpu()) or loaded["step"] != repeat:
            problems.append(f"[checkpoint] {kind} save {repeat} did not load back as the state at the call")
        saver.remove(filename)
        if isinstance(saver, AsyncSaver):
            saver.wait()
    stat = h.STATISTICS[args.stat]
    later = {kind: values[1:] or values for kind, values in stalls.items()}  # the first save allocates buffers
    return {
        "size_mb": size_mb,
        "device": str(device),
        "first_stall_ms": {kind: values[0] for kind, values in stalls.items()},
        "stall_ms": {kind: stat(values) for kind, values in later.items()},
        "commit_ms": {kind: stat(values) for kind, values in commits.items()},
        "samples": {"stall_ms": stalls, "commit_ms": commits},
    }


# ----------------------------------------------------------------------------------------------------- report
def report(steps: dict[str, dict], checkpoint: dict | None, env: dict[str, Any], args: argparse.Namespace) -> str:
    def cell(key: str, scale: float = 1.0, decimals: int = 3) -> Callable[[tuple], str]:
        return lambda row: h.format_cell(None if row[2][key] is None else row[2][key] / scale, decimals=decimals)

    rows = [(result["key"], name, variant) for result in steps.values() for name, variant in result["variants"].items()]
    columns = [("workload", "l", lambda row: row[0]), ("variant", "l", lambda row: row[1])]
    columns += [("ms/step", "r", cell("us_per_step", 1e3)), ("IQR ms", "r", cell("iqr_us", 1e3))]
    columns += [("× hand-written", "r", lambda row: f"{row[2]['ratio']:.3f}"), ("peak MB", "r", cell("peak_mb", 1, 0))]
    columns += [("syncs/step", "r", cell("syncs_per_step", 1, 2))]
    columns += [("max |Δw| vs hand-written", "r", lambda row: f"{row[2]['max_weight_difference']:.2g}")]
    text = [
        f"## Step time on {env['device_name']} ({env['torch']}, CUDA {env['cuda']}, Lightning {env['lightning']})\n",
        h.table(rows, columns),
    ]
    for result in steps.values():
        text.append(f"\n- `{result['key']}`: {result['title']}, {result['parameters'] / 1e6:.2f} M parameters")
    transformer = steps.get("transformer")
    if transformer and TRACKTRAIN in transformer["variants"]:
        ratio = transformer["variants"][TRACKTRAIN]["ratio"]
        met = "met" if ratio <= GOAL_RATIO else "NOT met"
        text.append(f"\nGoal, Trainer / hand-written ≤ {GOAL_RATIO} on the transformer: {ratio:.3f} ({met}).")
    if checkpoint:
        text.append(f"\n## Checkpoint of {checkpoint['size_mb']:.0f} MB of {checkpoint['device']} tensors\n")
        saves = [(kind, kind, checkpoint) for kind in checkpoint["stall_ms"]]
        ms = {
            "loop stalled ms": "stall_ms",
            "first save's stall ms": "first_stall_ms",
            "committed after ms": "commit_ms",
        }
        save_columns = [("save", "l", lambda row: row[0])] + [
            (header, "r", lambda row, key=key: h.format_cell(row[2][key][row[0]], decimals=1))
            for header, key in ms.items()
        ]
        text.append(h.table(saves, save_columns))
    text.append(f"\nstatistic: {args.stat} of {args.repeats} repeats (steps), {args.checkpoint_repeats} (checkpoints)")
    return "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    def options(add: Callable[..., Any]) -> None:
        add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        add("--cases", default="transformer,mlp", help="workloads to time (transformer, mlp)")
        add("--out", help="also write the Markdown table to this file")

    counts = {
        "repeats": (7, 2, "timed short+long fit pairs per variant"),
        "batches": (40, 3, "batches per epoch"),
        "short_epochs": (1, 1, "epochs of the short fit"),
        "long_epochs": (4, 2, "epochs of the long fit"),
        "checkpoint_mb": (1024, 8, "size of the saved state in MB (0: skip)"),
        "checkpoint_repeats": (4, 2, "saves of each kind"),
    }
    args = h.parse(
        __doc__, argv, counts, options=options, positive=("repeats", "batches"), cases=("transformer", "mlp")
    )
    device = torch.device(args.device)
    error = (
        f"--long-epochs ({args.long_epochs}) must exceed --short-epochs ({args.short_epochs})"
        if args.long_epochs <= args.short_epochs
        else "--device cuda: no CUDA device here; use --device cpu for a dry run"
        if device.type == "cuda" and not torch.cuda.is_available()
        else None
    )
    if error:  # argparse's way: the message, then exit status 2
        print(f"bench_gpu.py: error: {error}", file=sys.stderr)
        return 2
    rng = h.prepare(args)
    lightning, lightning_version = load_peer("lightning", skip=args.no_lightning)
    env = h.environment(args.threads, lightning=lightning_version)
    env["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    env["cuda"] = torch.version.cuda or "none"
    root = h.temporary_root("bench-gpu-")
    workloads = make_workloads(args, device)
    fits: dict[str, Callable] = {RAW: fit_raw, TRACKTRAIN: fit_tracktrain}
    if lightning is not None:
        fits[LIGHTNING] = lightning_fitter(lightning)
    h.freeze_garbage()
    problems: list[str] = []
    steps = {}
    for key in args.cases.split(","):
        print(f"timing {key} ...", flush=True)
        steps[key] = {"key": key, **measure_steps(workloads[key], fits, args, root, rng, problems)}
    checkpoint = None
    if args.checkpoint_mb > 0:
        print("timing checkpoint saves ...", flush=True)
        checkpoint = measure_checkpoint_stall(args, device, root, problems)
    table = report(steps, checkpoint, env, args)
    print("\n" + table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(table + "\n")
    return h.finish(args, {"environment": env, "steps": steps, "checkpoint": checkpoint}, problems)


if __name__ == "__main__":
    sys.exit(main())
