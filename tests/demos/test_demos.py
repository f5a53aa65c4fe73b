"""tracktrain.demos against Lightning's demos, side by side (Lightning is the oracle): the same names, the same
initial weights from the same seed, the same data, and the same weights after the same short fit."""

from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import tracktrain.demos as demos
from tracktrain import Trainer
from tracktrain.demos import boring_classes, lstm, mnist_datamodule, transformer

ROOT = Path(__file__).resolve().parents[2]
L = pytest.importorskip("lightning.pytorch")
from lightning.pytorch import demos as L_demos  # noqa: E402
from lightning.pytorch.demos import boring_classes as L_boring  # noqa: E402
from lightning.pytorch.demos import lstm as L_lstm  # noqa: E402
from lightning.pytorch.demos import mnist_datamodule as L_mnist  # noqa: E402
from lightning.pytorch.demos import transformer as L_transformer  # noqa: E402


def _equal_state(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)  # the same layers, made in the same order
    for key in mine:
        torch.testing.assert_close(mine[key], other[key], rtol=0, atol=0, msg=key)


def _lightning_trainer(tmp_path: Path, **options: object) -> object:
    return L.Trainer(
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        logger=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
        default_root_dir=tmp_path / "lightning",
        **options,
    )


def _our_trainer(tmp_path: Path, **options: object) -> Trainer:
    return Trainer(
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        logger=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        default_root_dir=tmp_path / "tracktrain",
        **options,
    )


def _plant_text(folder: Path, words: int = 2000) -> Path:
    """A small made-up text at folder/wikitext-2.txt (short lines, blank ones, a repeated vocabulary)."""
    generator = torch.Generator().manual_seed(3)
    vocabulary = [f"w{i}" for i in range(40)] + ["the", "@-@", "<unk>", "="]
    choice = torch.randint(len(vocabulary), (words,), generator=generator).tolist()
    lines, line = [], []
    for index, pick in enumerate(choice):
        line.append(vocabulary[pick])
        if index % 17 == 16:
            lines.append(" ".join(line))
            line = []
        if index % 150 == 149:
            lines.append("")
    lines.append(" ".join(line))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wikitext-2.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


# ----------------------------------------------------------------------------------------------------- names
def test_the_public_names_are_lightnings():
    """`from lightning.pytorch.demos[.module] import X` ports to tracktrain.demos with the same X."""
    assert sorted(demos.__all__) == sorted(L_demos.__all__)
    for ours, theirs in [
        (boring_classes, L_boring),
        (transformer, L_transformer),
        (lstm, L_lstm),
        (mnist_datamodule, L_mnist),
    ]:
        lightning_names = {
            name
            for name, value in vars(theirs).items()
            if not name.startswith("_")
            and (inspect.isclass(value) or inspect.isfunction(value))
            and getattr(value, "__module__", "") == theirs.__name__
        }
        assert lightning_names <= set(ours.__all__), theirs.__name__
    for name in ("MNISTDataModule", "WikiText2", "BoringModel"):
        cls = getattr(mnist_datamodule if name.startswith("MNIST") else demos, name)
        theirs = getattr(L_mnist if name.startswith("MNIST") else L_demos, name)
        assert list(inspect.signature(cls).parameters) == list(inspect.signature(theirs).parameters), name
        assert [p.default for p in inspect.signature(cls).parameters.values()] == [
            p.default for p in inspect.signature(theirs).parameters.values()
        ], name


# ------------------------------------------------------------------------------------------------ random data
def test_the_random_datasets_draw_lightnings_items():
    for name in ["RandomDataset", "RandomDictDataset", "RandomIterableDataset", "RandomIterableDatasetWithLen"]:
        torch.manual_seed(7)
        ours = list(getattr(boring_classes, name)(5, 6))
        torch.manual_seed(7)
        theirs = list(getattr(L_boring, name)(5, 6))
        assert len(ours) == len(theirs) == 6, name
        for mine, other in zip(ours, theirs):
            if isinstance(other, dict):
                assert mine.keys() == other.keys()
                for key in other:
                    assert torch.equal(mine[key], other[key]), name
            else:
                assert torch.equal(mine, other), name
    assert len(boring_classes.RandomIterableDatasetWithLen(3, 9)) == 9


