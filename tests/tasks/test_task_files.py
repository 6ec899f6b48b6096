"""What `tasks.path` names is refused by its type and size before a byte is read, and nesting is
bounded while parsing: each case is one line (file, field, fix) and exit status 2, within seconds.

Before these checks, a named pipe or /dev/zero hung the start forever, a 50 MB file took minutes
to parse, a symlink loop or 50,000 nested lists ended in a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tbx.domains import get_domain
from tbx.errors import TaskFormatError
from tbx.tasks.files import MAX_DEPTH, MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]


def good_text() -> str:
    return yaml.safe_dump(dict(get_domain("mock").generate_tasks(0)[0]))


def folder_with(tmp_path: Path, name: str) -> Path:
    """A task folder holding one good task file and the hostile entry `name`."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "good.yaml").write_text(good_text())
    entry = folder / name
    if name == "pipe.yaml":
        os.mkfifo(entry)
    elif name == "loop.yaml":
        entry.symlink_to(folder / "loop2.yaml")
        (folder / "loop2.yaml").symlink_to(entry)
    elif name == "big.yaml":
        with entry.open("w") as file:  # a comment repeated: cheap to write, minutes to parse
            file.write("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    elif name == "deep.yaml":
        entry.write_text("[" * 50_000 + "]" * 50_000)
    elif name == "deep.jsonl":
        entry.write_text("[" * 50_000 + "]" * 50_000 + "\n")
    elif name == "deep_block.yaml":
        entry.write_text("".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 2)) + "  " * (MAX_DEPTH + 2) + "x")
    return folder


@pytest.mark.parametrize(("name", "field", "problem"), [
    ("pipe.yaml", "tasks.path", "is a named pipe, not a task file"),
    ("loop.yaml", "tasks.path", "is a symlink loop"),
    ("big.yaml", "tasks.path", f"over the {MAX_FILE_BYTES // 2**20} MiB a task file may hold"),
    ("deep.yaml", "(file)", f"deeper than {MAX_DEPTH} levels"),
    ("deep.jsonl", "(file)", f"deeper than {MAX_DEPTH} levels"),
    ("deep_block.yaml", "(file)", f"deeper than {MAX_DEPTH} levels"),
])
def test_a_hostile_entry_in_the_task_folder_is_one_error(tmp_path, name, field, problem):
    folder = folder_with(tmp_path, name)
    started = time.monotonic()
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(folder)))
    assert time.monotonic() - started < 10
    hostile = {"loop.yaml": ("loop.yaml", "loop2.yaml")}.get(name, (name,))
    assert Path(error.value.source).name in hostile and error.value.field == field, str(error.value)
    assert problem in error.value.problem, str(error.value)


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=validate", "tasks=files", "logger=none",
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(("path", "problem"), [
    ("/dev/zero", "is a character device, not a task file"),
    ("PIPE", "is a named pipe, not a task file"),
])
def test_launch_refuses_a_device_or_pipe_as_tasks_path_at_once(tmp_path, path, problem):
    if path == "PIPE":
        path = str(tmp_path / "tasks.yaml")
        os.mkfifo(path)
    started = time.monotonic()
    out = launch(f"tasks.path={path}", f"out_root={tmp_path}/out", f"hydra.run.dir={tmp_path}/hydra")
    assert time.monotonic() - started < 30
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith(f"error: {path}: field 'tasks.path': {problem}. Fix: give a regular YAML/JSON file")


def test_a_task_file_of_ordinary_size_and_depth_still_loads(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"k": [[[1]]]}\n')  # loads; refused later as a task, not as a file
    (tmp_path / "good.yaml").write_text(good_text())
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(tmp_path)))
    assert error.value.field in ("id", "domain") and error.value.source.endswith("a.jsonl")
    assert [t.id for t in resolve_tasks(TasksConfig(name="files", path=str(tmp_path / "good.yaml")))] == [
        "mock/transfer/5"]
