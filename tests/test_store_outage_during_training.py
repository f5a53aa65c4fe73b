"""An object store that stops answering in the middle of training: training goes on, checkpoints wait on local disk
and reach the store, in order and committed, when it answers again; a run that ends while it is down leaves them
to the next run, which delivers them before it resumes. The store is moto's S3 server behind a real TCP proxy that
a test takes down (its port refuses connections) and brings back."""

from __future__ import annotations

import os
import select
import socket
import threading
import warnings
from collections.abc import Iterator

import pytest

from tests.trainer._tasks import Classifier, make_loader
from tracktrain import Callback, Trainer, storage
from tracktrain.checkpoint.discovery import committed_checkpoints

pytest.importorskip("s3fs")


class SwitchableProxy:
    """Forwards 127.0.0.1:<port> to the S3 server while up; while down nothing listens on the port."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit("//", 1)[1].split(":")
        self.upstream = (host, int(port))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: down
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with client, server:
            while self._listener is not None:
                readable, _, _ = select.select([client, server], [], [], 0.2)
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    (server if source is client else client).sendall(data)
            # down: connections in flight are cut too


@pytest.fixture
def proxied_bucket(
    s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, SwitchableProxy]]:
    from s3fs import S3FileSystem

    proxy = SwitchableProxy(s3_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_READ_TIMEOUT", "2")
    monkeypatch.setenv("TRACKTRAIN_STORAGE_ATTEMPTS", "2")
    S3FileSystem.clear_instance_cache()
    try:
        yield s3_bucket, proxy
    finally:
        proxy.down()
        S3FileSystem.clear_instance_cache()


class Outage(Callback):
    """The store goes down when epoch `down_at` starts and comes back when epoch `up_at` starts (None: never)."""

    def __init__(self, proxy: SwitchableProxy, down_at: int, up_at: int | None) -> None:
        self.proxy, self.down_at, self.up_at = proxy, down_at, up_at

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == self.down_at:
            self.proxy.down()
        if trainer.current_epoch == self.up_at:
            self.proxy.up()


def fit(root: str, epochs: int, *callbacks: Callback, resume=None) -> Trainer:
    trainer = Trainer(
        max_epochs=epochs,
        enable_progress_bar=False,
        default_root_dir=root,
        loggers=False,
        resume=resume,
        callbacks=list(callbacks),
    )
    trainer.fit(Classifier(), make_loader(), make_loader(n=16, seed=1))
    return trainer


def remote_checkpoints(root: str) -> list[tuple[str, int]]:
    found, problems = committed_checkpoints(storage.join(root, "checkpoints"))
    assert problems == []
    return [(checkpoint.data_filename, checkpoint.manifest["summary"]["global_step"]) for checkpoint in found]


def spool_files(tmp_path) -> list[str]:
    spool = tmp_path / ".tracktrain" / ".checkpoint-spool"
    return sorted(os.listdir(next(spool.iterdir()))) if spool.exists() else []


def test_training_goes_on_through_an_outage_and_the_checkpoints_reach_the_store_after(
    proxied_bucket, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the spool of a remote root lives under ./.tracktrain
    bucket, proxy = proxied_bucket
    root = f"{bucket}/run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(root, 6, Outage(proxy, down_at=2, up_at=4))
    assert trainer.global_step == 48  # all 6 epochs of 8 steps trained, through the outage
    kept = [str(w.message) for w in caught if "Could not write checkpoint" in str(w.message)]
    assert len(kept) == 1 and f"to {root}/checkpoints" in kept[0] and "Training goes on" in kept[0], kept
    # retention (save_top_k=1) applied in order once the store was back: only the newest, committed, remains
    assert remote_checkpoints(root) == [("checkpoint_48.pt", 48)]
    assert spool_files(tmp_path) == []

    resumed = fit(root, 7, resume="auto")
    assert resumed.ckpt_path == f"{root}/checkpoints/checkpoint_48.pt" and resumed.global_step == 56


def test_a_run_ending_while_the_store_is_down_leaves_its_checkpoints_to_the_next_run(
    proxied_bucket, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    bucket, proxy = proxied_bucket
    root = f"{bucket}/run"
    with pytest.warns(UserWarning, match="The run ends with checkpoints not yet written to"):
        trainer = fit(root, 3, Outage(proxy, down_at=1, up_at=None))
    assert trainer.global_step == 24
    assert [name for name in spool_files(tmp_path) if name.endswith(".data")]  # the newest waits on local disk

    proxy.up()
    # at most what reached the store before the outage (the first save may still have been on its way)
    assert remote_checkpoints(root) in ([], [("checkpoint_8.pt", 8)])
    resumed = fit(root, 4, resume="auto")
    assert resumed.ckpt_path == f"{root}/checkpoints/checkpoint_24.pt"  # delivered first, then resumed from
    assert resumed.global_step == 32
    assert remote_checkpoints(root) == [("checkpoint_32.pt", 32)]
    assert spool_files(tmp_path) == []
