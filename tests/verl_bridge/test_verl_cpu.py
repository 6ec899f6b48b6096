"""verl 0.9.1's real trainer trains on tbx episodes on this CPU machine (marker `verl`: .venv-vllm).

Nothing of verl is replaced: `launch.py stage=train grpo.trainer=verl` → plan → a submitit job →
its Ray head → `python -m verl.trainer.main_ppo` with tbx's overrides, the CPU platform and the vLLM
extension of tbx/verl_bridge, vLLM's CPU build serving SmolLM2-135M inside verl's workers, an FSDP2
actor over gloo, tbx's agent loop playing the pool's tasks (per-episode SQLite database, MCP session,
scripted user) with injected tool, database and user faults. The run is SIGKILLed (the job's whole process
group) once step 1's checkpoint is written and step 2 has started, and the same command is run
again; then verl's merger writes the final model and tbx evaluates it.

One run serves every test of the module; it takes 10 to 20 minutes on a 2-core machine
(docs/training.md), 38 at most (a fixed token budget per step, one deadline for both starts; each step's
time is printed, slowest first), and the test command runs it (TBX_VERL_RUN=0 skips it). Each test reads
what the run left: the results store, verl's per-step rollout dump (`verl/rollouts/<step>.jsonl`:
every trajectory verl trained on, with the score it trained on) and verl's log.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from tbx.config import FaultsConfig
from tbx.episodes.faults import draw
from tbx.episodes.seeds import verl_fault_seed as fault_seed
from tbx.errors import EXIT_NO_UPDATE
from tbx.store.training import step_of
from tbx.verl_bridge.cpu import cpu_environment
from tbx.verl_bridge.launch import merge_checkpoint, step_metrics
from tests.verl_bridge.verl_run import (
    ERRORS,
    FAULT_RATES,
    GROUP,
    GROUPS,
    POOL,
    PROMPT_TOKENS,
    RESPONSE_TOKENS,
    ROOT,
    STEPS,
    environment,
    joined_tries,
    killed_in_step2_and_resumed,
    rollouts,
    stored_rows,
    train_command,
    write_pool,
)

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") == "0",
                                 reason="TBX_VERL_RUN=0: the real verl run (10 to 20 minutes on 2 cores) is skipped")]
STEP_TOKENS = GROUPS * GROUP * (PROMPT_TOKENS + RESPONSE_TOKENS)
RUN_BUDGET_S = 33 * 60.0  # both starts of the run together; with the merged model's evaluation the test stays
EVAL_TIMEOUT_S = 300.0  # under 40 minutes on a loaded 2-core machine, or fails saying which step was slow


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory, request):
    """The run: started, SIGKILLed inside step 2, started again to the end; then merged and evaluated."""
    root = tmp_path_factory.mktemp("verl-cpu")
    pool = write_pool(root / "pool.json")
    return killed_in_step2_and_resumed(root, train_command(root, pool), RUN_BUDGET_S, request)


def test_the_killed_run_resumed_from_its_checkpoint_and_finished(verl_run):
    run = verl_run["run"]
    assert verl_run["left_after_kill"] == []  # nothing of the killed job outlived it
    summary = json.loads((run / "train.json").read_text())
    assert summary["trained_steps"] == STEPS and summary["trainer"] == "verl"
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert "resuming after step 1" in verl_run["second"]  # the launcher found verl's checkpoint
    assert {p.name for p in (run / "checkpoints").iterdir() if p.is_dir()} >= {"global_step_1", "global_step_2"}


def test_no_episode_is_stored_twice_for_a_step(verl_run):
    rows = stored_rows(verl_run["run"])
    with sqlite3.connect(verl_run["run"] / "results.sqlite", timeout=30) as conn:  # verl's workers wrote them
        run_ids = {run_id for (run_id,) in conn.execute("select distinct run_id from attempts")}
    assert run_ids == {json.loads((verl_run["run"] / "run.json").read_text())["identity"]}
    keys = Counter((r["task_id"], r["attempt"], r["try"]) for r in rows)
    assert max(keys.values()) == 1
    # the killed process's step-2 episodes were discarded before verl replayed step 2
    killed_step2 = {(r["task_id"], r["seed"]) for r in verl_run["before_resume"] if step_of(r["attempt"]) == 1}
    kept_step2 = {(r["task_id"], r["seed"]) for r in rows if step_of(r["attempt"]) == 1}
    assert killed_step2 and not killed_step2 & kept_step2
    step1_before = [r for r in verl_run["before_resume"] if step_of(r["attempt"]) == 0]
    assert step1_before == [r for r in rows if step_of(r["attempt"]) == 0]  # the checkpointed step stays as it was


def test_verl_trained_on_the_verdicts_tbx_stored(verl_run):
    joined = joined_tries(verl_run)
    steps = rollouts(verl_run["run"])
    assert sorted(steps) == list(range(1, STEPS + 1))
    for samples in steps.values():
        # groups_per_step groups, each with its sessions that ended in a verdict (a session whose every try
        # errored leaves its group one trajectory short)
        assert len({s["uid"].rsplit("_", 2)[0] for s in samples}) == GROUPS
        assert len(samples) <= GROUPS * GROUP and {s["gts"] for s in samples} <= set(POOL)
    assert joined and all(sample["score"] == row["reward"] for sample, row in joined)
    assert all(row["reward"] in (0.0, 1.0) for _, row in joined)
    pads = [sample for samples in rollouts(verl_run["run"], padding=True).values() for sample in samples]
    assert all(sample["score"] == 0 and not sample.get("output") for sample in pads)  # no response, no reward


def test_error_episodes_are_rerun_never_trained_on_and_never_scored(verl_run):
    rows = stored_rows(verl_run["run"])
    errors = [r for r in rows if r["outcome"] in ERRORS]
    faults = FaultsConfig(name="test", **FAULT_RATES)
    for task in {r["task_id"] for r in rows if step_of(r["attempt"]) == 0}:  # the tasks step 1 played
        for slot in range(GROUP):  # its first group's slots: the stored attempts 0..3 of step 1
            if draw(faults, fault_seed(task, slot, 0), "db", 0) == "fail":
                first = [r for r in rows if (r["task_id"], r["attempt"], r["try"]) == (task, slot, 0)]
                assert [r["cause"] for r in first] == ["could not clone the task database: injected fault: db call "
                                                       "0 failed"], (task, slot, first)
    assert errors, "the injected faults hit no episode: the check would be empty"
    assert all(r["reward"] is None for r in errors)
    trained_seeds = {(row["task_id"], row["seed"]) for _, row in joined_tries(verl_run)}
    assert not trained_seeds & {(r["task_id"], r["seed"]) for r in errors}
    retried = [r for r in errors if any(o["task_id"] == r["task_id"] and o["attempt"] == r["attempt"]
                                        and o["try"] == r["try"] + 1 for o in rows)]
    assert retried  # an errored try was played again under the same attempt


def test_each_step_updated_the_model_and_synced_it_into_vllm(verl_run):
    metrics = step_metrics(verl_run["run"] / "verl")  # verl's file logger, over both starts of the run
    assert set(metrics) >= set(range(1, STEPS + 1)), sorted(metrics)
    for step, samples in rollouts(verl_run["run"]).items():
        groups = defaultdict(list)
        for sample in samples:
            groups[sample["uid"].rsplit("_", 2)[0]].append(sample["score"])
        signal_groups = sum(len(set(scores)) > 1 for scores in groups.values())
        grad = metrics[step]["actor/grad_norm"]
        # a step with a group of mixed verdicts has a gradient; one of only zero-variance groups has none
        assert (grad > 0) if signal_groups else (grad == 0), (step, grad, dict(groups))
        # the rollout's log-probs are the trained model's: the weights reached vLLM (tied embeddings untied)
        assert abs(metrics[step]["training/rollout_probs_diff_mean"]) < 1e-2, metrics[step]
        assert metrics[step]["timing_s/update_weights"] > 0  # the step's weights went into vLLM
        # the step's token budget held: no episode past its caps, no more tokens than the budget in the update
        assert metrics[step]["prompt_length/max"] <= PROMPT_TOKENS, metrics[step]
        assert metrics[step]["response_length/max"] <= RESPONSE_TOKENS, metrics[step]
        assert 0 < metrics[step]["perf/total_num_tokens"] <= STEP_TOKENS, metrics[step]
    # and at a start (the checkpoint's weights): the resumed start's two syncs at least (the killed start's
    # last log lines may be lost with it)
    log_text = (verl_run["run"] / "verl" / "main_ppo.log").read_text(errors="replace")
    assert log_text.count("update_weights done") >= STEPS


def test_the_merged_model_is_a_tbx_model_that_evaluates(verl_run, tmp_path):
    run = verl_run["run"]
    summary = json.loads((run / "train.json").read_text())
    if summary["updates"] == 0:  # every step's groups were zero-variance (a common draw at this size)
        # no update ran: tbx merged nothing and said so (in the job's log), and the command exited 4
        assert summary["final_model"] is None and summary["exit_code"] == EXIT_NO_UPDATE
        assert verl_run["second_exit"] == EXIT_NO_UPDATE and not (run / "final_model").exists()
        assert any("no update ran" in log.read_text() for log in (verl_run["root"] / "jobs").glob("*_log.err"))
        # verl's merger still makes a tbx model of the last checkpoint (the base weights, here)
        merge_checkpoint(run / "checkpoints", STEPS, run, environment() | cpu_environment(1, 2))
    final = run / "final_model"
    assert (final / "config.json").is_file() and list(final.glob("*.safetensors"))
    meta = json.loads((run / "run.json").read_text())
    assert meta["trainer"]["name"] == "verl" and meta["trainer"]["version"] == "0.9.1"
    assert meta["trainer"]["checkpoint"] == str(run / "checkpoints" / f"global_step_{STEPS}")
    evaluated = subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "stage=eval", "policy=model", f"model.path={final}",
         "model.name=smollm2-verl", "tasks=train_sample", "tasks.limit=1", "eval.attempts=1", "eval.max_turns=2",
         f"out_root={tmp_path}", "logger=none"], cwd=ROOT, env=environment(), capture_output=True, text=True,
        timeout=EVAL_TIMEOUT_S)
    assert evaluated.returncode == 0, (evaluated.stdout + evaluated.stderr)[-3000:]
    summaries = list(tmp_path.glob("eval-*/summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["episodes"] == 1, summary
