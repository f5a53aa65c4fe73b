"""`EMA`, `SWA`, `WeightAveraging`: the average is the one computed by hand, validation sees it, the module gets it at
the end, and a run killed and resumed ends with the same average, bit for bit."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.trainer._ddp import CrashAtStep, load_per_rank, save_per_rank
from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer
from tracktrain.callbacks.model_checkpoint import ModelCheckpoint
from tracktrain.callbacks.weight_averaging import EMA, SWA, WeightAveraging


def _trainer(root, callbacks, **options) -> Trainer:
    settings = {
        "max_epochs": 2,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "loggers": False,
        "default_root_dir": str(root),
        "seed": 0,
        **options,
    }
    return Trainer(callbacks=callbacks, **settings)


class RecordSteps(Callback):
    """The module's weights after each optimizer step (read at the batch end where the step count moved)."""

    def __init__(self) -> None:
        self.weights: list[list[torch.Tensor]] = []
        self._seen = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step > self._seen:
            self._seen = trainer.global_step
            self.weights.append([p.detach().clone() for p in module.parameters()])


def _averaged(callback: WeightAveraging) -> list[torch.Tensor]:
    assert callback.averaged_model is not None
    return [p.detach() for p in callback.averaged_model.module.parameters()]


# --------------------------------------------------------------------------------------------- the average
@pytest.mark.parametrize("accumulate", [1, 2])
def test_ema_is_the_hand_computed_ema_of_the_weights_after_each_optimizer_step(tmp_path, accumulate):
    ema, record = EMA(decay=0.8, start_step=3, copy_at_end=False), RecordSteps()
    trainer = _trainer(tmp_path, [ema, record], accumulate_grad_batches=accumulate)
    trainer.fit(Classifier(), make_loader())
    assert len(record.weights) == 16 // accumulate  # 8 batches per epoch, 2 epochs
    expected = [w.clone() for w in record.weights[3]]  # the first update (step 3) copies the weights
    for weights in record.weights[4:]:
        expected = [0.8 * e + 0.2 * w for e, w in zip(expected, weights)]
    assert ema.averaged_model is not None and int(ema.averaged_model.n_averaged) == len(record.weights) - 3
    for got, want in zip(_averaged(ema), expected):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(_averaged(ema)[0], record.weights[-1][0])  # an average, not the last weights


def test_swa_averages_the_weights_at_each_epoch_end_from_its_start(tmp_path):
    swa, record = SWA(swa_epoch_start=1, copy_at_end=False), RecordSteps()
    trainer, val_loader = _trainer(tmp_path, [swa, record], max_epochs=4), make_loader(n=32, seed=1)
    trainer.fit(Classifier(), make_loader(), val_loader)
    ends = [record.weights[i] for i in (15, 23, 31)]  # the ends of epochs 1, 2, 3 (8 steps each)
    for got, *at_ends in zip(_averaged(swa), *ends):
        torch.testing.assert_close(got, sum(at_ends) / 3)
    # the last epoch's validation ran after that epoch's end was averaged in
    val_loss = float(trainer.callback_metrics["val_loss"])
    assert val_loss == pytest.approx(float(_loss_of(_averaged(swa), val_loader)), rel=1e-5)


# ------------------------------------------------------------------------------------ validation, the end
def _loss_of(weights: list[torch.Tensor], loader) -> torch.Tensor:
    weight, bias = weights
    x, y = loader.dataset.tensors
    return F.cross_entropy(x @ weight.T + bias, y)


def test_validation_logs_the_averaged_models_metrics_and_training_keeps_its_own_weights(tmp_path):
    ema, record = EMA(decay=0.5, copy_at_end=False), RecordSteps()
    val_loader = make_loader(n=32, seed=1)
    trainer = _trainer(tmp_path, [ema, record], max_epochs=1)
    module = Classifier(lr=0.5)
    trainer.fit(module, make_loader(), val_loader)
    val_loss = float(trainer.callback_metrics["val_loss"])
    assert val_loss == pytest.approx(float(_loss_of(_averaged(ema), val_loader)), rel=1e-5)
    assert val_loss != pytest.approx(float(_loss_of(record.weights[-1], val_loader)), rel=1e-3)
    for own, last in zip(module.parameters(), record.weights[-1]):  # swapped back after validation
        assert torch.equal(own.detach(), last)
    # a test run after the fit also uses the average (the module still holds its own weights)
    test_loss = trainer.test(module, val_loader)[0]["val_loss"]
    assert test_loss == pytest.approx(float(_loss_of(_averaged(ema), val_loader)), rel=1e-5)
    assert torch.equal(module.net.weight.detach(), record.weights[-1][0])