def _stage_batches(datamodule: object, stage: str) -> list[list[torch.Tensor]]:
    datamodule.setup(stage)  # type: ignore[attr-defined]
    method = {"fit": "train", "validate": "val", "test": "test", "predict": "predict"}[stage] + "_dataloader"
    loaders = getattr(datamodule, method)()
    loaders = loaders if isinstance(loaders, list) else [loaders]
    return [[batch.clone() for batch in loader] for loader in loaders]


@pytest.mark.parametrize("name", ["BoringDataModule", "BoringDataModuleNoLen", "IterableBoringDataModule"])
def test_the_boring_datamodules_split_as_lightnings(name):
    torch.manual_seed(11)
    ours = getattr(boring_classes, name)()
    torch.manual_seed(11)
    theirs = getattr(L_boring, name)()
    for stage in ["fit", "validate", "test", "predict"]:
        torch.manual_seed(12)
        mine = _stage_batches(ours, stage)
        torch.manual_seed(12)
        other = _stage_batches(theirs, stage)
        assert [len(batches) for batches in mine] == [len(batches) for batches in other], (name, stage)
        for mine_loader, other_loader in zip(mine, other):
            assert all(torch.equal(a, b) for a, b in zip(mine_loader, other_loader)), (name, stage)
    if name == "BoringDataModule":  # the four quarters of one dataset, in order
        assert [len(_stage_batches(ours, s)[0]) for s in ["fit", "validate", "test", "predict"]] == [64] * 4
        assert torch.equal(torch.cat(_stage_batches(ours, "test")[0]), ours.random_full.data[128:192])


# ------------------------------------------------------------------------------------------- boring modules
@pytest.mark.parametrize("name", ["BoringModel", "ManualOptimBoringModel", "DemoModel", "Net"])
def test_the_boring_modules_start_from_lightnings_weights(name):
    torch.manual_seed(5)
    ours = getattr(boring_classes, name)()
    torch.manual_seed(5)
    theirs = getattr(L_boring, name)()
    _equal_state(ours, theirs)
    example = torch.randn(2, 1, 28, 28) if name == "Net" else torch.randn(4, 32)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(example), theirs(example), rtol=0, atol=0)


def _fit_both(tmp_path, name, loader_size, batch_size, **options):
    """Fit ours and Lightning's module `name` from the same seed on the same fixed loader; both modules after."""
    torch.manual_seed(0)
    data = boring_classes.RandomDataset(32, loader_size)
    fitted = []
    for module_of, trainer_of in [(boring_classes, _our_trainer), (L_boring, _lightning_trainer)]:
        torch.manual_seed(1)
        module = getattr(module_of, name)()
        trainer = trainer_of(tmp_path, **options)
        train, val = DataLoader(data, batch_size=batch_size), DataLoader(data, batch_size=batch_size)
        if name == "DemoModel":  # no eval step
            trainer.fit(module, train)
        else:
            trainer.fit(module, train, val)
        fitted.append((module, trainer))
    return fitted


def test_boring_model_trains_as_lightnings_with_its_step_lr(tmp_path):
    """3 epochs of 4 steps: SGD and the StepLR (stepped each epoch) give Lightning's weights and rate."""
    (ours, our_trainer), (theirs, their_trainer) = _fit_both(
        tmp_path, "BoringModel", 16, 2, max_epochs=3, limit_train_batches=4, limit_val_batches=2
    )
    assert our_trainer.global_step == their_trainer.global_step == 12
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], msg=key)
    torch.manual_seed(1)
    assert not torch.equal(ours.layer.weight, boring_classes.BoringModel().layer.weight)  # it did train
    our_lr = our_trainer.optimizers[0].param_groups[0]["lr"]
    their_lr = their_trainer.optimizers[0].param_groups[0]["lr"]
    assert our_lr == pytest.approx(their_lr) == pytest.approx(0.1 * 0.1**3)


