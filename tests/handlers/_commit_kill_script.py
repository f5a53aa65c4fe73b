"""Kills a checkpoint save at each of its write boundaries: `python _commit_kill_script.py SCENARIOS ROOT REPORT`.

The commit protocol of a checkpoint is a sequence of file-system operations (write the data to a temporary file,
fsync it, rename it into place, fsync the directory; the same for the manifest; then retention's deletions). This
script imports torch and tracktrain once, then forks one child per boundary: each child commits a first checkpoint
(step 1), then saves a second one (step 2) with every operation on its directory traced, and SIGKILLs itself at the
k-th one, or, for the last k, just after the save returned. A first child, never killed, counts the boundaries. The
parent (test_commit_protocol.py) then looks at what each kill left, with the code a resume uses.

Scenarios (what the saving child runs):
    disk       a `Checkpoint` with a `DiskSaver(manifest=True)`, n_saved=1: step 2 has a new name, step 1 is deleted
    async      the same through an `AsyncSaver`, the writer `ModelCheckpoint` builds (its default, async_save=True)
    overwrite  a fixed file name (`filename_pattern="{name}.{ext}"`): step 2 replaces step 1 under the same name
    s3         the `disk` scenario with an `FsspecSaver` on `ROOT` = s3://bucket/prefix (moto); the boundaries are
               the requests that change the bucket (puts and deletes)

SCENARIOS is a comma-separated list; REPORT (a local JSON file) gets, for each, the boundaries in order and how
each child ended. Forking is safe here: this process starts no thread of its own before it forks, and every child
does its own I/O.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tracktrain import storage
from tracktrain.checkpoint.async_saver import AsyncSaver
from tracktrain.engine import Engine
from tracktrain.handlers import Checkpoint, DiskSaver, FsspecSaver

SCENARIOS = ("disk", "async", "overwrite", "s3")
BLOB_NUMEL = 16_384  # 64 KiB of float32: more than a page, so a half-written file is really half


# ------------------------------------------------------------------------------------ what is saved at each step
class Blob:
    """State that differs at every step in every byte that matters: a tensor filled from a generator seeded by
    the step, and the step itself."""

    def __init__(self, step: int = 0) -> None:
        self.step = step
        self.data = torch.rand(BLOB_NUMEL, generator=torch.Generator().manual_seed(1000 + step))

    def state_dict(self) -> dict:
        return {"step": self.step, "data": self.data}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.data = state["step"], state["data"]


def objects_at(step: int) -> dict[str, Any]:
    """The objects a checkpoint of `step` holds; step 0 is what a loader starts from (different from any save)."""
    model = nn.Linear(8, 4)
    generator = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return {"model": model, "blob": Blob(step)}


def summarize(checkpoint: dict) -> dict[str, int]:
    return {"global_step": int(checkpoint["blob"]["step"])}


# ------------------------------------------------------------------------------------------- the boundary tracer
_TEMPORARY = re.compile(r"\.(.+)\.[0-9a-f]{12}\.tmp")


class Boundaries:
    """Traces the operations that change `directory` (a local path), and SIGKILLs this process at the `kill_at`-th
    one (before it happens; a write is also cut in the middle). `labels` lists the boundaries passed, in order."""

    def __init__(self, directory: str, kill_at: int | None = None) -> None:
        self.directory = os.path.realpath(directory)
        self.kill_at = kill_at
        self.armed = False  # installed before the savers are built (s3fs binds its methods then), armed later
        self.labels: list[str] = []
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def point(self, label: str) -> None:
        if not self.armed:
            return
        with self._lock:
            if len(self.labels) == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            self.labels.append(label)

    def name(self, path: Any) -> str | None:
        """The name of `path` in the directory (temporaries as `tmp(<target>)`, the directory as `<dir>`), or None
        for a path elsewhere."""
        if isinstance(path, int):
            return None
        path = os.path.realpath(os.fspath(path))
        if path == self.directory:
            return "<dir>"
        if os.path.dirname(path) != self.directory:
            return None
        name = os.path.basename(path)
        temporary = _TEMPORARY.fullmatch(name)
        return f"tmp({temporary.group(1)})" if temporary else name

    def install(self) -> None:
        real_open, real_fsync, real_replace = builtins.open, os.fsync, os.replace
        real_rename, real_remove, real_unlink = os.rename, os.remove, os.unlink
        tracer = self

        class CutFile:
            """A file opened for writing in the directory: each write is two halves, with a boundary between."""

            def __init__(self, file: Any, name: str) -> None:
                self._file, self._name = file, name

            def write(self, data: Any) -> int:
                view = memoryview(data).cast("B")
                tracer.point(f"write {self._name}")
                half = len(view) // 2
                self._file.write(view[:half])
                self._file.flush()  # to the kernel: what a kill leaves is this half
                tracer.point(f"mid-write {self._name}")
                self._file.write(view[half:])
                return len(view)

            def __enter__(self) -> CutFile:
                return self

            def __exit__(self, *exc: Any) -> None:
                self._file.close()

            def __getattr__(self, attribute: str) -> Any:
                return getattr(self._file, attribute)

        def traced_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            name = tracer.name(file)
            if name is None or not set(mode) & set("wxa+"):
                return real_open(file, mode, *args, **kwargs)
            tracer.point(f"open {name}")
            return CutFile(real_open(file, mode, *args, **kwargs), name)

        def traced_fsync(fd: Any) -> None:
            name = tracer.name(os.readlink(f"/proc/self/fd/{fd}")) if isinstance(fd, int) else None
            if name is not None:
                tracer.point(f"fsync {name}")
            real_fsync(fd)

        def rename_tracer(real: Callable) -> Callable:
            def traced(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
                name = tracer.name(target)
                if name is not None:
                    tracer.point(f"rename {tracer.name(source)} -> {name}")
                real(source, target, *args, **kwargs)

            return traced

        def remove_tracer(real: Callable) -> Callable:
            def traced(path: Any, *args: Any, **kwargs: Any) -> None:
                name = tracer.name(path)
                if name is not None:
                    tracer.point(f"remove {name}")
                real(path, *args, **kwargs)

            return traced

        replacements = [
            (builtins, "open", traced_open),
            (os, "fsync", traced_fsync),
            (os, "replace", rename_tracer(real_replace)),
            (os, "rename", rename_tracer(real_rename)),
            (os, "remove", remove_tracer(real_remove)),
            (os, "unlink", remove_tracer(real_unlink)),
        ]
        for module, attribute, replacement in replacements:
            original = getattr(module, attribute)
            setattr(module, attribute, replacement)
            self._undo.append(
                lambda module=module, attribute=attribute, original=original: setattr(module, attribute, original)
            )

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()


class S3Boundaries(Boundaries):
    """The requests that change an S3 bucket (s3fs puts and deletes) under the prefix `directory` (an s3:// URL)."""

    def __init__(self, directory: str, kill_at: int | None = None) -> None:
        super().__init__(directory, kill_at)
        self.directory = directory  # a URL, not a local path to resolve

    def name(self, path: Any) -> str | None:
        path = os.fspath(path).split("://")[-1].rstrip("/")
        prefix = self.directory.split("://")[-1].rstrip("/")
        if not path.startswith(prefix + "/"):
            return None
        name = path[len(prefix) + 1 :]
        temporary = _TEMPORARY.fullmatch(name)
        return f"tmp({temporary.group(1)})" if temporary else name

    def install(self) -> None:
        from s3fs import S3FileSystem

        tracer = self
        for method, verb in (("_pipe_file", "put"), ("_put_file", "put"), ("_rm_file", "remove")):
            original = S3FileSystem.__dict__[method]

            async def traced(
                fs: Any, path: Any, *args: Any, _original: Any = original, _verb: str = verb, **kwargs: Any
            ) -> Any:
                name = tracer.name(path)
                if name is not None:
                    tracer.point(f"{_verb} {name}")
                return await _original(fs, path, *args, **kwargs)

            setattr(S3FileSystem, method, traced)
            self._undo.append(lambda method=method, original=original: setattr(S3FileSystem, method, original))


# ----------------------------------------------------------------------------------------------- the saving child
def save_twice(scenario: str, directory: str, tracer: Boundaries) -> None:
    """Commit step 1 untraced, then save step 2 with `tracer` armed; the boundary "returned" follows the save
    (and, through an AsyncSaver, its wait)."""
    torch.set_num_threads(1)
    tracer.install()
    objects = objects_at(1)
    if scenario == "s3":
        saver: Any = FsspecSaver(directory, require_empty=False, manifest=True, summarize=summarize)
    else:
        saver = DiskSaver(directory, require_empty=False, manifest=True, summarize=summarize)
    if scenario == "async":
        saver = AsyncSaver(saver)
    steps = [1]
    handler = Checkpoint(
        objects,
        saver,
        n_saved=1,
        global_step_transform=lambda engine, event: steps[0],
        filename_pattern="{name}.{ext}" if scenario == "overwrite" else None,
    )
    engine = Engine(lambda engine, batch: None)
    handler(engine)
    getattr(saver, "wait", lambda: None)()
    steps[0] = 2
    for name, state in objects_at(2).items():  # the objects move on to step 2 in place, as training does
        objects[name].load_state_dict(state.state_dict())
    tracer.armed = True
    handler(engine)
    getattr(saver, "wait", lambda: None)()
    tracer.point("returned")


def run_child(scenario: str, directory: str, kill_at: int | None, labels_file: str | None) -> int:
    """Fork a child that saves into `directory` and is killed at boundary `kill_at`; its wait status."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            tracer = (S3Boundaries if scenario == "s3" else Boundaries)(directory, kill_at)
            save_twice(scenario, directory, tracer)
            tracer.uninstall()
            if labels_file is not None:
                with open(labels_file, "w") as file:
                    json.dump(tracer.labels, file)
            status = 0
        except BaseException:  # noqa: BLE001 - reported by the exit status, with the traceback on stderr
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(status)
    return os.waitpid(pid, 0)[1]


def kill_at_every_boundary(scenario: str, root: str, work: str) -> dict[str, Any]:
    """Count the boundaries of the scenario's save with a child that is not killed, then kill one child at each."""
    labels_file = os.path.join(work, f"{scenario}-labels.json")
    status = run_child(scenario, storage.join(root, f"{scenario}-count"), None, labels_file)
    if status != 0:
        raise SystemExit(f"the counting child of {scenario!r} failed (wait status {status}); its traceback is above")
    with open(labels_file) as file:
        labels = json.load(file)
    outcomes = []
    for k, label in enumerate(labels):
        directory = storage.join(root, f"{scenario}-kill{k:02d}")
        status = run_child(scenario, directory, k, None)
        outcomes.append(
            {
                "k": k,
                "label": label,
                "directory": directory,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            }
        )
    return {"labels": labels, "outcomes": outcomes}


def warm_up(work: str) -> None:
    """Import and initialize in this process what every child would otherwise do again (a fifth of a second each):
    one traced save into a scratch directory. No thread is started (the synchronous saver)."""
    scratch = os.path.join(work, "warm-up")
    tracer = Boundaries(scratch)
    save_twice("disk", scratch, tracer)
    tracer.uninstall()


def main() -> None:
    scenarios, root, report = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"scenarios must be among {SCENARIOS}, got {sorted(unknown)}")
    work = os.path.dirname(os.path.abspath(report))
    if "s3" in scenarios:
        import s3fs  # noqa: F401 - imported once here; it starts no thread before it is used
    else:
        warm_up(work)
    assert threading.active_count() == 1, "fork with a single thread only"
    results = {scenario: kill_at_every_boundary(scenario, root, work) for scenario in scenarios}
    with open(report, "w") as file:
        json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
