"""self.log: per-step values at the log interval, per-epoch aggregates that match a direct computation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tracktrain import Trainer
from tracktrain.trainer.metric_log import to_floats

from ._tasks import Classifier, make_loader, quiet


class Values(Classifier):
    """Logs the batch's own numbers so the expected aggregates can be computed directly."""

    def train_step(self, batch, batch_idx):
        x, y = batch
        self.log("first", x[:, 0].mean(), on_step=True, on_epoch=True)
        self.log("total", x[:, 0].sum(), on_step=False, on_epoch=True, reduce="sum")
        self.log("peak", x[:, 0].max(), on_epoch=True, on_step=False, reduce="max")
        self.log("low", x[:, 0].min(), on_epoch=True, on_step=False, reduce="min")
        self.log("weighted", x[:, 1].mean(), on_step=False, on_epoch=True, batch_size=len(x))
        return super().train_step(batch, batch_idx)

    def eval_step(self, batch, batch_idx):
        x, _ = batch
        self.log("val_first", x[:, 0].mean())  # per epoch by default, weighted by the batch's length


def test_epoch_aggregates_match_a_direct_computation(tmp_path):
    loader = make_loader(n=60, batch_size=8)  # the last batch has 4 rows: weighting matters
    x = loader.dataset.tensors[0]
    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    trainer.fit(Values(), loader, loader)
    metrics = to_floats(trainer.callback_metrics)
    batch_means = torch.stack([b[0][:, 0].mean() for b in loader])
    assert metrics["first_epoch"] == pytest.approx(float(x[:, 0].mean()), rel=1e-5)  # weighted by batch length
    assert metrics["first"] == metrics["first_epoch"]
    assert metrics["total"] == pytest.approx(float(x[:, 0].sum()), rel=1e-5)
    assert metrics["peak"] == pytest.approx(float(x[:, 0].max()))
    assert metrics["low"] == pytest.approx(float(x[:, 0].min()))
    assert metrics["weighted"] == pytest.approx(float(x[:, 1].mean()), rel=1e-5)
    assert metrics["val_first"] == pytest.approx(float(x[:, 0].mean()), rel=1e-5)
    assert metrics["first_epoch"] != pytest.approx(float(batch_means.mean()), rel=1e-6)  # not an unweighted mean
    assert set(trainer.logged_metrics) >= {"first_epoch", "total", "peak", "low", "weighted", "val_first"}


def test_step_values_are_published_every_n_steps_at_their_step(tmp_path):
    from tracktrain.loggers import CSVLogger

    published = []

    class Sink(CSVLogger):
        def log_metrics(self, metrics, step):
            published.append((step, dict(metrics)))
            super().log_metrics(metrics, step)

    class StepLogs(Classifier):
        def train_step(self, batch, batch_idx):
            self.log("step_no", float(self.global_step + 1))  # the step this batch's optimizer step will be
            return super().train_step(batch, batch_idx)

    trainer = Trainer(
        enable_progress_bar=False,
        enable_checkpointing=False,
        max_epochs=2,
        log_every_n_steps=3,
        default_root_dir=tmp_path,
        loggers=[Sink()],
    )
    trainer.fit(StepLogs(), make_loader())  # 16 steps
    step_rows = [(step, values["step_no"]) for step, values in published if "step_no" in values]
    assert step_rows == [(s, float(s)) for s in (3, 6, 9, 12, 15)]
    epoch_rows = [step for step, values in published if "train_loss" not in values and "step_no" not in values]
    assert epoch_rows == []  # nothing logged per epoch here


def test_values_stay_tensors_until_published(tmp_path):
    seen = []

    class Probe(Classifier):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(type(self.trainer.callback_metrics["train_loss"]))

    Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2)).fit(Probe(), make_loader())
    assert seen == [torch.Tensor, torch.Tensor]


def test_values_logged_in_epoch_end_hooks_are_published(tmp_path):
    class HookLogs(Classifier):
        def on_train_epoch_end(self):
            self.log("epoch_marker", float(self.current_epoch))

    trainer = Trainer(**quiet(tmp_path, max_epochs=3, limit_train_batches=1))
    trainer.fit(HookLogs(), make_loader())
    assert trainer.logged_metrics["epoch_marker"] == 2.0


def test_progress_bar_metrics_are_the_prog_bar_names(tmp_path):
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, limit_train_batches=2))
    trainer.fit(Classifier(), make_loader(), make_loader())
    assert set(trainer.progress_bar_metrics) == {"train_loss"}


