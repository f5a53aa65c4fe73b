"""Which rank was lost, when a collective fails because a peer went away (killed, out of memory, its machine
down): gloo and NCCL say only "Connection closed by peer [address]". Every rank notes where the others run when the
group starts (`note_peers`, one exchange); a survivor then tells which of its own machine's peers are gone and
names them in one line (`lost_peers_line`), before its error's traceback."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

__all__ = ["is_peer_loss", "lost_peers_line", "note_peers"]

# what the backends say when a peer's connection ends mid-collective
_PEER_LOSS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "socket closed",
    "connection refused",
)
_peers: dict[str, list[tuple[str, int]]] = {"by_rank": []}


def note_peers() -> None:
    """Every rank's (host, pid), gathered once when the process group starts (every rank calls it)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (socket.gethostname(), os.getpid()))
    _peers["by_rank"] = [(str(host), int(pid)) for host, pid in gathered]


def is_peer_loss(error: BaseException) -> bool:
    """Whether `error` (or what it was raised from) is a collective failing because a peer's connection ended."""
    link: BaseException | None = error
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, RuntimeError) and any(words in str(link).lower() for words in _PEER_LOSS):
            return True
        link = link.__cause__ or link.__context__
    return False


def lost_peers_line(error: BaseException, rank: int) -> str | None:
    """For a peer loss (`is_peer_loss`), the one line this survivor (`rank`) says: the ranks of its machine whose
    process is gone, or that a rank elsewhere stopped answering; None for any other error."""
    if not is_peer_loss(error):
        return None
    here = socket.gethostname()
    local = [(peer, pid) for peer, (host, pid) in enumerate(_peers["by_rank"]) if host == here and peer != rank]
    # the peer's sockets close while it exits, a moment before its process is gone: a short look, not a wait
    deadline = time.monotonic() + 0.5
    gone = [peer for peer, pid in local if not _alive(pid)]
    while local and not gone and time.monotonic() < deadline:
        time.sleep(0.02)
        gone = [peer for peer, pid in local if not _alive(pid)]
    elsewhere = sorted({host for host, _ in _peers["by_rank"] if host != here})
    if gone:
        lost = ", ".join(f"rank {peer} (pid {_peers['by_rank'][peer][1]})" for peer in gone)
        what = f"lost {lost} on {here}: its process is gone (killed, out of memory, or it crashed; its log says which)"
    elif elsewhere:
        what = f"lost a rank on {', '.join(elsewhere)}: it stopped answering (its log, or its machine, says why)"
    else:
        what = "lost a rank: it stopped answering (its log says why)"
    return (
        f"Rank {rank} {what}. The run stops on every rank; resume it from its last committed checkpoint with "
        'Trainer(resume="auto") or fit(ckpt_path="last").'
    )


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not reaped yet by its launcher, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:  # no /proc (not Linux): it answered the signal
        return True
