"""What a checkpoint directory's lease file holds (`LeaseRecord`), and whether the process it names is gone.

Stale means: on the same machine (same host name, boot and pid namespace) its process is gone; or, on any machine,
its heartbeat is older than its `stale_after` (another machine's pids cannot be checked, and on this one a pid may
have been reused). See `tracktrain.checkpoint.lease` for how a lease is taken, refreshed and released.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FORMAT", "LeaseRecord", "is_finite", "stale_reason", "this_machine"]

FORMAT = "tracktrain-lease/1"


@dataclass(frozen=True)
class LeaseRecord:
    """What a lease file holds."""

    holder: str  # random, one per process
    host: str
    pid: int
    boot_id: str | None  # Linux: this boot of the machine
    pid_namespace: str | None  # Linux: the namespace the pid is in (containers have their own)
    started: float
    heartbeat: float
    stale_after: float

    def to_bytes(self) -> bytes:
        return json.dumps({"format": FORMAT, **asdict(self)}, indent=1, sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> LeaseRecord:
        """The record in `data`; ValueError naming the field that is not as `to_bytes` writes it."""
        try:
            fields = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"not JSON ({error})") from None
        if not isinstance(fields, dict) or fields.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} lease")
        checks = {
            "holder": lambda v: isinstance(v, str) and v != "",
            "host": lambda v: isinstance(v, str),
            "pid": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,  # os.kill(0 or -1) is no pid
            "boot_id": lambda v: v is None or isinstance(v, str),
            "pid_namespace": lambda v: v is None or isinstance(v, str),
            "started": is_finite,
            "heartbeat": is_finite,
            "stale_after": lambda v: is_finite(v) and v > 0,
        }
        for name, check in checks.items():
            if not check(fields.get(name)):
                raise ValueError(f"field {name!r} is {fields.get(name)!r}")
        return cls(**{name: fields[name] for name in checks})

    def describe(self, now: float) -> str:
        return (
            f"pid {self.pid} on host {self.host} (started {_utc(self.started)}, last heartbeat "
            f"{now - self.heartbeat:.0f} s ago)"
        )


def stale_reason(record: LeaseRecord, now: float) -> str | None:
    """Why the lease of another holder is stale, or None when its holder may be alive."""
    if (record.host, record.boot_id, record.pid_namespace) == this_machine():
        if record.pid == os.getpid():  # pids are unique among live processes: that one is gone, this one reused it
            return f"its pid {record.pid} is now this process's"
        if _pid_alive(record.pid) is False:
            return f"process {record.pid} is no longer running on this host"
    if now - record.heartbeat > record.stale_after:
        return f"its last heartbeat is more than {record.stale_after:g} s old"
    return None


def this_machine() -> tuple[str, str | None, str | None]:
    """What makes a pid meaningful: the host's name, this boot of it, and the pid namespace (Linux: else None)."""
    boot_id = None
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
    namespace = None
    with contextlib.suppress(OSError, AttributeError):
        namespace = os.readlink("/proc/self/ns/pid")
    return socket.gethostname(), boot_id, namespace


def _pid_alive(pid: int) -> bool | None:
    """Whether process `pid` of this machine is running; None when that cannot be told (not POSIX)."""
    if os.name != "posix":
        return None  # on Windows os.kill terminates the process instead of probing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return None
    # a zombie (killed, not yet reaped by its parent) keeps its pid but runs no more
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
