"""Read back what a W&B offline run wrote, for tests: the history rows of `run-*.wandb`.

The file is a sequence of 32 KiB blocks of length-prefixed chunks (full / first / middle / last),
each chunk part of a protobuf `Record`; wandb 0.31 ships no reader for it in Python.
"""

import glob
import json
import struct
import time
from pathlib import Path

from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2

BLOCK, HEADER = 32768, 7


def _chunks(data: bytes):
    pos, partial = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if length == 0 and kind == 0:  # zero padding at the end of a block
            pos += left
            continue
        if pos + HEADER + length > len(data):  # the writer has not finished this chunk yet
            return
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            yield partial + chunk


def _records(path: Path):
    """The file's complete records, in order. W&B's writer appends while a test reads: a record it has not
    finished writing ends the list (the callers poll), never a DecodeError."""
    for chunk in _chunks(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(chunk)
        except DecodeError:
            return
        yield record


def history(run_dir: str | Path, wait_for: str | None = None, timeout_s: float = 20.0) -> list[dict]:
    """Every history row of the (single) offline W&B run under `run_dir`. W&B's writer process may
    still be flushing after `finish()` returns, so with `wait_for` it polls until that key shows."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _read_history(run_dir)
        if wait_for is None or any(wait_for in row for row in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def _read_history(run_dir: str | Path) -> list[dict]:
    files = glob.glob(str(Path(run_dir) / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, files
    rows = []
    for record in _records(Path(files[0])):
        if record.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item})
    return rows


def table(run_dir: str | Path, key: str) -> dict:
    """The JSON of the table logged under `key` (columns and data)."""
    for row in history(run_dir, wait_for=f"{key}/_type"):
        if row.get(f"{key}/_type") == "table-file":
            files = glob.glob(str(Path(run_dir) / "wandb" / "offline-run-*" / "files" / row[f"{key}/path"]))
            return json.loads(Path(files[0]).read_text())
    raise KeyError(key)


def finished(run_dir: str | Path, timeout_s: float = 30.0) -> None:
    """Wait until the (single) offline run under `run_dir` holds its exit record, the last one W&B writes:
    `finish()` can return while W&B's writer process still appends rows (CI once read 53 of 60)."""
    _first_record(run_dir, "exit", timeout_s)


def run_group(run_dir: str | Path, timeout_s: float = 30.0) -> str:
    """The W&B group the (single) offline run under `run_dir` was started in. W&B's writer process may still be
    flushing after `finish()` returns (on a loaded machine, seconds later): it polls until the run record shows."""
    return _first_record(run_dir, "run", timeout_s).run.run_group


def _first_record(run_dir: str | Path, kind: str, timeout_s: float):
    """The first record of type `kind` in the (single) offline run under `run_dir`, polled until it shows."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = glob.glob(str(Path(run_dir) / "wandb" / "offline-run-*" / "run-*.wandb"))
        assert len(files) <= 1, files
        for record in _records(Path(files[0])) if files else ():
            if record.WhichOneof("record_type") == kind:
                return record
        if time.monotonic() > deadline:
            raise KeyError(f"no {kind} record in {files} within {timeout_s} s")
        time.sleep(0.1)
