"""The processes a test starts (torchrun and its ranks, tracktrain.distributed.spawn's ranks, any subprocess): run
with a deadline, their pipes always drained, and, when one hangs, every one of them stopped with its Python stack
printed first, so that a hang fails the test in seconds with the place each rank waited, and leaves nothing behind.

Processes are found through /proc (Linux): by parentage, and by a marker variable each one inherits in its
environment (a rank whose launcher died is re-parented out of the tree; the marker still names it). Without /proc
(another system) nothing is found and nothing is stopped: the tests still run.

- `Command(args)`: a subprocess in a session of its own, its stdout and stderr read by threads as they come (a
  chatty child never blocks on a full pipe), `wait(timeout)` / `wait_for(predicate, timeout)` with a deadline
  that, when it expires, prints every process's stack and kills the whole tree; `run(args, timeout)` starts one
  and waits for it.
- `Watch()`: what tests/conftest.py keeps for each test: the processes that existed before it (session servers are
  not the test's), the marker its processes carry, and `stop()`, which ends the ones left.
- `stop(find, collect)`: freeze every process `find` names (and their descendants), have each Python process dump
  its threads' stacks (SIGABRT: PYTHONFAULTHANDLER=1 makes the interpreter print them before it dies), kill what
  is left, and return what they printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows, where nothing here finds a process (no /proc) either
    resource = None

# the marker every process started during a test carries (tests/conftest.py sets it in os.environ), and the one
# every process of one Command carries
TEST_MARKER = "TRACKTRAIN_TEST_ID"
COMMAND_MARKER = "TRACKTRAIN_TEST_COMMAND"

# multiprocessing's helpers, started by the first test that needs one and shared by the rest of the session
# Processes that outlive the test that started them by design and serve the rest of the session: multiprocessing's
# helpers; tracktrain's logger delivery child, kept warm a minute for this process's next logger (and ended with
# it); W&B's service, which the wandb library starts once per process and reuses for every run.
_SHARED_HELPERS = (
    b"multiprocessing.resource_tracker",
    b"multiprocessing.forkserver",
    b"tracktrain.loggers.sender_child",
    b"wandb-core",
    b"wandb-symon",
)

_PROC = Path("/proc")
_DUMP_WAIT = 3.0  # seconds a process gets to print its stack and die before it is killed


# ------------------------------------------------------------------------------------------------ the process table
def _read(path: str, limit: int = 1 << 16) -> bytes:
    """A /proc file's bytes (os.open and os.read: a scan of every process runs before and after each test)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(descriptor, limit):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state letter)} of every process on the machine; empty without /proc."""
    table = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                table[int(name)] = stat
    return table


