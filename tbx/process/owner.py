"""Which process owns a thing (an episode database, a claimed attempt), and whether it is gone.

An owner is (host, pid, process start time), written as a short tag into names and store rows, so
a later process can tell leftovers of a dead process from the work of a live one: on the same host
a pid that no longer runs, runs as a zombie, or runs a different program started at another time
(a reused pid) is gone. A process on another host cannot be looked at; callers that share work
across hosts pair the tag with a heartbeat (`tbx.store.claims`). psutil reads the process table
portably (it already comes with wandb). `die_with_parent` ties a child's life to its parent's (the Ray
daemons a job starts, verl's trainer).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import signal
import socket
from dataclasses import dataclass

import psutil

_TAG = re.compile(r"(?<![0-9a-z])([0-9a-f]{6})_(\d+)_(\d+)(?!\d)")


@dataclass(frozen=True)
class Owner:
    host: str  # 6 hex digits of the host name's hash (names stay short: PostgreSQL allows 63 bytes)
    pid: int
    started: int  # the process's start time, whole seconds since the epoch

    @property
    def tag(self) -> str:
        return f"{self.host}_{self.pid}_{self.started}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner whose tag `text` contains (None: no tag, e.g. a name from before tags)."""
        match = _TAG.search(text)
        return None if match is None else cls(match.group(1), int(match.group(2)), int(match.group(3)))

    def on_this_host(self) -> bool:
        return self.host == host_tag()

    def gone(self) -> bool:
        """True when this owner is on this host and no longer runs; False when it runs or is elsewhere."""
        return self.on_this_host() and not _running(self.pid, self.started)


def host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def _start_time(pid: int) -> int | None:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped: it does nothing any more
            return None
        return int(process.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _running(pid: int, started: int) -> bool:
    return _start_time(pid) == started


def process_owner(pid: int) -> Owner:
    """The process `pid` of this host as an owner (start time 0 when it does not run)."""
    return Owner(host_tag(), pid, _start_time(pid) or 0)


_cache: dict[int, Owner] = {}


def this_process() -> Owner:
    """This process as an owner (recomputed in a forked child, whose pid differs)."""
    pid = os.getpid()
    if pid not in _cache:
        _cache[pid] = process_owner(pid)
    return _cache[pid]


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the job's process dies, even by SIGKILL (a cancelled
    job; prctl PR_SET_PDEATHSIG, Linux). Ray's reaper, which `ray start --block` spawns, then kills
    the daemons within about a second; a SIGTERM would first try to drain the node through a GCS
    that may be gone, waiting out its time-outs."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