def test_in_epoch_validation_sees_the_average_of_the_steps_before_it(tmp_path):
    ema, record = EMA(decay=0.5, copy_at_end=False), RecordSteps()

    class ValLossAt(Callback):
        def __init__(self) -> None:
            self.values: list[tuple[int, float]] = []

        def on_validation_end(self, trainer, module):
            if not trainer.sanity_checking:  # the fit's validations only
                self.values.append((trainer.global_step, float(trainer.callback_metrics["val_loss"])))

    seen, val_loader = ValLossAt(), make_loader(n=32, seed=1)
    trainer = _trainer(tmp_path, [ema, record, seen], max_epochs=1, val_check_interval=4)
    trainer.fit(Classifier(lr=0.5), make_loader(), val_loader)
    step, value = seen.values[0]
    assert step == 4
    expected = record.weights[0]
    for weights in record.weights[1:4]:
        expected = [0.5 * e + 0.5 * w for e, w in zip(expected, weights)]
    assert value == pytest.approx(float(_loss_of(expected, val_loader)), rel=1e-5)


def test_the_module_holds_the_average_when_fit_ends(tmp_path):
    ema = EMA(decay=0.7)
    module = Classifier()
    _trainer(tmp_path, [ema]).fit(module, make_loader())
    for own, averaged in zip(module.parameters(), _averaged(ema)):
        assert torch.equal(own.detach(), averaged)


class BatchNormNet(Classifier):
    def __init__(self) -> None:
        super().__init__(lr=0.2)
        self.net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))


def test_swa_recomputes_batchnorm_statistics_for_the_averaged_weights(tmp_path):
    swa = SWA(swa_epoch_start=0)
    module, loader = BatchNormNet(), make_loader()
    _trainer(tmp_path, [swa]).fit(module, loader)
    linear = module.net[0]
    for own, averaged in zip(module.parameters(), _averaged(swa)):
        assert torch.equal(own.detach(), averaged)
    x = loader.dataset.tensors[0]
    with torch.no_grad():
        h = linear(x)  # the averaged first layer: what the BatchNorm sees in the averaged model
    bn = module.net[1]
    torch.testing.assert_close(bn.running_mean, h.mean(0), rtol=1e-5, atol=1e-6)  # 8 equal batches: the mean
    assert bn.momentum == 0.1  # update_bn gives it back


# --------------------------------------------------------------------------------------------------- resume
def _fit(root, make_callback, crash_at=None, ckpt_path=None, **options):
    averaging = make_callback()
    callbacks = [averaging, ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), every_n_train_steps=3, save_top_k=None)]
    if crash_at is not None:
        callbacks.append(CrashAtStep(crash_at))
    module = Classifier()
    trainer = _trainer(root, callbacks, **options)
    trainer.fit(module, make_loader(shuffle=True), make_loader(n=16, seed=1), ckpt_path=ckpt_path)
    return module, averaging, trainer


@pytest.mark.parametrize(
    "make_callback",
    [
        lambda: EMA(decay=0.6, start_step=2),
        lambda: SWA(swa_epoch_start=0, swa_lrs=0.03, annealing_epochs=2, annealing_strategy="linear"),
    ],
    ids=["ema", "swa"],
)
def test_a_run_killed_and_resumed_ends_with_the_same_average_bit_for_bit(tmp_path, make_callback):
    full_module, full, _ = _fit(tmp_path / "full", make_callback, max_epochs=3)
    with pytest.raises(RuntimeError, match="killed"):
        _fit(tmp_path / "cut", make_callback, crash_at=14, max_epochs=3)  # mid epoch 1 (8 steps per epoch)
    checkpoint = tmp_path / "cut" / "ckpt" / "checkpoint_12.pt"
    module, resumed, trainer = _fit(tmp_path / "cut", make_callback, ckpt_path=str(checkpoint), max_epochs=3)
    assert trainer.ckpt_path is not None and trainer.global_step == 24
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == (0.03 if isinstance(resumed, SWA) else 0.1)  # SWALR annealed to swa_lrs in 2 epochs
    assert full.averaged_model is not None and resumed.averaged_model is not None
    assert int(resumed.averaged_model.n_averaged) == int(full.averaged_model.n_averaged) > 1
    for got, want in zip(resumed.averaged_model.state_dict().values(), full.averaged_model.state_dict().values()):
        assert torch.equal(got, want)
    for got, want in zip(module.parameters(), full_module.parameters()):
        assert torch.equal(got, want)


