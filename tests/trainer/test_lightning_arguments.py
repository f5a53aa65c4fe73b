"""Lightning's Trainer arguments where the meaning is ours (issue 35): `check_val_every_n_epoch` (our
`val_every_n_epochs` under Lightning's name), `val_check_interval` as a fraction of the epoch, and `devices` (checked
against the processes the launcher started). Each used as Lightning users write it, and each misuse an error."""

from __future__ import annotations

import pytest
import torch

from tracktrain import Callback, Trainer

from ._tasks import Classifier, make_loader


class Validations(Callback):
    """(epoch, global step) at the end of each validation of the fit (not the sanity check's)."""

    def __init__(self) -> None:
        self.at: list[tuple[int, int]] = []

    def on_validation_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.at.append((trainer.current_epoch, trainer.global_step))


def _validations(tmp_path, loader=None, **options) -> list[tuple[int, int]]:
    seen = Validations()
    trainer = Trainer(
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_checkpointing=False,
        loggers=False,
        num_sanity_val_steps=0,
        callbacks=[seen],
        **options,
    )
    trainer.fit(Classifier(), loader if loader is not None else make_loader(), make_loader(n=16))  # 8 batches/epoch
    return seen.at


@pytest.mark.parametrize("name", ["check_val_every_n_epoch", "val_every_n_epochs"])
def test_check_val_every_n_epoch_is_val_every_n_epochs(tmp_path, name):
    assert _validations(tmp_path, max_epochs=4, **{name: 2}) == [(1, 16), (3, 32)]
    assert Trainer(default_root_dir=tmp_path, **{name: 3}).val_every_n_epochs == 3


def test_both_names_or_a_bad_value_are_errors(tmp_path):
    with pytest.raises(ValueError, match=r"one setting under two names.*give one"):
        Trainer(default_root_dir=tmp_path, val_every_n_epochs=2, check_val_every_n_epoch=2)
    with pytest.raises(ValueError, match=r"check_val_every_n_epoch=\.\.\.\) must be a positive integer.*got 0"):
        Trainer(default_root_dir=tmp_path, check_val_every_n_epoch=0)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"val_check_interval": 0.5}, [(0, 4), (0, 8), (1, 12), (1, 16)]),  # twice per epoch
        ({"val_check_interval": 0.3}, [(0, 2), (0, 4), (0, 6), (0, 8), (1, 10), (1, 12), (1, 14), (1, 16)]),
        ({"val_check_interval": 1.0}, [(0, 8), (1, 16)]),  # Lightning's default: the epoch's end
        ({"val_check_interval": 3}, [(0, 3), (0, 6), (1, 11), (1, 14)]),  # batches, counted within each epoch
        ({"val_check_interval": 0.5, "check_val_every_n_epoch": 2}, [(1, 12), (1, 16)]),  # only in every 2nd epoch
    ],
)
def test_val_check_interval_in_batches_or_as_a_fraction_of_the_epoch(tmp_path, options, expected):
    assert _validations(tmp_path, max_epochs=2, **options) == expected


@pytest.mark.parametrize("value", [0.0, 1.5, -0.5, float("nan"), float("inf"), True, "0.5", 0])
def test_val_check_interval_out_of_range_is_an_error(tmp_path, value):
    with pytest.raises(ValueError, match=r"val_check_interval=\.\.\.\) must be"):
        Trainer(default_root_dir=tmp_path, val_check_interval=value)


def test_an_interval_no_epoch_reaches_or_a_fraction_of_an_unsized_loader_is_an_error_before_training(tmp_path):
    with pytest.raises(ValueError, match=r"val_check_interval=9\) is more than the 8 training batches"):
        _validations(tmp_path, max_epochs=1, val_check_interval=9)

    def unsized():
        yield from make_loader()

    class Batches:
        def __iter__(self):
            return unsized()

    with pytest.raises(ValueError, match=r"val_check_interval=0.5\) is a fraction.*no length"):
        _validations(tmp_path, Batches(), max_steps=4, val_check_interval=0.5)


def test_devices_accepts_auto_and_the_processes_started(tmp_path, monkeypatch):
    for devices in ("auto", 1):
        Trainer(default_root_dir=tmp_path, devices=devices)
    for devices in (2, -1, "2", [0], True, "gpu"):
        with pytest.raises(ValueError, match=r"devices=.*1 process\(es\).*torchrun --nproc_per_node N"):
            Trainer(default_root_dir=tmp_path, devices=devices)
    monkeypatch.setenv("WORLD_SIZE", "4")  # as torchrun --nnodes 2 --nproc_per_node 2 sets them
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    Trainer(default_root_dir=tmp_path, devices=2)  # per machine, as Lightning counts devices
    with pytest.raises(ValueError, match=r"devices=1\) but 2 process\(es\) run on this machine"):
        Trainer(default_root_dir=tmp_path, devices=1)


def _torch_flags() -> tuple[bool, bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )


@pytest.mark.parametrize(
    ("deterministic", "benchmark"),
    [(None, None), (None, True), (True, None), ("warn", None), (False, True), (True, False), (False, None)],
)
def test_deterministic_and_benchmark_set_torchs_flags_as_lightnings_do(deterministic, benchmark):
    """imagenet.py's `Trainer(benchmark=True)`; `deterministic=True` strict (an error on a nondeterministic kernel),
    "warn" a warning, None leaving torch's setting: the flags after our Trainer equal those after Lightning's, from
    the same starting flags (strict and benchmark on, so that "leave it" shows)."""
    lightning = pytest.importorskip("lightning.pytorch")
    after = []
    for make in (Trainer, lightning.Trainer):
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = True
        make(deterministic=deterministic, benchmark=benchmark, logger=False, enable_progress_bar=False)
        after.append(_torch_flags())
    assert after[0] == after[1]


def test_deterministic_with_benchmark_warns_and_bad_values_are_errors():
    with pytest.warns(UserWarning, match="autotuner"):
        Trainer(deterministic=True, benchmark=True, loggers=False)
    assert torch.backends.cudnn.benchmark
    with pytest.raises(ValueError, match=r'deterministic=\.\.\.\) is True, "warn", False or None, got \'strict\''):
        Trainer(deterministic="strict")
    with pytest.raises(TypeError, match=r"benchmark=\.\.\.\) is True, False or None, got 'yes'"):
        Trainer(benchmark="yes")
