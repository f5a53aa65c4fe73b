"""Sharded checkpoints of strategy="fsdp" (the default: `FSDPStrategy(state_dict_type="sharded")`), with real gloo
processes: every rank writes its shards with torch.distributed.checkpoint into `<name>.dcp/`, the manifest written
last lists every rank's files; the checkpoint resumes bit for bit on 2 ranks, and loads with the identical full state
on 1 process and on 4 ranks (resharding); `tracktrain convert` makes it one full file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
from torch.utils.data import DataLoader

from tracktrain import Callback
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints
from tracktrain.checkpoint.state import read_checkpoint
from tracktrain.distributed.collectives import spawn

from ._ddp import CrashAtStep
from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import make_loader
from .test_fsdp import BlockNet, _full_params, _trainer

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]


def _fit(
    out: str,
    name: str,
    max_steps: int,
    ckpt: str | None = None,
    crash_at: int | None = None,
    dirpath: str | None = None,
    save_top_k: int | None = None,
    extra: list | None = None,
    **kwargs,
) -> None:
    dirpath = dirpath or os.path.join(out, "ckpt")
    callbacks = [ModelCheckpoint(dirpath=dirpath, every_n_train_steps=3, save_top_k=save_top_k, **kwargs)]
    callbacks += extra or []
    if crash_at is not None:
        callbacks.append(CrashAtStep(crash_at))
    module = BlockNet()
    trainer = _trainer(out, max_epochs=None, max_steps=max_steps, seed=5, callbacks=callbacks)
    try:
        trainer.fit(module, DataLoader(make_loader().dataset, batch_size=4, shuffle=True), ckpt_path=ckpt)
    except RuntimeError as error:
        if "killed" not in str(error):
            raise
        return  # the "kill": every rank stops at the same step
    optimizer = trainer.optimizers[0]
    full = StateDictOptions(full_state_dict=True)
    moments = get_optimizer_state_dict(module, optimizer, options=full)["state"]
    _save(out, name, {"params": _full_params(module), "moments": _flat(moments), "step": trainer.global_step})


def _flat(moments: dict) -> dict:
    return {
        f"{param}.{key}": value.flatten().tolist() for param, state in moments.items() for key, value in state.items()
    }


def _checkpoint_as_read(path) -> dict:
    """The full state of a sharded checkpoint read by one process (the reference every layout must equal)."""
    states = read_checkpoint(path)
    names = [name for group in states["optimizers"][0]["param_groups"] for name in group["params"]]
    assert names == list(range(len(names)))  # keyed by index, as Optimizer.state_dict() keys it
    return states


def _fit_saving_last(out: str) -> None:
    _fit(out, "trained", 6, save_last=True)


def test_each_rank_writes_its_shards_and_one_process_loads_the_full_state(tmp_path):
    # save_last: two checkpoints of each step from one snapshot of the shards (AsyncSaver.one_snapshot)
    spawn(_fit_saving_last, 2, args=(str(tmp_path),))
    directory = tmp_path / "ckpt"
    assert sorted(name for name in os.listdir(directory) if not name.startswith(".")) == [
        "checkpoint_3.dcp",
        "checkpoint_3.dcp.manifest.json",
        "checkpoint_6.dcp",
        "checkpoint_6.dcp.manifest.json",
        "last_checkpoint_6.dcp",
        "last_checkpoint_6.dcp.manifest.json",
    ]
    manifest = json.loads((directory / "checkpoint_6.dcp.manifest.json").read_text())
    # every rank's shards, DCP's metadata: listed (written last, by rank 0, after every rank finished)
    assert sorted(manifest["files"]) == [
        "checkpoint_6.dcp/.metadata",
        "checkpoint_6.dcp/__0_0.distcp",
        "checkpoint_6.dcp/__1_0.distcp",
    ]
    assert manifest["summary"]["global_step"] == 6
    newest = committed_checkpoints(directory)[0][0]
    assert newest.data_filename in ("checkpoint_6.dcp", "last_checkpoint_6.dcp")  # the same step

    # one process, no process group: the whole state, equal to what the ranks held at the end
    states = _checkpoint_as_read(newest.url)
    trained = _load(tmp_path, "trained")[0]
    for name, tensor in states["model"].items():
        assert tensor.flatten().tolist() == trained["params"][name], name
    module = BlockNet()
    module.load_state_dict(states["model"])  # a plain module, without a Trainer
    optimizer = module.configure_optimizers()
    optimizer.load_state_dict(states["optimizers"][0])
    assert states["trainer"]["global_step"] == 6

    # a shard altered after the commit is refused, naming it
    shard = directory / newest.data_filename / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"__1_0.distcp does not match the SHA-256"):
        read_checkpoint(newest.url)


def _load_only(out: str, ckpt: str, strategy: str) -> None:
    """Resume a finished run (max_steps reached): the checkpoint is loaded, nothing is trained."""
    module = BlockNet()
    trainer = _trainer(out, max_epochs=None, max_steps=9, seed=5, strategy=strategy)
    trainer.fit(module, DataLoader(make_loader().dataset, batch_size=4, shuffle=True), ckpt_path=ckpt)
    full = StateDictOptions(full_state_dict=True)
    optimizer = trainer.optimizers[0]
    if strategy == "fsdp":
        params, moments = _full_params(module), get_optimizer_state_dict(module, optimizer, options=full)["state"]
    else:
        params = {name: tensor.flatten().tolist() for name, tensor in module.state_dict().items()}
        names = [name for name, _ in module.named_parameters()]
        moments = {names[index]: state for index, state in optimizer.state_dict()["state"].items()}
    record = {"params": params, "moments": _flat(moments), "step": trainer.global_step}
    if strategy == "fsdp":
        _save(out, "loaded", record)
    else:
        with open(os.path.join(out, "loaded_rank0.json"), "w") as file:
            json.dump(record, file)


@pytest.mark.slow  # about 60 s of ranks; CI runs the slow tests
def test_a_sharded_checkpoint_resumes_exactly_and_reshards_to_one_and_four_ranks(tmp_path):
    spawn(_fit, 2, args=(str(tmp_path / "full"), "trained", 15))
    spawn(_fit, 2, args=(str(tmp_path / "cut"), "trained", 15, None, 10))
    checkpoint = str(tmp_path / "cut" / "ckpt" / "checkpoint_9.dcp")
    spawn(_fit, 2, args=(str(tmp_path / "cut"), "trained", 15, checkpoint))
    full, resumed = _load(tmp_path / "full", "trained"), _load(tmp_path / "cut", "trained")
    assert resumed[0] == resumed[1] == full[0]  # bit for bit

    # the same checkpoint on 1 process and on 4 ranks: the identical full state (model and Adam's moments)
    states = _checkpoint_as_read(checkpoint)
    names = [name for name, _ in BlockNet().named_parameters()]
    expected_moments = _flat({names[index]: state for index, state in states["optimizers"][0]["state"].items()})
    expected_params = {name: tensor.flatten().tolist() for name, tensor in states["model"].items()}
    os.makedirs(tmp_path / "one")
    os.makedirs(tmp_path / "four")
    _load_only(str(tmp_path / "one"), checkpoint, "auto")
    spawn(_load_only, 4, args=(str(tmp_path / "four"), checkpoint, "fsdp"))
    loaded = [*_load(tmp_path / "one", "loaded", 1), *_load(tmp_path / "four", "loaded", 4)]
    for record in loaded:
        assert record["step"] == 9
        assert record["params"] == expected_params
        assert record["moments"] == expected_moments


def _convert(source, target) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tracktrain_integrations.cli", "convert", str(source), str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow  # about 40 s of ranks; CI runs the slow tests
def test_tracktrain_convert_makes_one_full_file_and_back(tmp_path):
    spawn(_fit, 2, args=(str(tmp_path), "trained", 9))
    source = tmp_path / "ckpt" / "checkpoint_9.dcp"
    target = tmp_path / "ckpt" / "checkpoint_9.pt"
    assert "checkpoint_9.pt" in _convert(source, target)
    converted = torch.load(target, weights_only=True)
    expected = _checkpoint_as_read(source)
    assert converted.keys() == expected.keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(converted["model"][name], tensor)
    module = BlockNet()
    module.load_state_dict(converted["model"])
    # committed beside the sharded one: discovery sees both at step 9
    found = {c.data_filename for c in committed_checkpoints(tmp_path / "ckpt")[0] if c.summary["global_step"] == 9}
    assert found == {"checkpoint_9.dcp", "checkpoint_9.pt"}

    # and back: the full file as a sharded checkpoint, which 2 FSDP ranks load (their parts) to the same state
    back = tmp_path / "back" / "checkpoint_9.dcp"
    os.makedirs(back.parent)
    _convert(target, back)
    assert committed_checkpoints(back.parent)[0][0].summary["global_step"] == 9
    spawn(_load_only, 2, args=(str(tmp_path / "back"), str(back), "fsdp"))
    names = [name for name, _ in BlockNet().named_parameters()]
    moments = _flat({names[index]: state for index, state in expected["optimizers"][0]["state"].items()})
    for record in _load(tmp_path / "back", "loaded"):
        assert record["step"] == 9
        assert record["params"] == {name: t.flatten().tolist() for name, t in expected["model"].items()}
        assert record["moments"] == moments


def _fit_killed_while_committing(out: str, step: int) -> None:
    """Rank 0 is SIGKILLed in the background save of `checkpoint_<step>.dcp`, after every rank wrote its shards and
    before the manifest: the worst moment (all of the data there, the commit not). The kill is a real signal; the
    hook only places it."""
    import signal

    from tracktrain.checkpoint.sharded_saver import ShardedSaver

    commit = ShardedSaver._commit

    def killed_at_commit(self, filename, *args, **kwargs):
        if filename == f"checkpoint_{step}.dcp" and torch.distributed.get_rank() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return commit(self, filename, *args, **kwargs)

    ShardedSaver._commit = killed_at_commit
    _fit(out, "trained", 15, async_save=True)


def _resume_auto(out: str) -> None:
    _fit(out, "trained", 15, ckpt="last", async_save=True)


@pytest.mark.slow  # about 40 s of ranks; CI runs the slow tests
def test_sigkill_during_an_async_sharded_save_resumes_from_the_last_committed_one_exactly(tmp_path):
    os.environ.setdefault("TRACKTRAIN_DIST_TIMEOUT", "20")
    spawn(_fit, 2, args=(str(tmp_path / "full"), "trained", 15))
    with pytest.raises(Exception, match="SIGKILL|signal|exit"):
        spawn(_fit_killed_while_committing, 2, args=(str(tmp_path / "cut"), 9))
    directory = tmp_path / "cut" / "ckpt"
    names = sorted(os.listdir(directory))
    assert "checkpoint_9.dcp" in names and "checkpoint_9.dcp.manifest.json" not in names  # written, not committed
    assert {"__0_0.distcp", "__1_0.distcp"} <= set(os.listdir(directory / "checkpoint_9.dcp"))
    assert [checkpoint.data_filename for checkpoint in committed_checkpoints(directory)[0]][0] == "checkpoint_6.dcp"

    spawn(_resume_auto, 2, args=(str(tmp_path / "cut"),))
    full, resumed = _load(tmp_path / "full", "trained"), _load(tmp_path / "cut", "trained")
    assert resumed[0] == resumed[1] == full[0]  # bit for bit, from checkpoint_6
    names = sorted(os.listdir(directory))
    assert "checkpoint_9.dcp.manifest.json" in names  # saved again by the resumed run, committed this time
    assert not [name for name in names if name.endswith(".dcp") and f"{name}.manifest.json" not in names]


@pytest.mark.slow  # 20 s of ranks; the default run has S3 in its other checkpoint tests; CI runs the slow tests
def test_sharded_checkpoints_on_s3_are_committed_retained_and_read_back(tmp_path, s3_bucket):
    url = f"{s3_bucket}/runs/ckpt"
    spawn(_fit, 2, args=(str(tmp_path), "trained", 9, None, None, url, 2))
    found = committed_checkpoints(url)[0]
    # save_top_k=2 by step: checkpoint_3's directory was removed whole by retention, manifest first
    assert [checkpoint.data_filename for checkpoint in found] == ["checkpoint_9.dcp", "checkpoint_6.dcp"]
    assert sorted(found[0].manifest["files"]) == [
        "checkpoint_9.dcp/.metadata",
        "checkpoint_9.dcp/__0_0.distcp",
        "checkpoint_9.dcp/__1_0.distcp",
    ]
    from tracktrain import storage

    assert "checkpoint_3.dcp" not in storage.subdirectories(url)
    states = _checkpoint_as_read(found[0].url)
    trained = _load(tmp_path, "trained")[0]
    for name, tensor in states["model"].items():
        assert tensor.flatten().tolist() == trained["params"][name], name


def _fit_with_a_full_disk_on_rank_1(out: str) -> None:
    """Rank 1 cannot write more than 10 kB per file (RLIMIT_FSIZE: a real EFBIG, as a full disk gives ENOSPC)."""
    import resource
    import signal

    from tracktrain.checkpoint.savers import CheckpointWriteError

    if os.environ["RANK"] == "1":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))
    try:
        _fit(out, "trained", 6, async_save=False)
    except CheckpointWriteError as error:
        _save(out, "error", str(error))


def test_a_rank_that_cannot_write_its_shards_fails_the_save_on_every_rank_and_leaves_nothing(tmp_path):
    spawn(_fit_with_a_full_disk_on_rank_1, 2, args=(str(tmp_path),))
    for message in _load(tmp_path, "error"):  # every rank raised, naming the checkpoint and the cause
        assert "Could not write checkpoint checkpoint_3.dcp" in message
        assert "rank 1" in message and "File too large" in message
    assert [name for name in os.listdir(tmp_path / "ckpt") if not name.startswith(".")] == []  # complete or absent


def _fit_with_rank_1_failing_to_read_back_its_shards(out: str) -> None:
    """Rank 1's read-back of its own shard files fails (an I/O error) after DCP's save returned on every rank: DCP
    saw nothing wrong, so only the ranks' reports can tell rank 0 not to commit."""
    from tracktrain import storage
    from tracktrain.checkpoint.savers import CheckpointWriteError

    if os.environ["RANK"] == "1":
        read_bytes = storage.read_bytes

        def failing(url):
            if os.path.basename(str(url)).startswith("__1_"):
                raise OSError(5, "Input/output error", str(url))
            return read_bytes(url)

        storage.read_bytes = failing
    try:
        _fit(out, "trained", 6, async_save=False)
    except CheckpointWriteError as error:
        _save(out, "error", str(error))