# --------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: EMA(decay=1.0), r"EMA\(decay=...\) must be a number strictly between 0 and 1, got 1.0"),
        (lambda: EMA(decay=0), r"strictly between 0 and 1, got 0"),
        (lambda: EMA(start_step=-1), r"EMA\(start_step=...\) must be an integer >= 0.*got -1"),
        (lambda: EMA(every_n_steps=0), r"EMA\(every_n_steps=...\) must be an integer >= 1, got 0"),
        (lambda: SWA(swa_epoch_start=1.5), r"SWA\(swa_epoch_start=...\) .* got 1.5"),
        (lambda: SWA(swa_lrs=-0.1), r"SWA\(swa_lrs=...\) must be a positive learning rate.* got -0.1"),
        (lambda: SWA(annealing_strategy="cosine"), r'"cos" or "linear", got \'cosine\''),
        (lambda: WeightAveraging(avg_fn=lambda *a: a[0], multi_avg_fn=lambda *a: None), "not both"),
    ],
)
def test_bad_arguments_are_refused_with_the_value_and_the_fix(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("strategy", ["fsdp", "tensor_parallel", "pipeline"])
def test_sharded_strategies_are_refused(strategy):
    trainer = SimpleNamespace(strategy=SimpleNamespace(name=strategy))
    with pytest.raises(ValueError, match=f"strategy='{strategy}' leaves each rank only a shard"):
        EMA().on_fit_start(trainer, Classifier())  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------------------------- DDP
def _fit_ddp(out: str) -> None:
    ema = EMA(decay=0.7, copy_at_end=False)
    trainer = Trainer(
        max_epochs=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        loggers=False,
        default_root_dir=out,
        strategy="ddp",
        seed=3,
        callbacks=[ema],
    )
    trainer.fit(Classifier(), make_loader(shuffle=True), make_loader(n=16, seed=1))
    assert ema.averaged_model is not None and int(ema.averaged_model.n_averaged) == 4  # 32 samples a rank, 8 a batch
    save_per_rank(out, "ema", [p.tolist() for p in _averaged(ema)] + [p.tolist() for p in trainer.module.parameters()])


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_under_ddp_every_rank_keeps_the_same_average(tmp_path):
    from tracktrain.distributed.collectives import spawn

    spawn(_fit_ddp, 2, args=(str(tmp_path),))
    ranks = load_per_rank(tmp_path, "ema")
    assert ranks[0] == ranks[1]
    assert ranks[0][:2] != ranks[0][2:]  # the average, not the module's own weights


def test_the_average_lives_on_the_device_given_as_lightnings_device_argument(tmp_path):
    """`EMA(device="cpu")` (Lightning's `WeightAveraging(device=...)`): the average is kept there and is the same
    average; a device torch does not know is refused when the callback is built. (On CUDA with the average on the
    CPU: tests/cuda/test_precision.py.)"""
    placed, default = EMA(decay=0.8, copy_at_end=False, device="cpu"), EMA(decay=0.8, copy_at_end=False)
    for callback in (placed, default):
        _trainer(tmp_path, [callback]).fit(Classifier(), make_loader())

    assert all(p.device == torch.device("cpu") for p in _averaged(placed))
    assert all(torch.equal(a, b) for a, b in zip(_averaged(placed), _averaged(default)))
    with pytest.raises(RuntimeError, match="device"):
        EMA(decay=0.8, device="nowhere")
