"""A verl run whose rollout workers die mid-step ends, within `grpo.verl_stall_s`, instead of waiting forever
(marker `verl`: .venv-vllm).

The asynchronous run of test_verl_async_cpu.py (the same pool, command and faults), with a short stall bound.
Once step 1 has stored an episode, the test SIGKILLs what Ray's memory monitor killed in the runs that hung
(docs/training.md, "verl's asynchronous mode"): verl's vLLM server actor (with its engine), the agent-loop
worker and the request load balancer. The run must then end with an error within the bound plus the stop's
grace and a margin, and leave none of its processes behind; the test prints which path ended it (tbx's stall
bound, or verl failing on its own) and how long after the kill.

It takes about 5 minutes and runs with TBX_VERL_RUN=all (TBX_VERL_RUN=all .venv-vllm/bin/python -m pytest -m verl
tests/verl_bridge/test_verl_stall_cpu.py).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import psutil
import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from tbx.errors import EXIT_INFRA
from tbx.verl_bridge.launch import STOP_GRACE_S
from tests.verl_bridge import verl_run as shared

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TBX_VERL_RUN") != "all",
                                 reason="a verl run killed mid-step (about 5 minutes) runs with TBX_VERL_RUN=all")]
STALL_S = 120
START_BUDGET_S = 15 * 60.0  # until step 1 stores an episode
KILLED = ("vLLMHttpServer", "AgentLoopWorker", "GlobalRequestLoadBalancer")  # Ray actor process titles


def stored(root) -> int:
    run = shared.run_dir_of(root)
    if run is None or not (run / "results.sqlite").is_file():
        return 0
    with sqlite3.connect(run / "results.sqlite", timeout=30) as conn:
        try:
            return conn.execute("select count(*) from attempts").fetchone()[0]
        except sqlite3.OperationalError:  # the table is not created yet
            return 0


def rollout_workers() -> list[psutil.Process]:
    """verl's rollout actors on this machine, with their children (vLLM's engine core)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        if title.startswith("ray::") and any(name in title for name in KILLED):
            found += [process, *process.children(recursive=True)]
    return found


def test_a_run_whose_rollout_workers_die_ends_within_the_stall_bound(tmp_path, request):
    pool = shared.write_pool(tmp_path / "pool.json")
    command = shared.train_command(tmp_path, pool) + ["grpo.max_staleness=1", "grpo.replace_zero_variance=false",
                                                      f"grpo.verl_stall_s={STALL_S}"]
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(command, cwd=shared.ROOT, env=shared.environment(), stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + START_BUDGET_S
            while stored(tmp_path) == 0:
                if run.poll() is not None:
                    pytest.fail(f"the run ended ({run.returncode}) before an episode was stored:\n{shared.tail(log)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"no episode stored within {START_BUDGET_S:.0f} s:\n{shared.tail(log)}")
                time.sleep(2.0)
            victims = rollout_workers()
            assert victims, "no verl rollout actor found to kill"
            for process in victims:
                try:
                    process.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            killed_at = time.monotonic()
            bound = STALL_S + STOP_GRACE_S + 30 + 180  # the bound, the stop's grace, one poll, a margin for the merge
            try:
                code = run.wait(timeout=bound)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the run did not end within {bound:.0f} s of its rollout workers' death:\n"
                            f"{shared.tail(log)}")
            ended_after = time.monotonic() - killed_at
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    output = "".join(path.read_text(errors="replace") for path in [log, *sorted((tmp_path / "jobs").glob("*_log.*"))])
    by_bound = "(grpo.verl_stall_s)" in output
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nkilled {len(victims)} processes after {stored(tmp_path)} stored tries; the run ended "
                            f"{ended_after:.0f} s later with status {code}, "
                            f"{'stopped by grpo.verl_stall_s' if by_bound else 'verl failing on its own'}")
    assert code == EXIT_INFRA, shared.tail(log)  # a failed service, not bad input: the same command resumes
    assert by_bound or "verl's trainer exited with status" in output, shared.tail(log, 80)
    gone_by = time.monotonic() + 120
    while (left := shared.run_processes(shared.run_dir_of(tmp_path))) and time.monotonic() < gone_by:
        time.sleep(1.0)
    assert not left, f"processes of the run left behind: {left}"
