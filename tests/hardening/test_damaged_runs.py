"""Damaged stores and run files, odd values and Ctrl-C: each ends in one line naming the file and the fix
(exit 2; Ctrl-C exit 130), never a traceback, and nothing already stored is changed.

A real eval run of the mock domain is made once; each case damages a copy of its folder the way a full
disk, an editor or another tool would, and the same command is run again on that copy (`run_dir=`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tbx.config.checks import composition_error
from tbx.errors import ConfigError, TaskFormatError
from tbx.process.durable import check_writable
from tbx.tasks.loader import load_task
from tests.helpers.episodes import nickname_task
from tests.helpers.stage import make_cfg, run
from tests.launch import ctrl_c_reaches_it

ROOT = Path(__file__).resolve().parents[2]
ARGS = ("tasks=mock", "policy=oracle")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("finished")
    return Path(run(make_cfg(tmp, *ARGS)).run_dir)


def truncate_run_json(folder: Path) -> None:
    (folder / "run.json").write_bytes((folder / "run.json").read_bytes()[:40])


def damage_pages(folder: Path) -> None:
    store = folder / "results.sqlite"
    data = bytearray(store.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # the second page: the first table's b-tree
    store.write_bytes(bytes(data))


def replace_by_text(folder: Path) -> None:
    (folder / "results.sqlite").write_text("hello, not a database\n")


def another_tools_store(folder: Path) -> None:
    (folder / "results.sqlite").unlink()
    with sqlite3.connect(folder / "results.sqlite") as db:
        db.execute("CREATE TABLE results (model TEXT, score REAL)")
        db.execute("INSERT INTO results VALUES ('m', 0.5)")


@pytest.mark.parametrize(("damage", "file", "problem"), [
    (truncate_run_json, "run.json", "is damaged (not JSON"),
    (damage_pages, "results.sqlite", "is a damaged results store"),
    (replace_by_text, "results.sqlite", "is not a SQLite results store"),
    (another_tools_store, "results.sqlite", "holds another tool's database (tables: results)"),
], ids=["truncated run.json", "damaged pages", "store replaced by text", "another tool's store"])
def test_a_damaged_run_folder_is_named_with_the_fix(finished, tmp_path, damage, file, problem):
    folder = tmp_path / "copy"
    shutil.copytree(finished, folder)
    for leftover in folder.glob("results.sqlite-*"):
        leftover.unlink()
    damage(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ConfigError) as error:
        run(make_cfg(tmp_path, *ARGS, f"run_dir={folder}"))
    assert error.value.source == str(folder / file) and error.value.field == "run_dir"
    assert problem in error.value.problem and "another run_dir" in error.value.fix and "\n" not in str(error.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written into it


def test_a_damaged_store_through_launch_is_one_line_and_exit_2(finished, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(finished, folder)
    damage_pages(folder)
    out = subprocess.run([sys.executable, "launch.py", "stage=eval", *ARGS, f"run_dir={folder}", "logger=none",
                          f"backend.workdir={tmp_path}/db", f"hydra.run.dir={tmp_path}/hydra"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {folder / 'results.sqlite'}: field 'run_dir'")


def test_an_out_root_that_is_a_file_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder") as error:
        check_writable(tmp_path / "afile" / "runs")
    assert error.value.source == str(tmp_path / "afile") and error.value.field == "out_root"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused_at_composition(value):
    error = composition_error(ROOT / "conf", "config", ["stage=eval", f"model.endpoint.temperature={value}"])
    assert error is not None and error.field == "model.endpoint.temperature" and "not a finite number" in error.problem


def test_a_task_id_with_a_nul_byte_is_refused():
    task = nickname_task() | {"id": "mock/nick\0name/1"}
    with pytest.raises(TaskFormatError, match="control character") as error:
        load_task(task, "tasks.yaml")
    assert error.value.field == "id"


KEY = "SEKRITkey4242"


@pytest.mark.parametrize("override", [f"model.endpoint.base_url=http://user:{KEY}@127.0.0.1:9/v1",
                                      f"user.endpoint.base_url=https://{KEY}@host/v1",
                                      f"store.url=postgresql+psycopg://tbx:{KEY}@127.0.0.1:5/tbx"])
def test_a_key_inside_a_url_is_refused_and_never_written_or_echoed(tmp_path, override):
    out = subprocess.run([sys.executable, "launch.py", "stage=eval", "tasks=mock", "policy=model", override,
                          f"out_root={tmp_path}/out", f"hydra.run.dir={tmp_path}/hydra", "logger=none"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2 and "inside the URL" in out.stderr, out.stderr[-2000:]
    assert KEY not in out.stderr + out.stdout
    written = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert written == []  # no run.json, results store, or Hydra .hydra/{overrides,config,hydra}.yaml holds it


def test_a_secret_in_an_unknown_key_is_not_echoed():
    error = composition_error(ROOT / "conf", "config", ["stage=eval", f"model.endpoint.api_key={KEY}"])
    assert error is not None and KEY not in str(error) and "model.endpoint.api_key" in str(error)


def test_ctrl_c_mid_eval_is_one_line_and_resumes(tmp_path):
    # The policy holds every turn until `gate` exists and creates `started` when one waits: the SIGINT lands
    # while an episode is surely in flight (no sleep to guess it), and the gate opens for the resume only.
    started, gate = tmp_path / "turn-waiting", tmp_path / "gate-open"
    args = ["stage=eval", "tasks=mock", "policy._target_=tests.launch.GatedCoinPolicy", "policy.name=gatedcoin",
            f"+extra.started_file={started}", f"+extra.gate_file={gate}", "eval.attempts=4",
            f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db", "logger=none",
            f"hydra.run.dir={tmp_path}/hydra"]
    log = tmp_path / "log.txt"
    with log.open("w") as handle:
        proc = subprocess.Popen([sys.executable, "launch.py", *args], stdout=handle, stderr=subprocess.STDOUT,
                                cwd=ROOT, env={**os.environ, "PYTHONFAULTHANDLER": "1"}, preexec_fn=ctrl_c_reaches_it)
        deadline = time.monotonic() + 240
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert started.exists() and proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:  # where every thread of the run waits: faulthandler prints it on SIGABRT
            proc.send_signal(signal.SIGABRT)
            proc.wait(30)
            raise AssertionError("the run did not end within 120 s of Ctrl-C:\n" + log.read_text()[-6000:]) from None
    text = log.read_text()
    assert rc == 130 and "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith("interrupted (Ctrl-C)")
    gate.touch()
    resumed = subprocess.run([sys.executable, "launch.py", *args], capture_output=True, text=True, cwd=ROOT,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def record_not_json(folder: Path) -> None:
    with sqlite3.connect(folder / "results.sqlite") as db:
        db.execute("UPDATE attempts SET record = '{not json' WHERE rowid = (SELECT min(rowid) FROM attempts)")


def tasks_emptied(folder: Path) -> None:
    (folder / "tasks.jsonl").write_text("")


def run_json_removed(folder: Path) -> None:
    (folder / "run.json").unlink()


@pytest.mark.parametrize(("damage", "file", "problem"), [
    (record_not_json, "results.sqlite", "holds a stored try that is not a tbx record (task mock/"),
    (tasks_emptied, "tasks.jsonl", "holds no task 'mock/"),
    (run_json_removed, "run.json", "is missing; it holds the run's identity"),
], ids=["a stored record that is not JSON", "a task missing from tasks.jsonl", "no run.json"])
def test_regrade_over_a_damaged_run_folder_is_one_line(finished, tmp_path, damage, file, problem):
    folder = tmp_path / "copy"
    shutil.copytree(finished, folder)
    damage(folder)
    out = subprocess.run([sys.executable, "launch.py", "stage=regrade", f"regrade.run_dir={folder}", "logger=none",
                          f"hydra.run.dir={tmp_path}/hydra"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]  # before: a traceback, exit 1
    assert lines[0].startswith(f"error: {folder / file}: field 'regrade.run_dir': {problem}"), lines
    assert "Fix: restore the run folder from a copy" in lines[0]
    assert not (folder / "regrade.json").exists()


def test_view_over_a_store_that_is_not_a_database_is_one_line(finished, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(finished, folder)
    replace_by_text(folder)
    out = subprocess.run([sys.executable, "launch.py", "stage=view", f"runs=[{folder}]", f"view.export={tmp_path}/site",
                          "logger=none", f"hydra.run.dir={tmp_path}/hydra"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]  # before: a traceback, exit 1
    assert lines[0].startswith(f"error: {folder / 'results.sqlite'}: field 'runs': is not a SQLite results store")
    assert not (tmp_path / "site").exists()
