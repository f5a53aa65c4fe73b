"""Started by torchrun in tests/trainer/test_ddp.py: a Trainer(strategy="ddp") fit, each rank saving its weights."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer._tasks import Classifier, make_loader  # noqa: E402
from tracktrain import Trainer  # noqa: E402

out = Path(sys.argv[1])
module = Classifier()
trainer = Trainer(max_epochs=2, strategy="ddp", enable_progress_bar=False, default_root_dir=out)
trainer.fit(module, make_loader(), make_loader(seed=1))
rank = os.environ["RANK"]
weights = [p.detach().flatten().tolist() for p in module.parameters()]
(out / f"rank{rank}.json").write_text(json.dumps({"weights": weights, "step": trainer.global_step}))
