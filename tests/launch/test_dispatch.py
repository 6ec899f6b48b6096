"""Dispatch without Slurm: the in-process default, shards and their final job, the local executor
with a preempted shard, the Slurm parameters as submitit writes them, and launch.py end to end."""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit

from tbx.errors import ConfigError
from tbx.launch import dispatch, make_plan
from tbx.launch.dispatch import StageFailure, submit, wait
from tbx.launch.plan import executor_parameters
from tbx.launch.ray_cluster import RaySpec, auth_env, head_command, run_on_ray_cluster, worker_command
from tbx.store.results import read_records
from tests.launch import ROOT, compose_cfg, probe_overrides


def stored_keys(run_dir):
    return [(r.task_id, r.attempt, r.try_index) for r in read_records(run_dir)]


def test_default_runs_the_stage_in_this_process(tmp_path):
    cfg = compose_cfg("tasks=mock", "policy=oracle", f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db")
    summary = dispatch(cfg, make_plan(cfg))
    assert summary.pass_at_1 == 1.0 and summary.n_tasks == 3
    assert not (tmp_path / "out" / "jobs").exists()  # no job files: nothing was submitted elsewhere


def test_input_error_in_a_job_comes_back_as_itself(tmp_path):
    cfg = compose_cfg("tasks=mock", f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db")
    cfg.eval.attempts = 0  # the schema refuses it when the config is built; set after, the stage refuses it in the job
    with pytest.raises(ConfigError) as err:
        dispatch(cfg, make_plan(cfg))
    assert err.value.field == "eval.attempts"
    carried = pickle.loads(pickle.dumps(StageFailure(ConfigError, "f.yaml", "a.b", "is 0", "give 1")))
    assert isinstance(carried.error(), ConfigError) and str(carried.error()) == "f.yaml: field 'a.b': is 0. Fix: give 1"


def test_sharded_probe_equals_one_job_and_stores_each_try_once(tmp_path):
    common = ["tasks=mock", "probe.adaptive=false", "probe.attempts=4"]
    one = compose_cfg(*probe_overrides(tmp_path / "one", *common))
    sharded = compose_cfg(*probe_overrides(tmp_path / "sharded", *common, "launcher.shards=3"))
    whole, parts = dispatch(one, make_plan(one)), dispatch(sharded, make_plan(sharded, n_tasks=3))
    assert parts.tasks == whole.tasks and parts.n_tasks == 3  # same k/n per task, from 3 jobs
    keys = stored_keys(parts.run_dir)
    assert len(keys) == len(set(keys)) == 12  # 3 tasks x 4 attempts, once each
    assert Path(parts.run_dir).name == Path(whole.run_dir).name  # sharding is not part of the identity


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` installed (its SigCgt mask, /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


def _ready_to_preempt(shard) -> int | None:
    """The shard's task process once it has played an episode of its own (its progress line in its log)
    and holds submitit's preemption handler; None before."""
    if not re.search(r"probe coin:.*\| [1-5]/6 ", shard.stderr() or ""):
        return None
    for pid in _children(shard._process.pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b""
        if b"submitit" in cmdline and _catches(pid, signal.SIGUSR2):
            return pid
    return None


@pytest.mark.slow
def test_local_jobs_preempted_shard_requeues_and_resumes_without_duplicates(tmp_path):
    cfg = compose_cfg(*probe_overrides(
        tmp_path, "tasks=travel", "tasks.limit=6", "probe.adaptive=false", "probe.attempts=2", "eval.concurrency=1",
        "policy._target_=tests.launch.SlowCoinPolicy", "+extra.turn_delay_s=0.15", "hardware=local_jobs",
        "launcher.shards=2", f"launcher.folder={tmp_path}/jobs"))
    plan = make_plan(cfg, n_tasks=6)
    submission = submit(cfg, plan)
    try:
        _preempt_a_shard_and_check(tmp_path, submission)
    finally:  # a failed check leaves no job processes behind
        for job in [*submission.shards, *([submission.final] if submission.final else [])]:
            if not job.done():
                job.cancel()


def _preempt_a_shard_and_check(tmp_path, submission):
    shard = submission.shards[0]
    task, deadline = None, time.monotonic() + 180
    while task is None and time.monotonic() < deadline:  # an event (the shard's own progress), polled
        task = _ready_to_preempt(shard)
        if task is None:
            assert not shard.done(), f"the shard ended before it could be preempted: {shard.stderr()}"
            time.sleep(0.1)
    assert task is not None, f"the shard played no episode within 180 s: {shard.stderr()}"
    [run_dir] = (tmp_path / "outputs").glob("probe-travel-*")
    os.kill(task, signal.SIGUSR2)  # what Slurm sends before preemption or the time limit
    summary = wait(submission, timeout_s=240)
    keys = stored_keys(run_dir)
    assert len(keys) == len(set(keys))  # nothing stored twice
    assert {(t, a) for t, a, _ in keys} == {(t, a) for t in summary.tasks for a in range(2)}
    assert summary.n_tasks == 6 and summary.episodes == 12
    log = shard.stderr() or ""
    assert "Requeued job" in log and "this job is preempted" in log  # it checkpointed and restarted


def test_slurm_parameters_become_these_sbatch_lines(tmp_path, monkeypatch):
    # Only the submission script's text is checked: submitit's Slurm executor need not find `srun`
    # (on a fresh machine Slurm is installed later, by the tests that start it).
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    cfg = compose_cfg("hardware=slurm_h100_3x8", "hardware.qos=high", "hardware.setup=[module load cuda/12.4]")
    params = executor_parameters(cfg.hardware, make_plan(cfg), cfg.launcher, "train-x")
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(**params)  # raises on a name submitit does not know
    script = executor._executor._make_submission_file_text("python -m x", "uid")
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=96",
                 "#SBATCH --gres=gpu:h100:8", "#SBATCH --partition=gpu", "#SBATCH --qos=high",
                 "#SBATCH --constraint=h100", "#SBATCH --time=2880", "#SBATCH --mem=1000GB",
                 "#SBATCH --signal=USR2@90", "module load cuda/12.4"):
        assert line in script, line


def test_ray_commands_pin_auth_ports_and_session_folder(tmp_path):
    spec = RaySpec(num_nodes=3, cpus=96, gpus=8, auth_mode="token", rendezvous=tmp_path / "ray-7-0")
    head = head_command(spec, "10.0.0.1", 40000, client_server=True)
    assert head[1:4] == ["start", "--head", "--block"] and "--port=40000" in head
    assert "--num-gpus=8" in head and f"--temp-dir={spec.temp_dir}" in head and "--include-dashboard=false" in head
    for flag in ("--ray-client-server-port=", "--dashboard-agent-listen-port="):  # free ports, not 10001 / 52365
        assert any(arg.startswith(flag) and not arg.endswith(("=10001", "=52365")) for arg in head), flag
    assert not any("client-server" in arg for arg in head_command(spec, "10.0.0.1", 1, client_server=False))
    worker = worker_command(spec, "10.0.0.1:40000", "10.0.0.2")
    assert "--address=10.0.0.1:40000" in worker and "--head" not in worker
    token = auth_env(spec, tmp_path / "auth_token")
    assert token == {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
                     "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token")}
    off = RaySpec(num_nodes=1, cpus=1, gpus=0, auth_mode="disabled", rendezvous=tmp_path / "r")
    assert auth_env(off, None)["RAY_AUTH_MODE"] == "disabled"
    assert len(spec.temp_dir) < 30 and spec.temp_dir != off.temp_dir  # socket paths stay short, one per job


def _worker_niceness() -> int:
    """Runs on the Ray head: the niceness a Ray worker process gets."""
    import ray

    ray.init()  # RAY_ADDRESS points at the cluster run_on_ray_cluster started
    try:
        return ray.get(ray.remote(num_cpus=1)(lambda: os.nice(0)).remote())
    finally:
        ray.shutdown()


def test_ray_workers_of_a_cpu_node_run_at_the_normal_niceness(tmp_path):
    """Ray starts workers at niceness 15: verl's trainer and vLLM on a CPU node then got a few percent of a core
    beside other work. A node with fake GPUs (verl on CPU) starts its workers at 0; a GPU node keeps Ray's."""
    pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[cluster]'")
    gpu = RaySpec(num_nodes=1, cpus=8, gpus=8, auth_mode="disabled", rendezvous=tmp_path / "gpu")
    assert "RAY_worker_niceness" not in auth_env(gpu, None)
    cpu = RaySpec(num_nodes=1, cpus=2, gpus=1, auth_mode="disabled", rendezvous=tmp_path / "cpu", fake_gpus=True)
    assert auth_env(cpu, None)["RAY_worker_niceness"] == "0"
    saved = {key: os.environ.get(key) for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED",
                                                  "CUDA_VISIBLE_DEVICES", "RAY_worker_niceness")}
    try:
        assert run_on_ray_cluster(_worker_niceness, (), cpu, 0) == os.nice(0)
    finally:
        for key, value in saved.items():  # the head exports its settings into this process
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def launch(*args):
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "logger=none", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_show_prints_the_plan_and_a_bad_plan_exits_2(tmp_path):
    out = launch("stage=eval", "show=true", "hardware=slurm_a100x8", "model.tensor_parallel_size=2", f"out_root={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "# plan: stage=eval on slurm (hardware=slurm_a100x8)" in out.stdout and "4 vLLM replica" in out.stdout
    bad = launch("stage=eval", "show=true", "hardware=slurm_a100x8", "model.tensor_parallel_size=3", f"out_root={tmp_path}")
    assert bad.returncode == 2 and "field 'model.tensor_parallel_size'" in bad.stderr
    assert not (tmp_path / "jobs").exists()


def test_multirun_sweep_fans_out_through_dispatch(tmp_path):
    out = launch("sweep=reference_policies", "tasks=mock", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db")
    assert out.returncode == 0, out.stderr
    summaries = {p.parent.name.split("-")[2]: json.loads(p.read_text()) for p in tmp_path.glob("eval-mock-*/summary.json")}
    assert summaries["oracle"]["pass_at_1"] == 1.0 and summaries["null"]["pass_at_1"] == 0.0


HEAD_DIES = """
import subprocess, sys
from pathlib import Path
from tbx.launch.ray_cluster import _while_head_lives
log = Path(sys.argv[1])
log.write_text("gcs_server: Address already in use\\n")
head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
try:
    _while_head_lives(lambda: subprocess.run([sys.executable, "-c", "import time; time.sleep(300)"], check=True), (),
                      head, log)
except Exception as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
    sys.exit(3)
"""


def test_a_ray_head_that_dies_under_the_job_ends_it_with_the_heads_log(tmp_path):
    # A driver whose GCS is gone retries it forever (a head whose client server could not bind its port stopped
    # every daemon it had started, and verl waited for 30 minutes): the head's exit ends the driver and is the error.
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HEAD_DIES, str(tmp_path / "ray-head.log")], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.startswith("InfraError the Ray head exited with 0 while the job ran")
    assert time.monotonic() - start < 100  # not the driver's 300 s
