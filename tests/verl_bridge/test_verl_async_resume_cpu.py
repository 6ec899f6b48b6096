"""A killed asynchronous verl run resumes with every try stored once (marker `verl`: .venv-vllm).

The run of test_verl_async_cpu.py (`grpo.max_staleness=1`, verl's `colocate_async` trainer, zero-variance
groups kept) SIGKILLed as test_verl_cpu.py's is: once step 1's checkpoint is written and step 2 has stored an
episode, then started again to the end. verl's asynchronous checkpoint keeps the groups still in flight
(TransferQueue) and the resumed start re-issues them under step 2 with their prompt uid; tbx discards the
killed start's tries of step 2 and of every re-issued session (`tbx.verl_bridge.recorder`), so no try is
stored twice and every trajectory verl trained on joins exactly one stored verdict.

About 10 minutes on an idle 2-core machine; runs with TBX_VERL_RUN=all (TBX_VERL_RUN=all .venv-vllm/bin/python
-m pytest -m verl tests/verl_bridge/test_verl_async_resume_cpu.py).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from tbx.store.training import step_of
from tests.verl_bridge.verl_run import (
    ERRORS,
    STEPS,
    joined_tries,
    killed_in_step2_and_resumed,
    rollouts,
    stored_rows,
    train_command,
    write_pool,
)

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") != "all",
                                 reason="the killed asynchronous verl run (about 10 minutes) runs with TBX_VERL_RUN=all")]
STALENESS = 1
RUN_BUDGET_S = 30 * 60.0
_REISSUED = re.compile(r"Re-issued (\d+) in-flight prompts")


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("verl-async-resume")
    pool = write_pool(root / "pool.json")
    command = train_command(root, pool) + [f"grpo.max_staleness={STALENESS}", "grpo.replace_zero_variance=false"]
    made = killed_in_step2_and_resumed(root, command, RUN_BUDGET_S, request)
    log = (made["run"] / "verl" / "main_ppo.log").read_text(errors="replace")  # both starts, appended
    made["reissued"] = sum(int(n) for n in _REISSUED.findall(log))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"prompt groups re-issued by the resumed start: {made['reissued']}")
    return made


def test_the_killed_asynchronous_run_resumed_and_trained_every_step(resumed_run):
    run = resumed_run["run"]
    assert resumed_run["left_after_kill"] == []
    assert "resuming after step 1" in resumed_run["second"]
    summary = json.loads((run / "train.json").read_text())
    assert summary["trained_steps"] == STEPS and summary["trainer"] == "verl"


def test_no_try_is_stored_twice(resumed_run):
    rows = stored_rows(resumed_run["run"])
    # a try is its task, its seed (drawn from verl's prompt uid and session) and its try index: a session
    # replayed after the kill (a re-issued group's) has the killed start's seed
    plays = Counter((r["task_id"], r["seed"], r["try"]) for r in rows)
    assert max(plays.values()) == 1, [key for key, n in plays.items() if n > 1]
    assert max(Counter((r["task_id"], r["attempt"], r["try"]) for r in rows).values()) == 1
    # what the killed start stored for step 2 was discarded before the resumed start played step 2
    killed_step2 = {(r["task_id"], r["seed"]) for r in resumed_run["before_resume"] if step_of(r["attempt"]) >= 1}
    kept = {(r["task_id"], r["seed"]) for r in rows}
    assert killed_step2 and not killed_step2 & kept


def test_every_trained_trajectory_joins_one_stored_verdict_and_no_error_is_trained(resumed_run):
    joined = joined_tries(resumed_run, max_staleness=STALENESS)
    assert sorted(rollouts(resumed_run["run"])) == list(range(1, STEPS + 1))
    assert joined and all(sample["score"] == row["reward"] for sample, row in joined)
    assert all(row["outcome"] not in ERRORS for _, row in joined)
    trained = Counter((row["task_id"], row["seed"]) for _, row in joined)
    assert max(trained.values()) == 1  # no episode trained twice
