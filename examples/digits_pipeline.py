"""Train the digits MLP as a two-stage pipeline: each batch split into micro-batches that flow through the first
half of the model on rank 0 and the second half on rank 1 (Colossal-AI's `schedule=`, on torch.distributed.pipelining).

    torchrun --standalone --nproc_per_node 2 examples/digits_pipeline.py --epochs 20
    torchrun --standalone --nproc_per_node 2 examples/digits_pipeline.py --schedule gpipe

Every rank reads the same batches; the first stage takes the images, the last the labels, and the loss comes back to
every rank. The rank holding the last stage prints the epochs. Runs offline: the digits ship inside scikit-learn.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

import torch
from digits_data import digits_loaders
from torch import nn
from torch.utils.data import DataLoader

from tracktrain.distributed import init_from_env
from tracktrain.engine import ModelEngine
from tracktrain.engine.pipeline import SCHEDULES, PipelineSchedule, split_stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    init_from_env()  # torchrun's environment: the process group of the pipeline's ranks
    torch.manual_seed(args.seed)  # the same initial weights on every rank: each keeps its stages
    train_loader, val_loader = digits_loaders(args.batch_size, args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    # every batch splits into equal micro-batches: the last, smaller one of an epoch is dropped
    train_loader = DataLoader(
        train_loader.dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=generator
    )
    layers = [("embed", nn.Linear(64, 128)), ("act", nn.ReLU()), ("hidden", nn.Linear(128, 128)), ("act2", nn.ReLU())]
    model = nn.Sequential(OrderedDict([*layers, ("head", nn.Linear(128, 10))]))
    stages_at = ["hidden"] if args.schedule != "interleaved_1f1b" else ["act", "hidden", "act2"]
    schedule = PipelineSchedule(split_stages(model, stages_at), args.microbatches, schedule=args.schedule)
    stages = schedule.local_model  # this rank's stages: its optimizer steps their parameters only
    optimizer = torch.optim.SGD(stages.parameters(), lr=args.lr, momentum=0.9)
    engine = ModelEngine(stages, optimizer, nn.CrossEntropyLoss(), schedule=schedule)

    for epoch in range(1, args.epochs + 1):
        engine.train()
        losses = []
        for batch in train_loader:
            engine.zero_grad()
            _, _, loss = engine.execute_schedule(iter([batch]))
            engine.step()
            losses.append(float(loss))
        engine.eval()
        correct = total = 0
        val_losses = []
        with torch.no_grad():
            for batch in val_loader:
                output, label, loss = engine.execute_schedule(iter([batch]), forward_only=True)
                val_losses.append(float(loss))
                if output is not None:  # the last stage's rank
                    correct += int((output.argmax(dim=1) == label).sum())
                    total += len(label)
        if schedule.holds_last_stage:
            print(
                f"epoch {epoch:3d}/{args.epochs}  train_loss {sum(losses) / len(losses):.4f}  "
                f"val_loss {sum(val_losses) / len(val_losses):.4f}  val_accuracy {correct / total:.4f}",
                flush=True,
            )
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
