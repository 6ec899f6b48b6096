"""Every exit path of launch.py is one line: bad input found at start (a task file that is not UTF-8,
an unreachable or malformed backend.url or store.url, an output disk that is read-only or full) is
one line naming file, field and fix, exit status 2, no traceback, and the earlier run in the folder
is left byte for byte as it was (no config.yaml rewritten, no truncated tasks.jsonl). A run whose
every attempt errored still writes its summary (pass@1 undefined, errors counted) and its W&B run,
and exits with status 3.

The disk cases mount a small tmpfs (as root; skipped otherwise, with the reason).
"""

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tbx.domains import get_domain
from tests.helpers.stage import digest, error_lines
from tests.helpers.stage import launch_cli as launch


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def mock_eval(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["stage=eval", "tasks=mock", "policy=oracle", "logger=none", f"out_root={out}",
            f"backend.workdir={tmp_path}/db", *extra]


def finished_run(tmp_path: Path, args: list[str]) -> Path:
    done = launch(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    out = Path(next(a for a in args if a.startswith("out_root=")).removeprefix("out_root="))
    (run_dir,) = [p for p in out.iterdir() if p.name.startswith("eval-")]
    return run_dir


def assert_one_line(out: subprocess.CompletedProcess, *phrases: str) -> str:
    lines = error_lines(out)
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert lines[0].startswith("error: ") and ". Fix: " in lines[0] and all(p in lines[0] for p in phrases), lines
    return lines[0]


@pytest.mark.parametrize(("extra", "phrases"), [
    (["store.url=garbage"], ("field 'store.url'", "is not a database URL")),
    (["store.url=mysql+nodriver://u@127.0.0.1/db"], ("field 'store.url'", "is not a database URL")),
    ([f"store.url=postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/postgres"],
     ("field 'store.url'", "cannot be reached", "Connection refused")),
])
def test_a_bad_store_url_is_one_line_and_the_earlier_run_is_untouched(tmp_path, extra, phrases):
    run_dir = finished_run(tmp_path, mock_eval(tmp_path, tmp_path / "out"))
    before = digest(run_dir)
    assert_one_line(launch(*mock_eval(tmp_path, tmp_path / "out"), *extra), *phrases)  # the same run's identity
    assert digest(run_dir) == before


@pytest.mark.integration
def test_an_unreachable_or_malformed_backend_url_is_one_line_and_the_earlier_run_is_untouched(tmp_path, pg_url):
    args = mock_eval(tmp_path, tmp_path / "out", "backend=postgres")
    run_dir = finished_run(tmp_path, [*args, f"backend.url={pg_url}"])
    before = digest(run_dir)
    closed = f"backend.url=postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/postgres"
    assert_one_line(launch(*args, closed), "conf/backend/postgres.yaml: field 'backend.url'", "Connection refused",
                    "pg_local.sh start")
    assert_one_line(launch(*args, "backend.url=garbage"), "field 'backend.url'", "'garbage' is not a database URL")
    assert digest(run_dir) == before


def test_a_task_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(get_domain("mock").generate_tasks(0)[:1]))
    args = ["stage=eval", "tasks=files", f"tasks.path={path}", "policy=oracle", "logger=none",
            f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db"]
    run_dir = finished_run(tmp_path, args)
    before = digest(run_dir)
    text = path.read_bytes()
    path.write_bytes(text + b"# reviewed by Ren\xe9\n")  # a Latin-1 comment, as an old editor saves it
    last_line = len(text.splitlines()) + 1
    line = assert_one_line(launch(*args), f"{path}: field '(file)'", "not UTF-8", f"byte 0xe9 on line {last_line}")
    assert line.endswith("Fix: save the file as UTF-8")
    assert digest(run_dir) == before


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"needs to mount a small tmpfs (root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int = 0) -> None:
    """Fill the disk but `leave` bytes."""
    with open(disk / f"filler{len(list(disk.glob('filler*')))}", "wb") as filler:
        stat = os.statvfs(disk)
        remaining = stat.f_bavail * stat.f_frsize - leave
        try:
            while remaining > 0:
                remaining -= filler.write(b"\0" * min(remaining, 1 << 20))
                filler.flush()
        except OSError:
            pass


def test_a_full_output_disk_is_one_line_and_truncates_nothing(tmp_path):
    with small_disk(tmp_path / "disk", "16m") as disk:
        args = mock_eval(tmp_path, disk / "out", "tasks=travel", "tasks.limit=8")  # tasks.jsonl: ~350 KB
        run_dir = finished_run(tmp_path, args)
        before = digest(run_dir)
        fill(disk, leave=160_000)  # room for the start-up check, not for another tasks.jsonl
        assert_one_line(launch(*args), f"{run_dir / 'tasks.jsonl'}: field 'out_root'", "the disk is full",
                        "free space")
        assert digest(run_dir) == before  # config.yaml, run.json, tasks.jsonl, summary.json as they were
        fill(disk)
        assert_one_line(launch(*args), f"{disk / 'out'}: field 'out_root'", "the disk is full")
        assert digest(run_dir) == before


def test_a_read_only_output_disk_is_one_line(tmp_path):
    with small_disk(tmp_path / "disk", "16m") as disk:
        args = mock_eval(tmp_path, disk / "out")
        run_dir = finished_run(tmp_path, args)
        before = digest(run_dir)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        assert_one_line(launch(*args), "read-only", "out_root")
        assert_one_line(launch(*args, "eval.attempts=2"), "read-only", "out_root")
        assert digest(run_dir) == before


def test_a_run_whose_every_attempt_errored_writes_its_summary_and_exits_3(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    args = ["stage=eval", "tasks=mock", "policy=model", "model=openai_endpoint", f"model.endpoint.base_url={url}",
            "model.endpoint.model=m", "model.endpoint.api_key_env=null", "model.endpoint.max_retries=0",
            "eval.max_error_retries=1", "logger=wandb_offline", f"out_root={tmp_path}/out",
            f"backend.workdir={tmp_path}/db", f"summary_path={tmp_path}/summary.json"]
    out = launch(*args)
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "no attempt reached a verdict (3 errors, 0 excluded): pass@1 is undefined" in out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pass_at_1"] is None and summary["pass_at_k"] is None and summary["observed_all"] is None
    assert summary["counts"]["infra_error"] == 3 and summary["errors"] == 3 and summary["error_tries"] == 6
    run_dir = Path(summary["run_dir"])
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb")), "no W&B run"
    assert "   n/a" in out.stdout  # the table says undefined, not 0.0%
