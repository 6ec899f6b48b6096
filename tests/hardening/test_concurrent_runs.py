"""Two processes on one run (the same command started twice), with a policy whose verdict depends on
timing: every attempt is played once, by one of them, and has exactly one verdict; both print the
same summary, which agrees with the store. With the SQLite store (a file in the run folder) and with
the PostgreSQL store many jobs share (episode databases on PostgreSQL too).
"""

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tbx.store.results import read_records

ROOT = Path(__file__).resolve().parents[2]
TASKS, ATTEMPTS = 3, 8


def launch(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def test_two_processes_on_one_run_leave_one_verdict_per_attempt(tmp_path, request, kind):
    log, seed = tmp_path / "episodes.log", uuid.uuid4().int % 10**6  # a fresh run in a shared store
    args = ["stage=eval", "tasks=mock", "policy._target_=tests.stages.clock.ClockPolicy", "policy.name=clock",
            f"eval.attempts={ATTEMPTS}", "eval.concurrency=2", f"+extra.episode_log={log}", "logger=none",
            f"seed={seed}", f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db"]
    if kind == "postgres":
        url = request.getfixturevalue("pg_url")
        args += [f"store.url={url}", "backend=postgres", f"backend.url={url}"]
    procs = [launch([*args, f"summary_path={tmp_path}/summary{i}.json"]) for i in range(2)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in outs]
    summaries = [json.loads((tmp_path / f"summary{i}.json").read_text()) for i in range(2)]
    run_dir = Path(summaries[0]["run_dir"])
    run_id = json.loads((run_dir / "run.json").read_text())["identity"]
    stored = read_records(url if kind == "postgres" else run_dir, run_id)

    verdicts = Counter((r.task_id, r.attempt) for r in stored if r.outcome in ("success", "failure"))
    assert len(verdicts) == TASKS * ATTEMPTS and set(verdicts.values()) == {1}  # one verdict per attempt
    played = [line.split() for line in log.read_text().splitlines()]
    assert len(played) == len(stored)  # every episode played was stored, none twice
    assert len({(task, attempt) for _, task, attempt in played}) == len(played)
    for summary in summaries:  # both processes report what the store holds
        assert summary["counts"]["success"] == sum(r.outcome == "success" for r in stored)
        assert summary["episodes"] == TASKS * ATTEMPTS and summary["run_dir"] == str(run_dir)
    by_process = Counter(pid for pid, _, _ in played)
    print(f"{kind}: {len(played)} episodes for {TASKS * ATTEMPTS} attempts, by process {sorted(by_process.values())}; "
          f"notes: {[err.count('note: another process') for _, err in outs]}")