@pytest.mark.parametrize("name", ["ManualOptimBoringModel", "DemoModel"])
def test_manual_and_demo_models_train_as_lightnings(tmp_path, name):
    (ours, our_trainer), (theirs, their_trainer) = _fit_both(tmp_path, name, 12, 3, max_steps=5, limit_val_batches=1)
    assert our_trainer.global_step == their_trainer.global_step == 5
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], msg=key)
    if name == "ManualOptimBoringModel":  # under manual optimization the StepLR is not stepped, as under Lightning
        assert our_trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1)


def test_boring_model_fits_tests_and_predicts_on_its_own_loaders(tmp_path):
    torch.manual_seed(0)
    model = boring_classes.BoringModel()
    trainer = _our_trainer(tmp_path, max_steps=3, limit_val_batches=2, limit_test_batches=2, limit_predict_batches=2)
    trainer.fit(model)
    assert trainer.global_step == 3
    trainer.test(model)
    predictions = trainer.predict(model)
    assert len(predictions) == 2 and predictions[0].shape == (1, 2)
    trainer = _our_trainer(tmp_path, max_steps=2, limit_val_batches=2)
    trainer.fit(boring_classes.BoringModel(), datamodule=boring_classes.BoringDataModule())
    assert trainer.global_step == 2


# -------------------------------------------------------------------------------------------------- WikiText2
def test_wikitext2_reads_a_planted_file_as_lightnings(tmp_path, monkeypatch):
    path = _plant_text(tmp_path)

    def no_network(*args, **kwargs):
        raise AssertionError("the file is there: nothing is downloaded")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    for download in (False, True):  # with download=True an existing file is read as it is
        ours = transformer.WikiText2(tmp_path, block_size=35, download=download)
        theirs = L_transformer.WikiText2(tmp_path, block_size=35, download=False)
        assert ours.path == theirs.path == path
        assert torch.equal(ours.data, theirs.data) and ours.data.dtype == torch.int64
        assert ours.dictionary.idx2word == theirs.dictionary.idx2word
        assert ours.dictionary.word2idx == theirs.dictionary.word2idx
        assert ours.vocab_size == theirs.vocab_size == 45  # 44 words and <eos>
        assert len(ours) == len(theirs) > 20
        for index in (0, 1, len(theirs) - 1):
            for mine, other in zip(ours[index], theirs[index]):
                assert torch.equal(mine, other)
    small = transformer.WikiText2(str(tmp_path), block_size=8, download=False)  # a str folder is taken too
    assert len(small) == len(L_transformer.WikiText2(tmp_path, block_size=8, download=False))


def test_wikitext2_downloads_a_missing_file_once(tmp_path, monkeypatch):
    asked = []

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def urlopen(url, timeout):
        asked.append(url)
        return Response(b" hello world \n = Title = \n\n hello again\n")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    dataset = transformer.WikiText2(tmp_path / "fresh", block_size=2)
    assert asked == [
        "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"
    ]
    assert dataset.dictionary.idx2word == ["hello", "world", "<eos>", "=", "Title", "again"]
    assert dataset.data.tolist() == [0, 1, 2, 3, 4, 3, 2, 2, 0, 5, 2]
    assert sorted(os.listdir(tmp_path / "fresh")) == ["wikitext-2.txt"]  # no partial file left
    transformer.WikiText2(tmp_path / "fresh", block_size=2)
    assert len(asked) == 1  # there now: not fetched again

    def offline(url, timeout):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(OSError, match="download=False"):
        transformer.WikiText2(tmp_path / "elsewhere")


