"""verl's real trainer through a real Slurm job, on the LoRA pool with the KL term (marker `verl`: .venv-vllm).

The cluster path whole, only the GPUs faked: `launch.py stage=train grpo.trainer=verl hardware=slurm_local`
→ a submitit job on the single-node Slurm the tests start (scripts/slurm_local.sh) → the job's Ray head →
`verl.trainer.main_ppo` with tbx's overrides → SmolLM2-135M served by vLLM's CPU build inside verl's
workers, tbx's agent loop playing the pool's tasks. The pool manifest is the LoRA pool's (`pool=lora`,
finetune lora: verl trains a LoRA adapter and syncs it into vLLM as an adapter), and `grpo.kl_coef` is
non-zero (verl loads a reference model and adds the KL loss). One step, then verl's merger.

About 8 minutes on 2 cores, past what CI's budget has left: the test command runs it only with
TBX_VERL_RUN=all (TBX_VERL_RUN=all .venv-vllm/bin/python -m pytest -m verl tests/verl_bridge/test_verl_slurm_lora.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from tbx.errors import EXIT_NO_UPDATE
from tbx.verl_bridge.launch import step_metrics
from tests.helpers.slurm import job_field
from tests.verl_bridge.verl_run import (
    ERRORS,
    POOL,
    ROOT,
    environment,
    rollouts,
    run_dir_of,
    stored_rows,
    train_command,
    write_pool,
)

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration, pytest.mark.slurm,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") != "all",
                                 reason="the LoRA run through Slurm (about 8 minutes) runs with TBX_VERL_RUN=all")]
KL = 0.01
RUN_TIMEOUT_S = 2400.0


@pytest.fixture(scope="module")
def lora_run(request, tmp_path_factory):
    request.getfixturevalue("slurm")  # started (or found) before the run, stopped at the session's end
    root = tmp_path_factory.mktemp("verl-slurm-lora")
    pool = write_pool(root / "pool.json", pool="lora", finetune="lora")
    command = [arg for arg in train_command(root, pool) if not arg.startswith(("hardware=", "grpo.steps=", "faults."))]
    command += ["hardware=slurm_local", "hardware.cpus_per_task=2", "hardware.mem_gb=16", "pool=lora",
                "grpo.steps=1", f"grpo.kl_coef={KL}", "grpo.lora_rank=8"]
    done = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    (root / "launch.log").write_text(done.stdout + done.stderr)
    # 4 (EXIT_NO_UPDATE): the step drew only zero-variance groups, so nothing was merged
    assert done.returncode in (0, EXIT_NO_UPDATE), (done.stdout + done.stderr)[-4000:]
    run = run_dir_of(root)
    assert run is not None
    return {"root": root, "run": run, "output": done.stdout + done.stderr}


def test_the_run_went_through_a_slurm_job(lora_run):
    jobs = sorted(p.name.split("_")[0] for p in (lora_run["root"] / "jobs").glob("*_submitted.pkl"))
    assert jobs, "no submitit job folder"
    deadline = time.monotonic() + 120  # submitit hands the result over before the batch script has ended
    while job_field(jobs[-1], "JobState") in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
        time.sleep(1.0)
    assert job_field(jobs[-1], "JobState") == "COMPLETED"
    assert job_field(jobs[-1], "Partition") == "debug"


def test_verl_trained_a_lora_adapter_with_the_kl_term(lora_run):
    metrics = step_metrics(lora_run["run"] / "verl")
    assert 1 in metrics, sorted(metrics)
    step = metrics[1]
    kl = [value for key, value in step.items() if key.endswith("kl_loss")]
    assert kl and all(math.isfinite(v) for v in kl), sorted(step)  # the reference model ran
    assert math.isfinite(step["actor/grad_norm"])
    assert step["timing_s/update_weights"] > 0
    command = (lora_run["run"] / "verl" / "command.sh").read_text()
    assert f"actor_rollout_ref.actor.kl_loss_coef={KL}" in command and "actor_rollout_ref.model.lora_rank=8" in command
    summary = json.loads((lora_run["run"] / "train.json").read_text())
    assert summary["trained_steps"] == 1 and summary["trainer"] == "verl"
    if summary["updates"] == 0:  # no group of mixed verdicts: no update ran, nothing merged
        assert summary["final_model"] is None and step["actor/grad_norm"] == 0
        pytest.skip("the step drew only zero-variance groups (no update ran): no adapter to merge")
    final = Path(summary["final_model"])
    assert (final / "config.json").is_file() and list(final.rglob("*.safetensors"))


def test_the_lora_run_trained_on_the_stored_verdicts(lora_run):
    rows = stored_rows(lora_run["run"])
    stored = {(row["task_id"], row["reward"]) for row in rows if row["outcome"] not in ERRORS}
    samples = rollouts(lora_run["run"])[1]
    assert samples and {s["gts"] for s in samples} <= set(POOL)
    assert {(s["gts"], s["score"]) for s in samples} <= stored
