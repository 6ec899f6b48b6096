"""Against a real single-node Slurm (scripts/slurm_local.sh): a probe campaign as a job array, a
preempted shard that requeues and resumes, a cancelled shard whose work the final job finishes,
and a 2-task job that brings up a Ray head and worker and runs remote functions on both.

A session fixture (tests/conftest.py) uses a cluster that already answers `sinfo`, or starts one (installing the
Debian packages if needed; root only) and stops it afterwards. Where Slurm cannot start the tests
skip with the script's reason; TBX_REQUIRE_SLURM=1 (CI) turns that into a failure. There is no
slurmdbd here, so submitit cannot see a job that died without a result: every wait has a time-out.
"""

import os
import sqlite3
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from tbx.catalog import resolve_tasks
from tbx.launch import make_plan
from tbx.launch.dispatch import RayJob, submit, wait
from tbx.launch.ray_cluster import RaySpec
from tbx.store.results import read_records
from tests.helpers.slurm import job_field
from tests.launch import compose_cfg, probe_overrides

pytestmark = [pytest.mark.slurm, pytest.mark.integration]


def stored(run_dir) -> list[tuple[str, int, int]]:
    return [(r.task_id, r.attempt, r.try_index) for r in read_records(run_dir)]


def slurm_cfg(tmp_path, *extra):
    return compose_cfg(*probe_overrides(tmp_path, "tasks=travel", "probe.adaptive=false", "hardware=slurm_local",
                                        f"launcher.folder={tmp_path}/jobs", *extra))


def test_probe_campaign_as_a_job_array_lands_in_one_store(slurm, tmp_path):
    cfg = slurm_cfg(tmp_path, "tasks.limit=9", "probe.attempts=3", "launcher.shards=3")
    submission = submit(cfg, make_plan(cfg, n_tasks=9))
    array_id = submission.shards[0].job_id.split("_")[0]
    assert [job.job_id for job in submission.shards] == [f"{array_id}_{i}" for i in range(3)]  # one array
    script = Path(submission.final.paths.submission_file).read_text()
    assert f"#SBATCH --dependency=afterany:{array_id}" in script  # queued behind the whole array at once
    summary = wait(submission, timeout_s=150)
    keys = stored(summary.run_dir)
    assert len(keys) == len(set(keys)) == 27  # 9 tasks x 3 attempts, each stored once
    assert summary.n_tasks == 9 and summary.episodes == 27
    assert [job_field(job.job_id, "JobState") for job in submission.shards] == ["COMPLETED"] * 3
    started = datetime.fromisoformat(job_field(submission.final.job_id, "StartTime")).timestamp()
    with sqlite3.connect(Path(summary.run_dir) / "results.sqlite") as db:
        (last_write,) = db.execute("SELECT max(created_at) FROM attempts").fetchone()
    assert last_write < started + 1  # the array did all the work; the final job only summed it up


def _rows_by_shard(run_dirs, shards: list[set[str]]) -> list[int]:
    if not run_dirs or not (run_dirs[0] / "results.sqlite").exists():
        return [0] * len(shards)
    tally = Counter(task for task, _, _ in stored(run_dirs[0]))
    return [sum(tally[t] for t in ids) for ids in shards]


def _release_when_requeued(job_id: str, timeout_s: float) -> int:
    """Slurm holds a requeued job for ~2 minutes (BeginTime); start it sooner. Returns its restart
    count once it runs again (0 if it did not within the time-out).

    Not at once: the requeue revokes the job's credential, and slurmd refuses (and fails the job:
    "Killing non-startable batch JobId=N: Job credential revoked") a launch whose credential was made
    in the same second as that revocation (one release in four on a loaded machine did). Releasing
    two seconds after the requeue was first seen leaves that second behind."""
    deadline, requeued_at = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        state, restarts = job_field(job_id, "JobState"), int(job_field(job_id, "Restarts") or 0)
        if restarts and state == "PENDING":
            requeued_at = requeued_at or time.monotonic()
            if time.monotonic() - requeued_at >= 2:
                subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True,
                               check=False)
        elif requeued_at and state in ("RUNNING", "COMPLETED"):  # (Restarts counts up while it still runs)
            return restarts
        time.sleep(0.3)
    return 0


