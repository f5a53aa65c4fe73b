"""Started by torchrun in tests/trainer/test_process_group_exit.py: a script that joins the group through
tracktrain, then imports DCP (as the sharded saver does on its first save), runs a collective and destroys the group;
it writes the names of the gloo threads left after that (Linux names them in /proc). A group something still holds
keeps its threads, which the interpreter's teardown can then abort on."""

import gc
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tracktrain.distributed.collectives import init_from_env  # noqa: E402

out = Path(sys.argv[1])
init_from_env()
import torch.distributed.checkpoint  # noqa: E402,F401  (first imported after the group started)

shared = torch.ones(4)
dist.broadcast(shared, src=0)
dist.destroy_process_group()
gc.collect()
tasks = Path("/proc/self/task")
names = sorted((tasks / task / "comm").read_text().strip() for task in os.listdir(tasks))
(out / f"threads_rank{os.environ['RANK']}.json").write_text(json.dumps([name for name in names if "gloo" in name]))