def test_a_rank_failing_after_the_write_returned_keeps_rank_0_from_committing_and_fails_every_rank(tmp_path):
    spawn(_fit_with_rank_1_failing_to_read_back_its_shards, 2, args=(str(tmp_path),))
    messages = _load(tmp_path, "error")
    assert len(messages) == 2  # both ranks raised
    for message in messages:
        assert "Could not write checkpoint checkpoint_3.dcp" in message
        assert "rank 1" in message and "Input/output error" in message
    assert [name for name in os.listdir(tmp_path / "ckpt") if not name.startswith(".")] == []  # no manifest, no shards


class _OutageByFile(Callback):
    """At the start of epoch `down_at` (and `up_at`), rank 0 asks the test, through a file, to take the store down
    (bring it back) and waits until it did; every rank then goes on together."""

    def __init__(self, out: str, down_at: int, up_at: int) -> None:
        self.out, self.down_at, self.up_at = out, down_at, up_at

    def on_train_epoch_start(self, trainer, module):
        for epoch, state in ((self.down_at, "down"), (self.up_at, "up")):
            if trainer.current_epoch == epoch:
                for callback in trainer.callbacks:  # the background saves of the epoch before end first
                    if isinstance(callback, ModelCheckpoint):
                        callback.wait()
                if trainer.strategy.global_rank == 0:
                    Path(self.out, f"{state}.request").touch()
                    while not Path(self.out, f"{state}.done").exists():
                        time.sleep(0.02)
                trainer.strategy.barrier()


