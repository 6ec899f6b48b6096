"""`~` and `$VAR` in path settings mean what they mean in a shell, on the command line and in files:
the add-a-task quick start's `tasks.path=~/my_tasks` (Hydra's grammar cannot parse a leading `~`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tbx.domains import get_domain
from tests.launch import compose_cfg

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["~/my_tasks", "$HOME/my_tasks"])
def test_a_home_relative_task_folder_works_on_the_command_line(tmp_path, value):
    (tmp_path / "my_tasks").mkdir()
    (tmp_path / "my_tasks" / "t.yaml").write_text(yaml.safe_dump(dict(get_domain("mock").generate_tasks(0)[0])))
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=validate", "tasks=files",
                          f"tasks.path={value}", "logger=none", f"out_root={tmp_path}/out",
                          f"hydra.run.dir={tmp_path}/hydra"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "all                                       1         1" in out.stdout


def test_path_settings_expand_home_and_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TBX_TEST_RUNS", str(tmp_path / "runs"))
    cfg = compose_cfg("stage=report", "out_root=$TBX_TEST_RUNS", "runs=['~/a','$TBX_TEST_RUNS/b']",
                      "tasks.path='~/tasks'", "eval.attempts=2")
    assert cfg.out_root == str(tmp_path / "runs") and cfg.tasks.path == str(tmp_path / "tasks")
    assert cfg.runs == [str(tmp_path / "a"), str(tmp_path / "runs" / "b")]
    assert cfg.launcher.folder == str(tmp_path / "runs" / "jobs")
