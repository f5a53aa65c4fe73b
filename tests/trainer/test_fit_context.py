"""The fit's state lives in one `FitContext`, made when a fit starts and handed to the parts that set it up; nothing
outside the `Trainer` class assigns a Trainer attribute, and what a fit creates is read-only on the Trainer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "tracktrain", ROOT / "integrations" / "tracktrain_integrations"]
TRAINER_CLASS_FILE = ROOT / "tracktrain" / "trainer" / "trainer.py"
# names that hold a Trainer where the code sets something on it
TRAINER_NAMES = {"trainer", "_trainer"}


def trainer_attribute_writes(source: str) -> list[str]:
    """Assignments whose target is an attribute of a name that holds a Trainer (`trainer.x = ...`,
    `self._trainer.x = ...`, `self.trainer.x += ...`), as `line: text`."""
    writes = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [item for target in node.targets for item in _flattened(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and _holds_a_trainer(target.value):
                writes.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return writes


def _flattened(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [item for element in target.elts for item in _flattened(element)]
    return [target]


def _holds_a_trainer(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in TRAINER_NAMES
    return isinstance(value, ast.Attribute) and value.attr in TRAINER_NAMES


def test_nothing_outside_the_trainer_class_assigns_a_trainer_attribute():
    writes = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == TRAINER_CLASS_FILE:
                continue
            writes += [f"{path.relative_to(ROOT)}:{write}" for write in trainer_attribute_writes(path.read_text())]
    assert writes == [], "write the fit's FitContext (handed to you) or call a Trainer method:\n" + "\n".join(writes)


def test_the_scan_finds_each_form_of_a_write():
    source = (
        "trainer.module = m\n"
        "self._trainer.ckpt_path = None\n"
        "self.trainer.fitting, other = True, 1\n"
        "trainer.steps += 1\n"
        "trainer.context.settings = {}\n"  # the context's own field: not a Trainer attribute
        "engine.state.max_epochs = None\n"
    )
    assert [write.split(":")[0] for write in trainer_attribute_writes(source)] == ["1", "2", "3", "4"]


@pytest.mark.parametrize(
    "name", ["module", "optimizers", "lr_scheduler_configs", "model_engine", "ckpt_path", "fitting", "device"]
)
def test_what_a_fit_creates_is_read_only_on_the_trainer(name):
    trainer = Trainer(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, logger=False)

    with pytest.raises(AttributeError, match=f"Trainer.{name} is read-only"):
        setattr(trainer, name, None)


def test_each_fit_starts_from_a_fresh_context_and_the_parts_fill_it(tmp_path):
    """One context object for the Trainer's life (its parts are built with it), emptied when each fit starts."""

    class StopsAfterOneBatch(Callback):  # so that the Trainer's limit is not reached and the next fit trains
        def on_train_batch_end(self, trainer, *args):
            trainer.should_stop = True

    trainer = Trainer(
        max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, logger=False, default_root_dir=tmp_path,
        callbacks=[StopsAfterOneBatch()],
    )  # fmt: skip
    context = trainer.context
    assert context.module is None
    module = Classifier()

    trainer.fit(module, make_loader(), val_dataloaders=make_loader())

    assert trainer.context is context
    assert trainer.module is module is context.module
    assert trainer.optimizers == context.optimizers and isinstance(context.optimizers[0], torch.optim.Optimizer)
    assert trainer.model_engine is context.model_engine and context.model_engine.model is module
    assert context.run_seed is not None and trainer.settings["trainer"]["seed"] == context.run_seed
    assert context.val_dataloaders is not None
    assert not context.fitting and not context.sanity_checking  # both only while the fit runs
    first_optimizers = list(context.optimizers)

    trainer.fit(Classifier(), make_loader())  # a second fit: nothing of the first one's (its loader, optimizers)
    assert trainer.context is context and trainer.module is not module
    assert context.val_dataloaders is None and context.optimizers[0] is not first_optimizers[0]


def test_the_strategy_gets_the_precision_as_an_argument(tmp_path):
    """`setup_module(module, autocast_dtype)`: the Trainer's precision reaches the strategy as an argument."""
    from tracktrain.trainer.strategies import Strategy

    seen = []

    class Recording(Strategy):
        def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None):
            seen.append(autocast_dtype)
            return super().setup_module(module, autocast_dtype)

    trainer = Trainer(
        max_epochs=1,
        precision="bf16-mixed",
        strategy=Recording(),
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Classifier(), make_loader())
    assert seen == [torch.bfloat16]


def test_a_loader_asked_for_before_the_seed_is_known_is_sharded_again_with_it(tmp_path):
    """`estimated_stepping_batches` in `configure_optimizers` reads the training loader before the fit draws (or
    resumes) its seed: the loader the fit trains on is still sharded with the run's seed."""
    import torch.distributed as dist

    from tracktrain import Callback

    class Counting(Classifier):
        def configure_optimizers(self):
            self.total_steps = self.trainer.estimated_stepping_batches
            return super().configure_optimizers()

    seeds = []

    class Watch(Callback):
        def on_train_start(self, trainer, module):
            seeds.append((trainer.train_engine.state.dataloader.sampler.seed, trainer.run_seed))

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        trainer = Trainer(
            max_epochs=1,
            strategy="ddp",  # no seed: the fit draws one after configure_optimizers ran
            callbacks=[Watch()],
            enable_progress_bar=False,
            enable_checkpointing=False,
            logger=False,
            default_root_dir=tmp_path,
        )
        module = Counting()
        trainer.fit(module, make_loader(shuffle=True))
    finally:
        dist.destroy_process_group()
    ((sharded_with, run_seed),) = seeds
    assert module.total_steps == 8 and sharded_with == run_seed != 0


def test_callbacks_set_on_the_trainer_are_the_ones_its_checkpoints_save(tmp_path):
    """`trainer.callbacks = [...]` replaces the one list the Trainer's parts were built with: the Trainer's checkpoint
    entry saves the new callbacks' states (and a value that is not a callback is refused, naming what it takes)."""
    from tracktrain.callbacks import Callback

    class Counting(Callback):
        def state_dict(self):
            return {"count": 7}

    trainer = Trainer(max_epochs=1, enable_progress_bar=False, logger=False, default_root_dir=tmp_path)
    counting = Counting()
    trainer.callbacks = [*trainer.callbacks, counting]

    assert trainer.state.state_dict()["callbacks"][counting.state_key] == {"count": 7}
    with pytest.raises(TypeError, match="Callback instances"):
        trainer.callbacks = [object()]
