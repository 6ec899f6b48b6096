"""A kept vLLM (stage=serve_model) with the real server: started once, used by two later commands that
start none of their own, stopped by one command. The paths a real server is not needed for:
tests/llm/test_vllm_kept.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tbx.vllm.kept import read_record
from tests.conftest import _require_vllm
from tests.helpers.processes import group_pids

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    common = [f"model.server.kept_dir={tmp_path / 'kept'}", f"out_root={tmp_path / 'out'}", "logger=none"]
    done = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args, *common], capture_output=True, text=True,
                          cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_two_commands_use_the_kept_server_and_start_none(tmp_path):
    _require_vllm()
    started = launch(tmp_path, "stage=serve_model")
    [path] = (tmp_path / "kept").glob("*.json")
    record = read_record(path)
    assert record is not None and f"{record.url}/v1" in started.stdout
    log = Path(record.log)
    try:
        served = []
        for limit in (1, 2):  # two runs (the task limit is part of a run's identity)
            done = launch(tmp_path, "stage=eval", "tasks=mock", f"tasks.limit={limit}", "eval.attempts=1",
                          "eval.max_turns=2", "model.max_new_tokens=16", f"backend.workdir={tmp_path / 'db'}")
            assert f"using the kept vLLM at {record.url}/v1" in done.stderr and "starting vLLM" not in done.stderr
            served.append(log.read_text().count("POST /inference/v1/generate"))
        assert 0 < served[0] < served[1]  # both commands' turns went to the kept server
        assert group_pids(record.pid)  # and it runs on after them
    finally:
        stopped = launch(tmp_path, "stage=serve_model", "serve_model.stop=true")
    assert f"stopped the kept vLLM at {record.url}" in stopped.stdout
    assert not group_pids(record.pid) and not path.exists()