# ------------------------------------------------------------------------------------------- the transformer
def test_the_transformer_computes_lightnings_outputs():
    torch.manual_seed(2)
    ours = transformer.Transformer(vocab_size=60, ninp=16, nhead=2, nhid=24, nlayers=2)
    torch.manual_seed(2)
    theirs = L_transformer.Transformer(vocab_size=60, ninp=16, nhead=2, nhid=24, nlayers=2)
    _equal_state(ours, theirs)
    inputs, target = torch.randint(60, (3, 7)), torch.randint(60, (3, 7))
    for train in (True, False):  # dropout on: the same draws from the same seed
        ours.train(train), theirs.train(train)
        torch.manual_seed(9)
        mine = ours(inputs, target)
        torch.manual_seed(9)
        other = theirs(inputs, target)
        assert mine.shape == (21, 60)
        torch.testing.assert_close(mine, other, rtol=0, atol=0)
    torch.testing.assert_close(ours.src_mask, theirs.src_mask, rtol=0, atol=0)
    torch.testing.assert_close(
        ours.generate_square_subsequent_mask(5), theirs.generate_square_subsequent_mask(5), rtol=0, atol=0
    )
    encoding, their_encoding = transformer.PositionalEncoding(6, 0.0, 50), L_transformer.PositionalEncoding(6, 0.0, 50)
    x = torch.randn(2, 9, 6)
    torch.testing.assert_close(encoding(x), their_encoding(x), rtol=0, atol=0)
    torch.testing.assert_close(encoding.pe, their_encoding.pe, rtol=0, atol=0)


def _reseed_each_batch(self, batch, batch_idx):
    """The dropout draws of a step from the same seed under both Trainers: tracktrain's re-seeds torch's generator
    for every batch from its run seed (bit-identical resumes), Lightning's leaves it running on."""
    torch.manual_seed(1000 + self.global_step)


def _fit_language_model(tmp_path, monkeypatch, ours_class, theirs_class, **options):
    """Fit ours and Lightning's module from the same seed on their own loaders over a planted ./data file."""
    _plant_text(tmp_path / "data", words=3000)
    monkeypatch.chdir(tmp_path)
    fitted = []
    for module_class, trainer_of in [(ours_class, _our_trainer), (theirs_class, _lightning_trainer)]:
        reseeded = type(module_class.__name__, (module_class,), {"on_train_batch_start": _reseed_each_batch})
        torch.manual_seed(4)
        module = reseeded(vocab_size=45)
        trainer = trainer_of(tmp_path, **options)
        trainer.fit(module)
        fitted.append((module, trainer))
    return fitted


def test_lightning_transformer_trains_as_lightnings(tmp_path, monkeypatch):
    (ours, _), (theirs, _) = _fit_language_model(
        tmp_path, monkeypatch, transformer.LightningTransformer, L_transformer.LightningTransformer, max_steps=3
    )
    assert ours.trainer.global_step == 3
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], msg=key)


# ------------------------------------------------------------------------------------------------------ LSTM
@pytest.mark.parametrize(("length", "batch_size"), [(100, 20), (101, 7), (5, 5), (3, 4)])
def test_the_sequence_sampler_batches_as_lightnings(length, batch_size):
    data = list(range(length))
    ours, theirs = lstm.SequenceSampler(data, batch_size), L_lstm.SequenceSampler(data, batch_size)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


def test_the_simple_lstm_computes_lightnings_outputs():
    torch.manual_seed(6)
    ours = lstm.SimpleLSTM(vocab_size=50, ninp=12, nhid=10, nlayers=2)
    torch.manual_seed(6)
    theirs = L_lstm.SimpleLSTM(vocab_size=50, ninp=12, nhid=10, nlayers=2)
    _equal_state(ours, theirs)
    inputs = torch.randint(50, (4, 9))
    for hidden in (ours.init_hidden(4), (torch.randn(2, 4, 10), torch.randn(2, 4, 10))):
        torch.manual_seed(8)
        mine, (h, c) = ours(inputs, hidden)
        torch.manual_seed(8)
        other, (their_h, their_c) = theirs(inputs, hidden)
        assert mine.shape == (36, 50)
        for a, b in [(mine, other), (h, their_h), (c, their_c)]:
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(ours.init_hidden(3), theirs.init_hidden(3)):
        assert torch.equal(a, b) and a.shape == (2, 3, 10)