def _stat(pid: int) -> tuple[int, str] | None:
    try:
        text = _read(f"{_PROC}/{pid}/stat")
    except OSError:
        return None
    # "pid (command) S ppid ...": the command may hold spaces and parentheses, the last ")" ends it
    fields = text[text.rindex(b")") + 2 :].split(b" ", 2)
    return int(fields[1]), fields[0].decode()


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (dead, waiting for its parent to read its status) does not."""
    stat = _stat(pid)
    return stat is not None and stat[1] not in "ZX"


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """The processes below `root` (children, their children, ...), not `root` itself."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, frontier = set(), [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def environment(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (a forked child: its parent's); empty when it cannot be read."""
    try:
        data = _read(f"{_PROC}/{pid}/environ")
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def carrying(variable: str, value: str) -> set[int]:
    """The running processes whose environment holds `variable=value` (this process excepted)."""
    needle = f"{variable}={value}".encode()
    found, pids = set(), []
    with contextlib.suppress(OSError):
        pids = [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    for pid in pids:
        if pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in _read(f"{_PROC}/{pid}/environ").split(b"\0"):
                found.add(pid)
    return found


def _command_line(pid: int) -> bytes:
    try:
        return _read(f"{_PROC}/{pid}/cmdline")
    except OSError:
        return b""


def describe(pid: int) -> str:
    """`pid 123 (RANK 1): python -u script.py ROOT`, for a report."""
    line = _command_line(pid).replace(b"\0", b" ").decode(errors="replace").strip()
    rank = environment(pid).get("RANK")
    return f"pid {pid}{f' (RANK {rank})' if rank is not None else ''}: {line[:300] or '?'}"


def shared_helper(pid: int) -> bool:
    """Whether `pid` is one of the helpers in `_SHARED_HELPERS`, which outlive the test that started them by
    design and serve the rest of the session. A process forked from a helper is not one: the ranks that
    multiprocessing's forkserver forks (tracktrain.distributed.spawn's, under TRACKTRAIN_START_METHOD=forkserver)
    show the server's command line, and are the test's."""
    line = _command_line(pid)
    helper = next((helper for helper in _SHARED_HELPERS if helper in line), None)
    if helper is None:
        return False
    stat = _stat(pid)
    return stat is None or helper not in _command_line(stat[0])


# ---------------------------------------------------------------------------------------------- stopping processes
def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _dumps_its_stack(pid: int) -> bool:
    """Whether SIGABRT makes `pid` print its Python stack: a Python with the fault handler on."""
    try:
        executable = os.readlink(_PROC / str(pid) / "exe")
    except OSError:
        return False
    if "python" not in Path(executable).name:
        return False
    return bool(environment(pid).get("PYTHONFAULTHANDLER")) or b"faulthandler" in _command_line(pid)


def _wait_until_dead(pids: Iterable[int], timeout: float) -> set[int]:
    """Those of `pids` still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    running = {pid for pid in pids if alive(pid)}
    while running and time.monotonic() < deadline:
        time.sleep(0.01)
        running = {pid for pid in running if alive(pid)}
    return running


def _order(pids: set[int], table: dict[int, tuple[int, str]]) -> list[int]:
    """Ranks first, by rank; then the rest, deepest first (workers before the launcher that started them)."""

    def depth(pid: int) -> int:
        steps = 0
        while pid in table and steps < 64:
            pid, steps = table[pid][0], steps + 1
        return steps

    def key(pid: int) -> tuple:
        rank = environment(pid).get("RANK", "")
        parent = table.get(pid, (0, ""))[0]
        is_rank = rank.isdigit() and environment(parent).get("RANK") != rank  # not a data-loader worker of a rank
        return (0, int(rank), 0, pid) if is_rank else (1, 0, -depth(pid), pid)

    return sorted(pids, key=key)


def stop(find: Callable[[], set[int]], collect: Callable[[], str] | None = None, dump: bool = True) -> str:
    """Stop every process `find()` returns, with their descendants, and return a report of what was stopped.

    All of them are frozen first (SIGSTOP: no launcher restarts a rank, no rank reacts to another's death, no new
    process appears unseen); then, with `dump`, each Python process in turn gets SIGABRT and SIGCONT, prints every
    thread's stack (PYTHONFAULTHANDLER) and dies; `collect()` returns what was printed since its last call (read
    from wherever their stderr goes), and goes into the report under the process's name. Whatever still runs
    then gets SIGKILL, until `find()` and their descendants name nothing that runs."""
    frozen: set[int] = set()
    pending = {pid for pid in find() if pid != os.getpid()}
    table = process_table()
    while pending:  # freeze, and look again for children started meanwhile
        for pid in pending:
            _signal(pid, signal.SIGSTOP)
        frozen |= pending
        table = process_table()
        pending = set().union(*(descendants(pid, table) for pid in frozen)) - frozen - {os.getpid()}
        pending = {pid for pid in pending if pid in table and table[pid][1] not in "ZX"}
    frozen = {pid for pid in frozen if alive(pid)}
    if not frozen:
        return ""
    parts = []
    if collect is not None:
        collect()  # what came before is not theirs to report
    for pid in _order(frozen, table):
        name = describe(pid)
        if dump and _dumps_its_stack(pid):
            with contextlib.suppress(OSError, AttributeError):  # no core file for a dump we asked for
                resource.prlimit(pid, resource.RLIMIT_CORE, (0, resource.prlimit(pid, resource.RLIMIT_CORE)[1]))
            _signal(pid, signal.SIGABRT)
            _signal(pid, signal.SIGCONT)
            stuck = _wait_until_dead([pid], _DUMP_WAIT)
            if stuck:
                name += f" (no stack within {_DUMP_WAIT:g} s: killed)"
            if collect is None:
                parts.append(f"--- {name} (its stack went to its stderr)")
            else:
                parts.append(f"--- {name}\n{collect().strip() or '(its stack went to a stream not read here)'}")
        else:
            parts.append(f"--- {name} (killed)")
        _signal(pid, signal.SIGKILL)
    for _ in range(20):  # and anything found since: orphans, children started between two looks
        table = process_table()
        left = {
            pid
            for pid in find() | frozen | set().union(*(descendants(pid, table) for pid in frozen))
            if pid != os.getpid() and pid in table and table[pid][1] not in "ZX"
        }
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        frozen |= left
        _wait_until_dead(left, 0.5)
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------------- a command
_STARTED: list[Command] = []  # every Command of the session, in order (tests/conftest.py reports a test's own)


class ProcessHang(AssertionError):
    """A command outlived its deadline; the message holds every process's stack and the output's ends."""


class Command:
    """`args` started in a session of its own, with stdout and stderr read as they come by two threads (or one,
    stderr into stdout with `merge_stderr`). Every process it starts carries COMMAND_MARKER, so that even those
    whose parent died are found. TRACKTRAIN_DIST_TIMEOUT and PYTHONFAULTHANDLER are set unless `env` sets them.

    Use it as a context manager (or call `wait`): whatever of it still runs at the end of the block is stopped,
    with stacks when the block raised."""

    def __init__(
        self,
        args: list[str],
        *,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        merge_stderr: bool = False,
    ) -> None:
        self.args = [str(arg) for arg in args]
        self.marker = uuid.uuid4().hex
        environment_ = dict(os.environ if env is None else env)
        environment_.setdefault("TRACKTRAIN_DIST_TIMEOUT", "60")
        environment_.setdefault("PYTHONFAULTHANDLER", "1")
        environment_[COMMAND_MARKER] = self.marker
        self.process = subprocess.Popen(
            self.args,
            cwd=cwd,
            env=environment_,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.pid = self.process.pid
        self._out: list[str] = []
        self._err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(self.process.stdout, self._out), daemon=True)]
        if not merge_stderr:
            self._readers.append(
                threading.Thread(target=self._read, args=(self.process.stderr, self._err), daemon=True)
            )
        self._open = len(self._readers)
        for reader in self._readers:
            reader.start()
        self._cursor = 0  # the stdout lines wait_for has gone through
        self._reported = 0  # the stderr characters a stack dump report has taken
        _STARTED.append(self)

    def _read(self, stream, into: list[str]) -> None:
        try:
            for line in stream:
                with self._changed:
                    into.append(line)
                    self._changed.notify_all()
        finally:
            stream.close()
            with self._changed:
                self._open -= 1
                self._changed.notify_all()

    # -------------------------------------------------------------------------------------------------- output
    @property
    def stdout(self) -> str:
        with self._changed:
            return "".join(self._out)

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self._err)

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str | None:
        """The next stdout line (stripped) for which `predicate` holds; None when the output ends first. After
        `timeout` seconds without one, every process is stopped with its stack and ProcessHang is raised."""
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                while self._cursor >= len(self._out) and self._open and time.monotonic() < deadline:
                    self._changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                if self._cursor < len(self._out):
                    line = self._out[self._cursor].strip()
                    self._cursor += 1
                elif not self._open:
                    return None
                else:
                    line = None
            if line is None:
                raise self.hang(f"no line of its output matched within {timeout:g} s")
            if predicate(line):
                return line

    @property
    def lines(self) -> list[str]:
        """Every stdout line so far, stripped."""
        with self._changed:
            return [line.strip() for line in self._out]

    # ----------------------------------------------------------------------------------------------- processes
    def members(self) -> set[int]:
        """Its running processes: the launcher, its descendants, and whatever carries its marker."""
        table = process_table()
        found = {self.pid} | descendants(self.pid, table) | carrying(COMMAND_MARKER, self.marker)
        return {pid for pid in found if pid in table and table[pid][1] not in "ZX"}

    def ranks(self) -> dict[int, int]:
        """{RANK: pid} of the ranks a launcher (torchrun) started: the processes with RANK set whose parent has
        none (a rank's data-loader workers inherit its RANK)."""
        table = process_table()
        found = {}
        for pid in self.members():
            rank = environment(pid).get("RANK")
            if rank is not None and environment(table.get(pid, (0, ""))[0]).get("RANK") != rank:
                found[int(rank)] = pid
        return found

    def send_signal(self, signum: int) -> None:
        """`signum` to the launcher alone (as Popen.send_signal)."""
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self, signum: int | None = None) -> None:
        """`signum` (SIGKILL by default) to every process of the command at once (the launcher, its ranks, their
        workers), as a node failure would. torchrun puts its ranks in sessions of their own: a process-group kill
        would miss them."""
        for pid in self.members():
            _signal(pid, signal.SIGKILL if signum is None else signum)

    def wait(self, timeout: float) -> int:
        """Its exit status, once its output is read to the end. After `timeout` seconds, every process is stopped
        with its stack and ProcessHang is raised."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self.hang(f"did not finish within {timeout:g} s") from None
        with self._changed:  # a process it left behind may hold the pipes open: that one is stopped too
            self._changed.wait_for(lambda: not self._open, timeout=30)
        if self._open:
            raise self.hang("ended, but left processes that hold its output open")
        return self.process.returncode

    def hang(self, what: str) -> ProcessHang:
        """Stop every process with its stack; the error to raise, with the stacks and the output's ends."""
        before = (len(self.stdout), len(self.stderr))  # the output's ends shown: those before the stacks
        stacks = self.stop(dump=True)
        return ProcessHang(
            f"{' '.join(self.args)}\n{what}; the stacks of its processes, then the ends of its "
            f"output:\n{stacks or '(none was running)'}\n{self.tails(until=before)}"
        )

    def stop(self, dump: bool = True) -> str:
        """Every process stopped (with `dump`, each Python one printing its stack first); the report."""
        report = stop(self.members, self._new_output if dump else None, dump=dump)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)  # the launcher's exit status read: no zombie left
        with self._changed:
            self._changed.wait_for(lambda: not self._open, timeout=5)
        return report

    def _new_output(self) -> str:
        """What it printed to stderr (or its merged stdout) since the last call, once the pipes are quiet."""
        stream = self._err if len(self._readers) == 2 else self._out
        quiet_since, size = time.monotonic(), -1
        deadline = time.monotonic() + (2.0 if self._open else 0.0)
        while time.monotonic() < deadline:  # the reader threads may still be catching up with the pipe
            with self._changed:
                now = sum(map(len, stream))
            if now != size:
                size, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since > 0.1:
                break
            time.sleep(0.02)
        with self._changed:
            text = "".join(stream)
        new, self._reported = text[self._reported :], len(text)
        return new

    def tails(self, characters: int = 3000, until: tuple[int, int] | None = None) -> str:
        """The last `characters` of stdout and stderr (of what they held at `until`, their lengths then)."""
        out, err = self.stdout, self.stderr
        if until is not None:
            out, err = out[: until[0]], err[: until[1]]
        parts = [f"--- stdout (last {characters} characters)\n{out[-characters:]}"]
        if len(self._readers) == 2:
            parts.append(f"--- stderr (last {characters} characters)\n{err[-characters:]}")
        return "\n".join(parts)

    def __enter__(self) -> Command:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if self.members():
            report = self.stop(dump=error is not None)
            if error is not None and hasattr(error, "add_note"):
                error.add_note(f"{' '.join(self.args)} was still running; stopped:\n{report}\n{self.tails()}")


