"""Campaigns over worker processes: the same verdicts as one process; each attempt played once, by a
worker; a SIGKILLed multi-worker campaign takes its workers along and resumes with nothing lost or run
twice; the default number of workers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tbx.campaign.workers import MIN_ATTEMPTS_PER_WORKER, plan_workers
from tbx.errors import ConfigError
from tbx.store.results import read_records
from tests.hardening.kill_harness import COIN, compare_attempts, integrity, stored_rows
from tests.helpers.stage import make_cfg, run

ROOT = Path(__file__).resolve().parents[2]
def finals(run_dir: Path) -> dict:
    return {(r.task_id, r.attempt): (r.outcome, r.reward, r.final_delta, r.grade, r.transcript, r.counts)
            for r in read_records(run_dir)}


def test_two_workers_store_the_verdicts_one_process_stores(tmp_path):
    args = ("tasks=travel", "tasks.limit=12", *COIN, "eval.attempts=6", "eval.concurrency=3")
    one = run(make_cfg(tmp_path, *args, "eval.workers=1", f"run_dir={tmp_path / 'one'}"))
    two = run(make_cfg(tmp_path, *args, "eval.workers=2", f"run_dir={tmp_path / 'two'}"))
    stored = finals(tmp_path / "two")
    assert len(stored) == 72 and stored == finals(tmp_path / "one")
    assert 0 < two.counts["success"] < 72 and (one.pass_at_1, one.counts) == (two.pass_at_1, two.counts)


def test_each_attempt_is_played_once_by_one_of_the_workers(tmp_path):
    log = tmp_path / "episodes.log"
    cfg = make_cfg(tmp_path, "tasks=mock", "policy._target_=tests.stages.clock.ClockPolicy", "policy.name=clock",
                   f"+extra.episode_log={log}", "+extra.turn_delay_s=0.01", "+extra.peers=2", "eval.attempts=16",
                   "eval.workers=2")
    summary = run(cfg)
    played = [line.split() for line in log.read_text().splitlines()]
    by_process = Counter(pid for pid, _, _ in played)
    assert len(played) == 48 and len({(task, attempt) for _, task, attempt in played}) == 48
    assert len(by_process) == 2 and str(__import__("os").getpid()) not in by_process
    assert summary.episodes == 48 and len(read_records(summary.run_dir)) == 48


def launch(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_a_killed_multi_worker_campaign_takes_its_workers_along_and_resumes(tmp_path):
    args = ["stage=eval", "tasks=travel", "tasks.limit=12", *COIN, "eval.attempts=8", "eval.concurrency=2",
            "logger=none", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db"]
    clean = launch([*args, "eval.workers=1", f"run_dir={tmp_path / 'clean'}"])
    assert clean.wait(timeout=300) == 0, clean.stderr.read()[-2000:]
    killed_dir, kills = tmp_path / "killed", 0
    for wanted in (5, 40):  # kill once early in the work, once past its middle
        proc = launch([*args, "eval.workers=2", f"run_dir={killed_dir}"])
        workers: list[psutil.Process] = []
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and len(stored_rows(killed_dir)) < wanted:
            workers = psutil.Process(proc.pid).children() or workers
            time.sleep(0.05)
        if proc.poll() is not None:
            break
        assert len(workers) >= 2, "the campaign did not run over worker processes"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        # returns once they are gone (at once here); the bound is for a loaded machine, where a worker still
        # importing when its parent died only ends at its first look (tbx.campaign.workers.follow_parent)
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"workers outlived their killed parent: {alive}"
    assert kills == 2
    done = launch([*args, "eval.workers=2", f"run_dir={killed_dir}"])
    assert done.wait(timeout=300) == 0, done.stderr.read()[-2000:]
    figures = compare_attempts(stored_rows(tmp_path / "clean"), stored_rows(killed_dir))
    assert figures["expected"] == 96 and figures["lost"] == figures["duplicated"] == figures["verdicts_differ"] == 0
    assert stored_rows(killed_dir) == stored_rows(tmp_path / "clean") and integrity(killed_dir) == "ok"


@pytest.mark.parametrize(("overrides", "pending", "cores", "expected"), [
    (("policy=oracle",), 10_240, 2, 2),  # the harness sets the pace: every core
    (("policy=oracle",), 10_240, 16, 16),
    (("policy=oracle",), MIN_ATTEMPTS_PER_WORKER * 3 - 1, 16, 2),  # a worker only for every 64 attempts
    (("policy=oracle",), 20, 16, 1),
    (("policy=oracle", "eval.workers=3"), 20, 2, 3),  # as told
    (("policy=oracle", "eval.workers=3"), 2, 2, 2),  # never more than attempts
    (COIN, 10_240, 16, 1),  # another policy (a model's server sets the pace): this process
])
def test_the_default_number_of_workers(tmp_path, monkeypatch, overrides, pending, cores, expected):
    monkeypatch.setattr("tbx.campaign.workers.available_cores", lambda: cores)
    assert plan_workers(make_cfg(tmp_path, *overrides), pending) == expected


def test_workers_with_a_model_tbx_serves_itself_are_refused(tmp_path):
    from tbx.campaign.workers import check_workers

    with pytest.raises(ConfigError, match="eval.workers"):
        check_workers(make_cfg(tmp_path, "policy=model", "eval.workers=2"))
    check_workers(make_cfg(tmp_path, "policy=model", "eval.workers=2", "model.endpoint.base_url=http://x:1/v1"))


def campaign_workers(parent: int) -> list[psutil.Process]:
    """The campaign's worker processes (spawned children running multiprocessing's spawn entry; not the
    resource tracker)."""
    found = []
    for child in psutil.Process(parent).children():
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # ended meanwhile
            continue
    return found


def test_a_worker_killed_by_the_kernel_ends_in_one_line_and_the_same_command_resumes(tmp_path):
    run_dir = tmp_path / "run"
    args = ["stage=eval", "tasks=mock", "policy._target_=tests.launch.SlowCoinPolicy", "policy.name=slowcoin",
            "+extra.turn_delay_s=0.3", "eval.attempts=4", "eval.concurrency=1", "eval.workers=2", "logger=none",
            f"run_dir={run_dir}",
            f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db"]
    proc = launch(args)
    deadline, workers = time.monotonic() + 240, []
    # the event: both workers started and a first try stored (so the campaign is under way), never a fixed sleep
    while proc.poll() is None and time.monotonic() < deadline and not (len(workers) == 2 and stored_rows(run_dir)):
        workers = campaign_workers(proc.pid) if len(workers) < 2 else workers
        time.sleep(0.05)
    assert proc.poll() is None and len(workers) == 2, "the campaign ended before a worker could be killed"
    workers[0].send_signal(signal.SIGKILL)  # what the out-of-memory killer does
    rc, err = proc.wait(timeout=120), proc.stderr.read()
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]  # progress bars aside
    assert rc == 130 and "Traceback" not in err, err[-3000:]  # before: the worker's traceback, exit 1
    assert len(lines) == 1 and re.match(r"interrupted: campaign worker tbx-worker-[01] \(pid \d+\)", lines[0]), lines
    assert "was killed by SIGKILL" in lines[0] and "the same command resumes the run" in lines[0]
    done = launch(args)
    assert done.wait(timeout=300) == 0, done.stderr.read()[-2000:]
    assert len({(task, attempt) for task, attempt, *_ in stored_rows(run_dir)}) == 3 * 4  # mock: 3 tasks
