"""Kept vLLM servers: one vLLM that many commands use, instead of one started (and waited for) per command.

`python launch.py stage=serve_model` starts the `model` group's vLLM with exactly the flags a command
would start it with (`tbx.vllm.spec`), detached in a session of its own, waits until it answers,
labels its weights (`<model>@<fingerprint>`, as `tbx.policies.vllm.serve` does) and leaves a record
`<model.server.kept_dir>/<flags hash>.json`: the URL, the process (host, pid, start time), the spec
it was started with, the weights it was started with and its log. Then it exits; the server runs
until `stage=serve_model serve_model.stop=true`.

A later command that would start a server (`shared_server`) looks for the record of its own flags
(the `ServeSpec.key`: everything but the weights folder and the served name) and attaches instead.
What the server answers with is then checked as for any running server: `serve` compares the
server's weight label with the fingerprint label of the weights the command asks for and reloads
them in place when they differ (a trainer's `<run>:step_N`, another model of the same architecture,
a reload cut off half way, which leaves `reloading:...`). The label is the truth, not the record:
every change of weights tbx makes goes through `VLLMServer.load_weights`/`load_adapter`, which
label them.

One command at a time: an attached command holds an exclusive lock (`<hash>.lock`, released by the
kernel when the process ends, however it ends); a second command finds it taken and starts a
server of its own, saying so. A record whose process is gone (killed, machine rebooted: a pid that
no longer runs, or runs another program) is removed when found.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from tbx.process.durable import write_text
from tbx.process.owner import Owner, process_owner
from tbx.vllm.spec import ServeSpec

HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class KeptRecord:
    """What a kept server is (the JSON file stage=serve_model writes)."""

    url: str  # http://127.0.0.1:PORT (no /v1)
    owner: str  # `Owner.tag` of the server's main process, which leads its process group
    spec: dict[str, Any]  # the ServeSpec it was started with
    weights: str  # the label of the weights it was started with (the live label: GET /weight_info)
    log: str

    @property
    def pid(self) -> int:
        return self.owner_record().pid

    def owner_record(self) -> Owner:
        owner = Owner.parse(self.owner)
        assert owner is not None, self.owner
        return owner

    def serve_spec(self) -> ServeSpec:
        spec = dict(self.spec)
        spec["extra_args"] = tuple(spec.get("extra_args") or ())
        return ServeSpec(**spec)


def flags_hash(spec: ServeSpec) -> str:
    """Names a kept server by its start flags: commands whose spec has the same `key` share it."""
    return hashlib.sha256(repr(spec.key).encode()).hexdigest()[:16]


def record_path(kept_dir: Path, spec: ServeSpec) -> Path:
    return kept_dir / f"{flags_hash(spec)}.json"


def read_record(path: Path) -> KeptRecord | None:
    """The record at `path`; None (and the file removed) when it is unreadable or its server is gone."""
    try:
        record = KeptRecord(**json.loads(path.read_text()))
        owner = record.owner_record()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AssertionError):
        _remove(path, "is unreadable")
        return None
    if owner.gone():
        _remove(path, f"names vLLM pid {owner.pid}, which no longer runs")
        return None
    return record


def records(kept_dir: Path) -> list[tuple[Path, KeptRecord]]:
    """Every live kept server of this host recorded in `kept_dir` (dead ones are removed on the way; those of
    other hosts sharing the folder, a home directory on a cluster's file system, are left alone)."""
    found = []
    for path in sorted(kept_dir.glob("*.json")) if kept_dir.is_dir() else []:
        record = read_record(path)
        if record is not None and record.owner_record().on_this_host():
            found.append((path, record))
    return found


def _remove(path: Path, why: str) -> None:
    print(f"note: removed the kept-server record {path}: it {why}", file=sys.stderr)
    for stale in (path, path.with_suffix(".lock")):
        stale.unlink(missing_ok=True)


def differences(record: KeptRecord, spec: ServeSpec) -> list[str]:
    """The start flags in which a kept server differs from `spec` (the weights and name never count)."""
    wanted = dataclasses.asdict(spec)
    kept = dataclasses.asdict(record.serve_spec())
    return [f"{name} {kept[name]!r} (here {wanted[name]!r})" for name in wanted
            if name not in ("directory", "served_name") and kept[name] != wanted[name]]


@dataclass
class Lease:
    """This process's hold on a kept server: an exclusive lock on its `.lock` file, for as long as it is open."""

    record: KeptRecord
    handle: IO[bytes]

    def release(self) -> None:
        if not self.handle.closed:
            self.handle.close()


def take(kept_dir: Path, spec: ServeSpec) -> Lease | None:
    """A lease on the live kept server started with `spec`'s flags; None when there is none, when another
    command holds it, or when it does not answer (each said in one line)."""
    path = record_path(kept_dir, spec)
    record = read_record(path)
    if record is None or not record.owner_record().on_this_host():  # its 127.0.0.1 is another machine's
        for _, other in records(kept_dir):
            print(f"note: the kept vLLM at {other.url} was started with other flags ({'; '.join(differences(other, spec))}): "
                  "this command starts its own", file=sys.stderr)
        return None
    handle = open(path.with_suffix(".lock"), "ab")  # held for the lease's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        print(f"note: the kept vLLM at {record.url} is in use by another command: this command starts its own",
              file=sys.stderr)
        return None
    if not answers(record.url):
        handle.close()
        print(f"note: the kept vLLM at {record.url} (pid {record.pid}) does not answer: this command starts its own; "
              f"its log: {record.log}", file=sys.stderr)
        return None
    return Lease(record, handle)


def answers(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def keep(server: Any, kept_dir: Path, weights: str) -> KeptRecord:
    """Record `server` (a started, ready `VLLMServer` whose weights are labelled `weights`) as kept."""
    assert server.process is not None
    record = KeptRecord(url=server.root_url, owner=process_owner(server.process.pid).tag,
                        spec=dataclasses.asdict(server.spec), weights=weights, log=str(server.log_path))
    write_text(record_path(kept_dir, server.spec), json.dumps(dataclasses.asdict(record), indent=2) + "\n")
    return record


def stop(path: Path, record: KeptRecord, grace_s: float = 30.0) -> None:
    """Stop a kept server's whole process group (SIGTERM, SIGKILL after `grace_s`) and remove its record."""
    owner = record.owner_record()
    if not owner.gone():  # else its pid may since lead another process group
        _signal(owner.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not owner.gone() and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal(owner.pid, signal.SIGKILL)  # the main process after the grace period, workers that outlived it
    for stale in (path, path.with_suffix(".lock")):
        stale.unlink(missing_ok=True)


def _signal(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