def test_lightning_lstm_trains_as_lightnings_across_epochs(tmp_path, monkeypatch):
    """Truncated BPTT over 2 epochs of 2 batches (the hidden state reset between them), SGD at lr 20."""
    (ours, our_trainer), (theirs, _) = _fit_language_model(
        tmp_path, monkeypatch, lstm.LightningLSTM, L_lstm.LightningLSTM, max_epochs=2, limit_train_batches=2
    )
    assert our_trainer.global_step == 4
    assert ours.hidden is None  # reset at the end of the last epoch
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], msg=key)


# ----------------------------------------------------------------------------------------------------- MNIST
def test_mnist_without_torchvision_says_what_to_install():
    if mnist_datamodule._torchvision_available():
        pytest.skip("torchvision is installed here")
    with pytest.raises(ImportError, match=r'pip install "torch==2\.13\.0" "torchvision==0\.28\.0"') as raised:
        mnist_datamodule.MNIST("./nowhere", train=True, download=False)
    assert "torchvision.datasets.MNIST" in str(raised.value)
    datamodule = mnist_datamodule.MNISTDataModule(data_dir=str(Path("nowhere")))
    assert datamodule.default_transforms is None and datamodule.num_classes == 10 and datamodule.name == "mnist"
    with pytest.raises(ImportError, match="torchvision"):
        datamodule.prepare_data()


_MNIST_SCRIPT = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])  # the torchvision stand-in: synthetic MNIST, nothing downloaded
from tracktrain.demos.mnist_datamodule import MNISTDataModule
from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule as Theirs
ours, theirs = MNISTDataModule(val_split=100, num_workers=0, batch_size=16), Theirs(val_split=100, num_workers=0)
ours.prepare_data(); ours.setup("fit"); theirs.setup("fit")
images, labels = next(iter(ours.val_dataloader()))
normalized = MNISTDataModule(val_split=100, num_workers=0, normalize=True, seed=7)
normalized.setup("fit")  # as under Lightning, `seed` does not change the split
print(json.dumps({
    "lengths": [len(ours.dataset_train), len(ours.dataset_val), len(ours.test_dataloader().dataset)],
    "same_split": list(ours.dataset_train.indices) == list(theirs.dataset_train.indices)
    and list(ours.dataset_val.indices) == list(theirs.dataset_val.indices)
    and list(normalized.dataset_val.indices) == list(theirs.dataset_val.indices),
    "batches": [len(ours.train_dataloader()), len(ours.val_dataloader()), len(ours.test_dataloader())],
    "shape": list(images.shape), "dtype": str(images.dtype), "range": [images.min().item(), images.max().item()],
    "normalized_min": normalized.dataset_val[0][0].min().item(),
}))
"""


def test_mnist_datamodule_splits_synthetic_mnist_as_lightnings(tmp_path):
    environment = {**os.environ, "IGNITE_PORT_SAMPLES": "600", "PYTHONPATH": str(ROOT)}
    stand_ins = str(ROOT / "scripts" / "ignite_port" / "stand_ins")
    done = subprocess.run(
        [sys.executable, "-c", _MNIST_SCRIPT, stand_ins],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["lengths"] == [500, 100, 150]
    assert found["same_split"]
    assert found["batches"] == [500 // 16, 100 // 16, 150 // 16]  # drop_last
    assert found["shape"] == [16, 1, 28, 28] and found["dtype"] == "torch.float32"
    assert 0.0 <= found["range"][0] <= found["range"][1] <= 1.0  # ToTensor
    assert found["normalized_min"] < 0.0  # Normalize(0.5, 0.5)