def _fit_through_an_outage(out: str, url: str, async_save: bool) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(out, "trained", 24, None, None, url, None, async_save=async_save, extra=[_OutageByFile(out, 1, 2)])
    _save(out, "warnings", [str(warning.message) for warning in caught if "was not written" in str(warning.message)])


@pytest.mark.slow  # about 35 s of ranks; CI runs the slow tests
@pytest.mark.parametrize("async_save", [True, False])
def test_a_store_that_stops_answering_skips_sharded_checkpoints_and_training_goes_on(
    tmp_path, s3_bucket, s3_endpoint, async_save
):
    from s3fs import S3FileSystem

    from tests.test_store_outage_during_training import SwitchableProxy

    proxy = SwitchableProxy(s3_endpoint)
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}",  # the ranks reach the bucket through the proxy
        TRACKTRAIN_STORAGE_CONNECT_TIMEOUT="1",
        TRACKTRAIN_STORAGE_READ_TIMEOUT="2",
        TRACKTRAIN_STORAGE_ATTEMPTS="2",
    )
    S3FileSystem.clear_instance_cache()
    stop = threading.Event()

    def switch() -> None:  # the test's side of _OutageByFile
        for state, action in (("down", proxy.down), ("up", proxy.up)):
            while not (tmp_path / f"{state}.request").exists():
                if stop.wait(0.02):
                    return
            action()
            (tmp_path / f"{state}.done").touch()

    switcher = threading.Thread(target=switch, daemon=True)
    switcher.start()
    url = f"{s3_bucket}/runs/ckpt"
    try:
        spawn(_fit_through_an_outage, 2, args=(str(tmp_path), url, async_save))
    finally:
        stop.set()
        proxy.down()
        for variable in ("TRACKTRAIN_STORAGE_CONNECT_TIMEOUT", "TRACKTRAIN_STORAGE_READ_TIMEOUT"):
            os.environ.pop(variable)
        os.environ.pop("TRACKTRAIN_STORAGE_ATTEMPTS")
        os.environ["AWS_ENDPOINT_URL"] = s3_endpoint
        S3FileSystem.clear_instance_cache()
    # training went on to its end on both ranks; the checkpoints of epoch 1 (steps 9, 12, 15) were skipped, said
    # so on every rank, and nothing of them is left; those after the store came back are committed
    assert [record["step"] for record in _load(tmp_path, "trained")] == [24, 24]
    for skipped in _load(tmp_path, "warnings"):
        assert [message.split()[1] for message in skipped] == [
            "checkpoint_9.dcp",
            "checkpoint_12.dcp",
            "checkpoint_15.dcp",
        ]
    found = committed_checkpoints(url)[0]
    assert sorted(checkpoint.summary["global_step"] for checkpoint in found) == [3, 6, 18, 21, 24]
    from tracktrain import storage

    assert storage.subdirectories(url) == sorted(f"checkpoint_{step}.dcp" for step in (3, 6, 18, 21, 24))


class _PlainSgd(BlockNet):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)  # no momentum: an optimizer state without tensors


def _fit_sgd(out: str, name: str, ckpt: str | None) -> None:
    module = _PlainSgd()
    callbacks = [ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=3, save_top_k=None)]
    trainer = _trainer(out, max_epochs=None, max_steps=9, seed=5, callbacks=callbacks)
    trainer.fit(module, DataLoader(make_loader().dataset, batch_size=4, shuffle=True), ckpt_path=ckpt)
    _save(out, name, _full_params(module))


@pytest.mark.slow  # 20 s of ranks; CI runs the slow tests
def test_an_optimizer_without_tensor_state_resumes_from_a_sharded_checkpoint(tmp_path):
    spawn(_fit_sgd, 2, args=(str(tmp_path), "full", None))
    spawn(_fit_sgd, 2, args=(str(tmp_path / "again"), "resumed", str(tmp_path / "ckpt" / "checkpoint_6.dcp")))
    assert _load(tmp_path / "again", "resumed") == _load(tmp_path, "full")