def test_preempted_shard_resumes_and_the_final_job_finishes_a_cancelled_one(slurm, tmp_path, capfd):
    # 4 tasks x 4 attempts per shard, one episode at a time, 0.3 s a turn: > 10 s of work per shard, so
    # the cancelled one is still busy when Slurm's KillWait (5 s) ends (submitit ignores the SIGTERM)
    cfg = slurm_cfg(tmp_path, "tasks.limit=8", "probe.attempts=4", "eval.concurrency=1", "launcher.shards=2",
                    "policy._target_=tests.launch.SlowCoinPolicy", "+extra.turn_delay_s=0.3")
    ids = [t.id for t in resolve_tasks(cfg.tasks)]
    shards = [set(ids[0::2]), set(ids[1::2])]  # what job i runs: eval.shard=i of 2
    submission = submit(cfg, make_plan(cfg, n_tasks=8))
    preempted, cancelled = submission.shards
    deadline = time.monotonic() + 90
    while min(rows := _rows_by_shard(list((tmp_path / "outputs").glob("probe-*")), shards)) == 0:
        assert time.monotonic() < deadline, f"the shards did not start storing: {rows}"
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR2", preempted.job_id], check=True)  # as before a preemption
    subprocess.run(["scancel", cancelled.job_id], check=True)  # killed: no checkpoint, no requeue
    assert rows[1] < 16, "the cancelled shard had already finished; slow the policy down"
    assert _release_when_requeued(preempted.job_id, 60) == 1
    summary = wait(submission, timeout_s=150)
    keys = stored(summary.run_dir)
    assert len(keys) == len(set(keys))  # resumed, not repeated: no (task, attempt, try) twice
    assert sorted({(t, a) for t, a, _ in keys}) == sorted((t, a) for t in ids for a in range(4))
    assert summary.episodes == 32
    log = preempted.stderr() or ""
    assert "this job is preempted" in log and f"Requeued job {preempted.job_id}" in log
    assert job_field(cancelled.job_id, "JobState") == "CANCELLED"
    assert f"shard job {cancelled.job_id} did not finish" in capfd.readouterr().err


def ray_nodes_report() -> dict:
    """Runs on the Ray head: one remote call pinned to every alive node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init()  # RAY_ADDRESS points at the job's cluster
    try:
        alive = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])

        @ray.remote(num_cpus=1)
        def where() -> tuple[str, str | None]:
            return ray.get_runtime_context().get_node_id(), os.environ.get("RAY_AUTH_MODE")

        calls = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                 for node in alive]
        return {"alive": alive, "ran": ray.get(calls)}
    finally:
        ray.shutdown()


def test_two_task_job_brings_up_ray_head_and_worker_and_tears_them_down(slurm, tmp_path):
    pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[cluster]' (plain `ray`, ~80 MB)")
    cfg = compose_cfg("hardware=slurm_local", "hardware.tasks_per_node=2", f"out_root={tmp_path}",
                      f"launcher.folder={tmp_path}/jobs")
    plan = make_plan(cfg)
    submission = submit(cfg, plan, RayJob(ray_nodes_report, (), plan, cfg.hardware.ray_auth_mode))
    report = wait(submission, timeout_s=150)
    assert len(report["alive"]) == 2  # head (rank 0) and worker (rank 1)
    assert sorted(node for node, _ in report["ran"]) == report["alive"]
    assert {auth for _, auth in report["ran"]} == {"token"}  # the same RAY_AUTH_MODE on every process
    rendezvous = tmp_path / "jobs" / f"ray-{submission.final.job_id}-0-0"  # first attempt, no Slurm restart
    assert (rendezvous / "auth_token").stat().st_mode & 0o077 == 0  # the token file is private
    temp_dir = RaySpec(2, 1, 0, "token", rendezvous).temp_dir
    left = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True, check=False).stdout.split()
    assert not left and not Path(temp_dir).exists()  # nothing of this cluster outlives the job
