"""Started by torchrun in tests/trainer/test_process_group_exit.py: what users do after an FSDP fit — gather the
trained parameters (full_tensor(), a collective) and save them — then exit. `fail` raises after the gather instead.

An atexit handler registered before the fit (so it runs after the Trainer's side's own, atexit being last in, first
out) writes whether the process group was still up at exit."""

import atexit
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch.distributed as dist  # noqa: E402

from tests.trainer._tasks import Classifier, make_loader  # noqa: E402
from tracktrain import Trainer  # noqa: E402

out, ending = Path(sys.argv[1]), sys.argv[2]
rank = os.environ["RANK"]
atexit.register(lambda: (out / f"exit_rank{rank}.json").write_text(json.dumps({"group_up": dist.is_initialized()})))

module = Classifier()
trainer = Trainer(
    max_epochs=2, strategy="fsdp", enable_progress_bar=False, enable_checkpointing=False, default_root_dir=out
)
trainer.fit(module, make_loader())
weights = {name: parameter.full_tensor().flatten().tolist() for name, parameter in module.named_parameters()}
(out / f"weights_rank{rank}.json").write_text(json.dumps(weights))
if ending == "fail":
    raise RuntimeError("failed after the fit")
