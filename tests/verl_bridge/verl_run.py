"""The verl run the verl_bridge tests share (marker `verl`: .venv-vllm): its pool, its command, its settings, and
what it left: the stored tries, verl's per-step rollout dump, each trajectory joined with the try behind it.
Import it after `pytest.importorskip("verl")`."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tbx.episodes.seeds import rollout_seed
from tbx.errors import EXIT_NO_UPDATE
from tbx.store.training import STEP_STRIDE, step_of
from tbx.verl_bridge.launch import step_metrics, step_times

ROOT = Path(__file__).resolve().parents[2]
# two easy training tasks the embedded model solves now and then (a probe of 4 attempts: 1 of 4 each)
POOL = ("helpdesk/set_priority_easy/s0-00", "hr_payroll/withdraw_expense_easy/s0-00")
GROUP, GROUPS, STEPS, RETRIES = 4, 1, 2, 2  # one group a step: the CI budget (a step of 2 groups took 221 s)
# The token budget of a step: every episode's first prompt and its whole response stream (tool results and user
# replies included) are capped (the launch-time prompt check; the agent loop's TokenTrace ends the episode when
# its response budget is spent), so a step's update processes at most STEP_TOKENS tokens (test_verl_cpu), one episode per
# micro-batch (ppo_max_token_len_per_gpu = PROMPT_TOKENS + RESPONSE_TOKENS), whatever verl samples.
PROMPT_TOKENS, RESPONSE_TOKENS = 1536, 512
ERRORS = ("infra_error", "user_sim_error", "verifier_error")
# Faults are drawn from each try's task and stored attempt (tbx.episodes.seeds.verl_fault_seed), so which ones
# hit is known before the run: with this seed the clone of one step-1 try 0 of each pool task fails (helpdesk
# slot 0, hr_payroll slot 2), whatever the model does; tool, user and the grader's reads add drawn ones.
FAULT_RATES = {"tool": 0.1, "user": 0.05, "db": 0.1, "hang": 0.0, "seed": 1}
FAULTS = tuple(f"faults.{site}={rate}" for site, rate in FAULT_RATES.items())


def write_pool(path: Path, pool: str = "full_param", finetune: str = "full") -> Path:
    """The pool manifest stage=select would write for two easy training tasks."""
    from tbx.config import TasksConfig, plain
    from tbx.records import PoolManifest, PoolTask

    tasks = plain(TasksConfig(name="train_sample", domains=["helpdesk", "hr_payroll", "clinic"], split="train",
                              families=["set_priority_easy", "close_ticket_easy", "cancel_leave_easy",
                                        "withdraw_expense_easy", "cancel_appointment_easy", "check_in_easy"],
                              per_family=2))
    manifest = PoolManifest(kept=tuple(sorted(POOL)), pool={"name": pool, "finetune": finetune},
                            tasks=tuple(PoolTask(t, t.split("/")[0], t.split("/")[1], band="medium", kept=True)
                                        for t in sorted(POOL)),
                            probe_settings={"tasks": tasks}).sealed()
    path.write_text(json.dumps(manifest.to_dict(), indent=2))
    return path


def train_command(root: Path, pool: Path) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), "stage=train", "grpo.trainer=verl", f"train.pool={pool}",
            "grpo=cpu_small", f"grpo.groups_per_step={GROUPS}", f"grpo.group_size={GROUP}", f"grpo.steps={STEPS}",
            "grpo.save_every=1", "grpo.max_replacements=1", "model.max_new_tokens=96", f"grpo.max_error_retries={RETRIES}",
            f"grpo.max_prompt_tokens={PROMPT_TOKENS}", f"grpo.max_response_tokens={RESPONSE_TOKENS}", "eval.max_turns=3",
            *FAULTS, "hardware=local_jobs",
            f"out_root={root / 'out'}", f"launcher.folder={root / 'jobs'}", "logger=none"]


def environment() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def run_dir_of(root: Path) -> Path | None:
    found = sorted((root / "out").glob("train-*"))
    return found[0] if found else None


def stored_rows(run: Path) -> list[dict]:
    with sqlite3.connect(run / "results.sqlite", timeout=30) as conn:
        return [json.loads(blob) for (blob,) in conn.execute("select record from attempts order by attempt, try_index")]


def rollouts(run: Path, padding: bool = False) -> dict[int, list[dict]]:
    """verl's dump of what each step trained on: {step: [{uid, gts (task id), score, ...}]}. verl fills a batch
    whose size its mini-batches do not divide (a session whose every try errored leaves one trajectory out) with
    no-op samples of uid `pad…` (verl/trainer/ppo/padding_utils.py); `padding=True` gives those instead."""
    return {int(path.stem): [sample for sample in map(json.loads, filter(str.strip, path.read_text().splitlines()))
                             if sample["uid"].startswith("pad") == padding]
            for path in (run / "verl" / "rollouts").glob("*.jsonl")}


def joined_tries(verl_run, max_staleness: int = 0) -> list[tuple[dict, dict]]:
    """Each trajectory verl trained on, with the stored try that produced it (the try's seed is derived
    from verl's prompt uid, its session and the try index: tbx.episodes.seeds.rollout_seed). A try is
    stored under the step its group was dispatched in: the trained step, or up to `max_staleness` before."""
    rows = stored_rows(verl_run["run"])
    by_seed = defaultdict(list)
    for row in rows:
        by_seed[(row["task_id"], row["seed"])].append(row)
    joined = []
    for step, samples in rollouts(verl_run["run"]).items():
        for sample in samples:
            uid, session, _ = sample["uid"].rsplit("_", 2)
            found = [row for t in range(RETRIES + 1)
                     for row in by_seed[(sample["gts"], rollout_seed(uid, int(session), t))]
                     if step - 1 - max_staleness <= step_of(row["attempt"]) <= step - 1]
            assert len(found) >= 1, f"step {step}: no stored try for {sample['uid']} ({sample['gts']})"
            verdicts = [row for row in found if row["outcome"] not in ERRORS]
            assert len(verdicts) == 1, f"step {step}: {len(verdicts)} verdict tries for {sample['uid']}"
            joined.append((sample, verdicts[0]))
    return joined


def step2_started(root: Path) -> bool:
    """Step 1's checkpoint is complete and an episode of step 2 is stored."""
    run = run_dir_of(root)
    if run is None or not (run / "checkpoints" / "latest_checkpointed_iteration.txt").is_file():
        return False
    if (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() != "1":
        return False
    with sqlite3.connect(run / "results.sqlite", timeout=30) as conn:
        return conn.execute("select count(*) from attempts where attempt >= ?", (STEP_STRIDE,)).fetchone()[0] > 0


def step_report(root: Path) -> str:
    """verl's logged steps, slowest first, with their phases (a step still running is not logged yet)."""
    run = run_dir_of(root)
    lines = step_times(step_metrics(run / "verl")) if run is not None else []
    return "\n".join(["verl steps, slowest first:", *(lines or ["none logged"])])


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def run_processes(run: Path) -> list[int]:
    """Processes of this run still alive (verl's driver, Ray daemons of its session, vLLM)."""
    out = subprocess.run(["pgrep", "-f", str(run)], capture_output=True, text=True, check=False).stdout
    return [int(pid) for pid in out.split() if int(pid) != os.getpid()]


def killed_in_step2_and_resumed(root: Path, command: list[str], budget_s: float, request) -> dict:
    """Run `command`, SIGKILL its process group once step 1's checkpoint is written and step 2 has stored an
    episode, then run it again to the end, both starts within `budget_s`; what the run left (each step's
    time is printed, slowest first, through pytest's reporter)."""
    log, timings = root / "first.log", {}
    started = time.monotonic()
    deadline = started + budget_s
    with log.open("w") as out:
        first = subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            while not step2_started(root):
                if first.poll() is not None:
                    pytest.fail(f"the run ended ({first.returncode}) before an episode of step 2:\n{tail(log)}\n"
                                f"{step_report(root)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"no episode of step 2 within the run's budget of {budget_s:.0f} s:\n{tail(log)}\n"
                                f"{step_report(root)}")
                time.sleep(2.0)
        finally:
            os.killpg(first.pid, signal.SIGKILL)  # launch.py, the submitit job, verl's driver: the job's group
            first.wait()
    timings["until_killed_s"] = time.monotonic() - started
    run = run_dir_of(root)
    assert run is not None
    gone_by = time.monotonic() + 120  # Ray's daemons die with the job's Ray node (parent-death signal)
    while run_processes(run) and time.monotonic() < gone_by:
        time.sleep(1.0)
    left = run_processes(run)
    before_resume = stored_rows(run)
    started = time.monotonic()
    with (root / "second.log").open("w") as out:
        second = subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            second.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
            pytest.fail(f"the resumed run did not end within the run's budget of {budget_s:.0f} s:\n"
                        f"{tail(root / 'second.log')}\n{step_report(root)}")
    timings["resumed_run_s"] = time.monotonic() - started
    second_out = (root / "second.log").read_text(errors="replace")
    report = step_report(root)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # shown whether or not pytest captures output
        reporter.write_line(f"\n{report}\n(run: {timings['until_killed_s']:.0f} s until killed, resumed start "
                            f"{timings['resumed_run_s']:.0f} s)")
    # 4 (EXIT_NO_UPDATE): no step drew a group of mixed verdicts, so nothing was merged (2 of 4 runs here)
    assert second.returncode in (0, EXIT_NO_UPDATE), second_out[-4000:]
    return {"root": root, "run": run, "left_after_kill": left, "before_resume": before_resume,
            "second": second_out, "second_exit": second.returncode, "timings": timings,
            "report": report}