def test_validate_and_test_return_the_epoch_values(tmp_path):
    trainer = Trainer(**quiet(tmp_path))
    module = Classifier()
    (validated,) = trainer.validate(module, make_loader())
    (tested,) = trainer.test(module, make_loader())
    assert validated == tested and set(validated) == {"val_loss"}
    x, y = make_loader().dataset.tensors
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(module(x), y)
    assert validated["val_loss"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m.log("x", torch.ones(3)), ValueError, r"needs a scalar, got a tensor of shape \(3,\)"),
        (lambda m: m.log("x", "high"), TypeError, "needs a number or a one-element tensor, got str"),
        (lambda m: m.log("x", 1.0, reduce="median"), ValueError, "must be one of"),
        (lambda m: m.log("x", 1.0, on_step=False, on_epoch=False), ValueError, "records nothing"),
        (lambda m: m.log("", 1.0), TypeError, "non-empty string name"),
        (lambda m: m.log("x", 1.0, batch_size=0), ValueError, "batch_size=.*positive integer, got 0"),
    ],
)
def test_bad_log_calls_say_what_is_wrong(tmp_path, call, error, match):
    class Bad(Classifier):
        def train_step(self, batch, batch_idx):
            call(self)
            return super().train_step(batch, batch_idx)

    with pytest.raises(error, match=match):
        Trainer(**quiet(tmp_path, max_epochs=1)).fit(Bad(), make_loader())


def test_changing_a_names_options_mid_epoch_is_an_error(tmp_path):
    class Flip(Classifier):
        def train_step(self, batch, batch_idx):
            self.log("x", 1.0, reduce="sum" if batch_idx else "mean", on_epoch=True)
            return super().train_step(batch, batch_idx)

    with pytest.raises(ValueError, match="same options every time"):
        Trainer(**quiet(tmp_path, max_epochs=1)).fit(Flip(), make_loader())


def test_log_outside_a_trainer_does_nothing():
    module = Classifier()
    module.log("x", 1.0)  # a module used on its own, e.g. in a unit test of train_step
    x, y = make_loader().dataset.tensors
    assert module.train_step((x, y), 0).requires_grad


def test_batch_size_is_inferred_from_dict_batches(tmp_path):
    class DictBatches(Classifier):
        def train_step(self, batch, batch_idx):
            self.log("mean_x", batch["x"][:, 0].mean(), on_step=False, on_epoch=True)
            return super().train_step((batch["x"], batch["y"]), batch_idx)

    x, y = make_loader(n=20).dataset.tensors
    batches = [{"x": x[:16], "y": y[:16]}, {"x": x[16:], "y": y[16:]}]
    trainer = Trainer(**quiet(tmp_path, max_epochs=1))
    trainer.fit(DictBatches(), batches)
    assert float(trainer.callback_metrics["mean_x"]) == pytest.approx(float(x[:, 0].mean()), rel=1e-5)


def test_validate_returns_what_the_epoch_end_hook_logged(tmp_path):
    """As Lightning: a metric computed over the whole pass in on_validation_epoch_end (the torchmetrics habit) is
    among what validate()/test() return, next to what the steps logged."""

    class EpochMetric(Classifier):
        def on_validation_epoch_end(self):
            self.log("val_epoch_metric", torch.tensor(0.25))

    (result,) = Trainer(**quiet(tmp_path, max_epochs=1)).validate(EpochMetric(), make_loader())

    assert result["val_epoch_metric"] == 0.25 and "val_loss" in result


