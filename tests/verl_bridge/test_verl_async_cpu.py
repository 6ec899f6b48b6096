"""verl 0.9.1's asynchronous trainer trains on tbx episodes on this CPU machine (marker `verl`: .venv-vllm).

`launch.py stage=train grpo.trainer=verl grpo.max_staleness=1`, otherwise the run of test_verl_cpu.py (the
same pool, faults, token budget and `hardware=local_jobs` path: submitit job → Ray head → verl's
`main_ppo`), on verl's V1 trainer in `colocate_async` mode (tbx/verl_bridge/async_overrides.py): one batch
of groups is dispatched before step 1, each step trains on the first groups that finish (oldest first) and
dispatches the next batch; at the end of sampling verl aborts the requests still generating, syncs the
weights, and resumes them on the new weights (partial rollout), so a step may train on groups one version
old and on episodes that span two versions. Zero-variance groups are not replaced (`grpo.replace_zero_variance=
false`), so step 2 can train the older group whatever its verdicts. Not killed (resuming an asynchronous run is another
test's).

It takes about 7 minutes on an idle 2-core machine (docs/training.md, "verl's asynchronous mode") and runs
with TBX_VERL_RUN=all (TBX_VERL_RUN=all .venv-vllm/bin/python -m pytest -m verl
tests/verl_bridge/test_verl_async_cpu.py). Each test reads what the run left: the results store, verl's
rollout dump per step, its metrics and its log.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from tbx.errors import EXIT_NO_UPDATE
from tbx.store.training import step_of
from tbx.verl_bridge.launch import step_metrics, step_times
from tests.verl_bridge import (
    verl_run as shared,  # the pool, the command and the readers of test_verl_cpu's run
)

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") != "all",
                                 reason="the asynchronous verl run (about 7 minutes) runs with TBX_VERL_RUN=all")]
STALENESS = 1
RUN_BUDGET_S = 25 * 60.0
_ABORTED = re.compile(r"Aborted (\d+) requests")


@pytest.fixture(scope="module")
def async_run(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("verl-async")
    pool = shared.write_pool(root / "pool.json")
    # zero-variance groups stay in the batch (this model rarely solves a task, and a replaced group is never trained
    # on): the group dispatched for step 1 that did not finish first can then be the one step 2 trains on
    command = shared.train_command(root, pool) + [f"grpo.max_staleness={STALENESS}", "grpo.replace_zero_variance=false"]
    try:
        done = subprocess.run(command, cwd=shared.ROOT, env=shared.environment(), capture_output=True, text=True,
                              timeout=RUN_BUDGET_S)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the asynchronous run did not end within {RUN_BUDGET_S:.0f} s:\n{str(expired.stdout)[-3000:]}")
    run = shared.run_dir_of(root)
    assert run is not None, done.stdout[-3000:] + done.stderr[-3000:]
    log = (run / "verl" / "main_ppo.log").read_text(errors="replace")
    assert done.returncode in (0, EXIT_NO_UPDATE), done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    metrics = step_metrics(run / "verl")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\nverl's asynchronous steps, slowest first:\n" + "\n".join(step_times(metrics)))
    return {"root": root, "run": run, "log": log, "metrics": metrics}


def test_the_run_trained_its_steps_on_verls_asynchronous_trainer(async_run):
    run, metrics = async_run["run"], async_run["metrics"]
    assert "'trainer_mode': 'colocate_async'" in async_run["log"]  # verl's resolved config, as it printed it
    assert "Added 1 warmup prompts" in async_run["log"]  # s = 1 batch dispatched ahead of step 1
    summary = json.loads((run / "train.json").read_text())
    assert summary["trained_steps"] == shared.STEPS and summary["trainer"] == "verl"
    assert set(metrics) >= set(range(1, shared.STEPS + 1)), sorted(metrics)
    for step in range(1, shared.STEPS + 1):
        assert metrics[step]["timing_s/update_weights"] > 0  # each step's weights went into vLLM
        assert abs(metrics[step]["training/rollout_probs_diff_mean"]) < 1e-2, metrics[step]


def test_staleness_and_interrupted_episodes_agree_with_where_each_trained_group_was_dispatched(async_run):
    """Step 1 trains the first of the two groups dispatched before it to finish. Step 2 trains the older one when
    it finishes before the group step 2 dispatched (usually: it had a step's head start; a session re-playing
    errored tries can hold it back). verl's staleness of what a step trained must match the dispatch step tbx
    stored its episodes under, and an older group whose requests step 1's sync aborted must contain episodes
    that span that sync: they went on, on the new weights (partial rollout)."""
    metrics = async_run["metrics"]
    aborted = [int(n) for n in _ABORTED.findall(async_run["log"])]
    assert len(aborted) == shared.STEPS and max(aborted) >= 1, aborted  # the syncs aborted requests generating
    dispatched = defaultdict(set)  # trained step -> the steps its groups were dispatched in (the stored attempts)
    for sample, row in shared.joined_tries(async_run, max_staleness=STALENESS):
        dispatched[sample["step"]].add(step_of(row["attempt"]) + 1)
    for step in range(1, shared.STEPS + 1):
        lag = {step - d for d in dispatched[step]}
        assert lag and max(lag) <= STALENESS, (step, dispatched[step])
        assert metrics[step]["training/off_policy/trajectory_staleness_worst/max"] == max(lag), (step, metrics[step])
        assert metrics[step]["training/off_policy/trajectory_spans/max"] <= STALENESS + 1, metrics[step]
    stale = max(shared.STEPS - d for d in dispatched[shared.STEPS]) == STALENESS
    if stale and aborted[0] >= 1:
        assert metrics[shared.STEPS]["training/off_policy/trajectory_spans/max"] == 2, metrics[shared.STEPS]
    reporter_note = "older group trained at step 2" if stale else "step 2 trained the group it dispatched"
    print(f"{reporter_note}; aborted at the syncs: {aborted}")


def test_each_episode_is_stored_once_and_trained_on_with_its_stored_verdict(async_run):
    run = async_run["run"]
    rows = shared.stored_rows(run)
    with sqlite3.connect(run / "results.sqlite", timeout=30) as conn:
        run_ids = {run_id for (run_id,) in conn.execute("select distinct run_id from attempts")}
    assert run_ids == {json.loads((run / "run.json").read_text())["identity"]}
    keys = Counter((r["task_id"], r["attempt"], r["try"]) for r in rows)
    assert keys and max(keys.values()) == 1
    joined = shared.joined_tries(async_run, max_staleness=STALENESS)  # each trajectory: exactly one verdict try
    assert joined and all(sample["score"] == row["reward"] for sample, row in joined)
    assert len({(row["task_id"], row["attempt"]) for _, row in joined}) == len(joined)  # no episode trained twice
    steps = shared.rollouts(run)
    assert sorted(steps) == list(range(1, shared.STEPS + 1))
    for samples in steps.values():
        groups = defaultdict(list)
        for sample in samples:
            groups[sample["uid"].rsplit("_", 2)[0]].append(sample)
            assert sample["gts"] in shared.POOL
        # whole groups only: the asynchronous sampler drops a group with a failed session instead of padding it
        whole = all(len(group) == shared.GROUP for group in groups.values())
        assert len(groups) == shared.GROUPS and whole, dict(groups)
    assert not shared.rollouts(run, padding=True) or not any(shared.rollouts(run, padding=True).values())


def test_error_episodes_are_never_trained_on_or_scored(async_run):
    rows = shared.stored_rows(async_run["run"])
    errors = [r for r in rows if r["outcome"] in shared.ERRORS]
    assert errors, "the injected faults hit no episode: the check would be empty"
    assert all(r["reward"] is None for r in errors)
    trained = {(row["task_id"], row["seed"]) for _, row in shared.joined_tries(async_run, max_staleness=STALENESS)}
    assert not trained & {(r["task_id"], r["seed"]) for r in errors}


def test_the_run_folder_keeps_verls_command_with_tbxs_asynchronous_keys(async_run):
    command = Path(async_run["run"] / "verl" / "command.sh").read_text()
    for key in ("trainer.v1.trainer_mode=colocate_async", "TbxAsyncReplayBuffer",
                "max_off_policy_threshold=2", "tbx.verl_bridge.vllm_pause"):
        assert key in command