def run(args: list[str], timeout: float, **options) -> Command:
    """`Command(args, **options)` waited for: `.returncode`, `.stdout`, `.stderr` as subprocess.run gives them.
    Past `timeout` seconds every process is stopped with its stack and ProcessHang is raised."""
    command = Command(args, **options)
    command.wait(timeout)
    return command


def torchrun(*arguments: str, nproc: int = 2) -> list[str]:
    """`python -m torch.distributed.run` for `nproc` local ranks on a free port, then `arguments` (the script and
    its own arguments)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        *map(str, arguments),
    ]


# ------------------------------------------------------------------------------------------------------- one test
class Watch:
    """What tests/conftest.py keeps for one test: the processes that ran before it (session servers, the suite's
    own), the marker its processes carry, and the commands it started."""

    def __init__(self) -> None:
        self.marker = uuid.uuid4().hex
        self.before = descendants(os.getpid()) | {os.getpid()}
        self.first_command = len(_STARTED)
        self._children_usage = _children_usage()

    def leftovers(self) -> set[int]:
        """The test's processes that still run: new below this process, or carrying its marker (re-parented)."""
        table = process_table()
        found = descendants(os.getpid(), table) - self.before
        # a process whose parent died is re-parented out of this tree; it has a marker to be found by, but reading
        # every process's environment takes milliseconds: only done when this process started one (it still runs,
        # or it ended and was waited for: its resource usage then counts in this process's children's)
        if found or _children_usage() != self._children_usage or self.commands():
            found |= carrying(TEST_MARKER, self.marker)
            for command in self.commands():
                found |= carrying(COMMAND_MARKER, command.marker)
        return {
            pid
            for pid in found
            if pid in table and table[pid][1] not in "ZX" and pid != os.getpid() and not shared_helper(pid)
        }

    def commands(self) -> list[Command]:
        return _STARTED[self.first_command :]

    def stop(self, read_captured: Callable[[], str] | None = None, dump: bool = True) -> str:
        """Stop what is left; with `dump`, the report holds each Python process's stack, read from the test's
        captured output (`read_captured`) or from its commands' pipes."""

        def collect() -> str:
            text = read_captured() if read_captured is not None else ""
            return text + "".join(command._new_output() for command in self.commands())

        return stop(self.leftovers, collect if dump else None, dump=dump)


def _children_usage() -> tuple:
    """What the children this process waited for used, summed: it changes with every one that ends."""
    if resource is None:
        return ()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt, usage.ru_nvcsw, usage.ru_nivcsw


@contextlib.contextmanager
def stopped_on_exit(what: str) -> Iterator[None]:
    """Processes started in the block (a module fixture's ranks) that still run when it ends are stopped; when the
    block raised (a timeout, a failed rank), each Python one prints its stack first, into the error's notes."""
    watch = Watch()
    try:
        yield
    except BaseException as error:
        report = stop(watch.leftovers, dump=True)
        if report and hasattr(error, "add_note"):
            error.add_note(f"{what}: processes still running, stopped (their stacks went to stderr):\n{report}")
        raise
    else:
        stop(watch.leftovers, dump=False)