def _logging_hidden(base, train_name, eval_name):
    """A module of `base` (ours or Lightning's) that logs "hidden" and "val_hidden" with logger=False beside
    "shown" and "val_shown", in its steps named `train_name` and `eval_name`."""

    def train(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("shown", loss)
        self.log("hidden", loss * 2, logger=False, prog_bar=True)
        self.log("hidden_epoch_only", loss, logger=False, on_step=False, on_epoch=True)
        return loss

    def evaluate(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("val_shown", loss)
        self.log("val_hidden", loss, logger=False)

    def init(self):
        base.__init__(self)
        self.net = torch.nn.Linear(4, 2)

    return type(
        "Hidden",
        (base,),
        {
            "__init__": init,
            train_name: train,
            eval_name: evaluate,
            "configure_optimizers": lambda self: torch.optim.SGD(self.parameters(), lr=0.1),
        },
    )


def test_log_with_logger_false_reaches_callbacks_and_the_bar_but_not_the_loggers_as_in_lightning(tmp_path):
    """`self.log(..., logger=False)` (was refused): in `callback_metrics` and the progress bar, not in
    `logged_metrics`, the loggers' files or what `validate()` returns — the same names as Lightning's, side by side."""
    lightning = pytest.importorskip("lightning.pytorch")
    from tracktrain import LoopModule
    from tracktrain.loggers import CSVLogger

    seen = {}
    for name, base, trainer_class, steps in (
        ("ours", LoopModule, Trainer, ("train_step", "eval_step")),
        ("lightning", lightning.LightningModule, lightning.Trainer, ("training_step", "validation_step")),
    ):
        torch.manual_seed(0)
        module = _logging_hidden(base, *steps)()
        logger = (CSVLogger if name == "ours" else lightning.loggers.CSVLogger)(tmp_path / name)
        trainer = trainer_class(
            max_epochs=2, log_every_n_steps=1, logger=logger, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, default_root_dir=tmp_path / name, num_sanity_val_steps=0,
        )  # fmt: skip
        trainer.fit(module, make_loader(n=32), make_loader(n=16))
        header = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()[0].split(",")
        seen[name] = {
            "callback": sorted(trainer.callback_metrics),
            "logged": sorted(trainer.logged_metrics),
            "bar": sorted(trainer.progress_bar_metrics),
            "csv": sorted(set(header) - {"samples_seen"}),  # ours: an axis beside the step and the epoch
        }
        seen[name]["validate"] = sorted(trainer.validate(module, make_loader(n=16), verbose=False)[0])
    assert "hidden" in seen["ours"]["callback"] and "hidden" in seen["ours"]["bar"]
    assert not any("hidden" in column for column in seen["ours"]["csv"] + seen["ours"]["logged"])
    assert seen["ours"] == seen["lightning"]


def test_each_entry_point_starts_with_no_values_of_the_one_before_as_in_lightning(tmp_path):
    """Lightning forgets `callback_metrics`, `logged_metrics` and the bar's values when `fit`, `validate`, `test` or
    `predict` starts: after `validate()` only validation's values are there, not the fit's (ours kept them)."""
    lightning = pytest.importorskip("lightning.pytorch")
    from tracktrain import LoopModule

    seen = {}
    for name, base, trainer_class, steps in (
        ("ours", LoopModule, Trainer, ("train_step", "eval_step")),
        ("lightning", lightning.LightningModule, lightning.Trainer, ("training_step", "validation_step")),
    ):
        module = _logging_hidden(base, *steps)()
        trainer = trainer_class(
            max_epochs=1, log_every_n_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, default_root_dir=tmp_path / name, num_sanity_val_steps=0,
        )  # fmt: skip
        after = []

        def names():
            after.append((sorted(trainer.callback_metrics), sorted(trainer.progress_bar_metrics)))

        trainer.fit(module, make_loader(n=32), make_loader(n=16))
        names()
        trainer.validate(module, make_loader(n=16), verbose=False)
        names()
        trainer.fit(module, make_loader(n=32))  # its limit reached already: nothing trains
        names()
        seen[name] = after
    assert seen["ours"][1] == (["val_hidden", "val_shown"], []) and seen["ours"][2] == ([], [])
    assert seen["ours"] == seen["lightning"]


def test_logged_metrics_hold_each_training_steps_values_at_its_end_as_in_lightning(tmp_path):
    """Lightning's `trainer.logged_metrics` has the step's values at every batch end, not only every
    `log_every_n_steps` (a callback reading `trainer.logged_metrics["shown"]` each step found it missing or stale)."""
    lightning = pytest.importorskip("lightning.pytorch")
    from tracktrain import Callback, LoopModule

    seen = {}
    for name, base, trainer_class, callback_base, steps in (
        ("ours", LoopModule, Trainer, Callback, ("train_step", "eval_step")),
        ("lightning", lightning.LightningModule, lightning.Trainer, lightning.Callback,
         ("training_step", "validation_step")),
    ):  # fmt: skip
        read = []

        class Reading(callback_base):
            def on_train_batch_end(self, trainer, *args):
                read.append({key: round(float(value), 5) for key, value in trainer.logged_metrics.items()})

        torch.manual_seed(0)
        module = _logging_hidden(base, *steps)()
        trainer = trainer_class(
            max_epochs=2, logger=False, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, default_root_dir=tmp_path / name, num_sanity_val_steps=0,
            callbacks=[Reading()],
        )  # fmt: skip
        trainer.fit(module, make_loader(n=32), make_loader(n=16))
        seen[name] = read, sorted(trainer.logged_metrics)
    assert len(seen["ours"][0]) == 8 and all("shown" in step for step in seen["ours"][0])
    assert len({step["shown"] for step in seen["ours"][0]}) == 8  # each step's own value
    assert seen["ours"] == seen["lightning"]
