"""Run a stage through submitit: in this process, as local subprocesses, or as Slurm jobs.

- `debug` (hardware=local_cpu, the default) runs the stage in this process, as launch.py always
  did: output in the terminal, Ctrl-C stops it, nothing to re-import. We run the job's submission
  ourselves instead of `DebugJob.result()`, which opens pdb on an exception.
- `local` (hardware=local_jobs) and `slurm` submit jobs. Every job is `Checkpointable`: on
  preemption or time-out submitit requeues it, and it resumes from the results store, because
  every stage skips the work the store already holds.
- eval and probe with launcher.shards=N: a job array (job i runs eval.shard=i of N, logging off),
  then one final job, the same stage unsharded, which finds the shards' episodes in the store,
  runs whatever a lost shard left, and writes the summary. On Slurm it is queued at once behind
  the array (`--dependency=afterany`), so launcher.wait=false needs no waiting process.
- stage=train with grpo.trainer=verl on local/slurm: one task per Ray node (`ray_cluster`); the
  stage runs on the head with RAY_ADDRESS set. The native trainer is one ordinary job.

Waiting never relies on sacct alone: without slurmdbd, submitit never sees a job that died
without a result as done, so `result()` would hang. We read the job state from `scontrol` and give
up on a job that ended without a result.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import DelayedSubmission, FailedJobError, UncompletedJobError
from submitit.helpers import Checkpointable
from submitit.local.debug import DebugJob

from tbx.config import Config
from tbx.errors import ConfigError, InfraError, InputError, ServiceStopped
from tbx.launch.plan import JobPlan, executor_parameters
from tbx.launch.ray_cluster import RaySpec, run_on_ray_cluster
from tbx.process.durable import is_disk_error, unwritable
from tbx.process.preemption import call_preemptible
from tbx.runs.results import StageResult
from tbx.runs.stages import stage_of

ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "TIMEOUT", "GONE", "ENDED"}
RESULT_GRACE_S = 15.0  # a shared file system may show the result pickle after the job has ended


class JobLostError(InfraError):
    """A job ended (cancelled, killed, timed out) without writing a result, or waiting timed out."""


def run_stage(cfg: Config) -> StageResult:
    """Run `cfg.stage.name` here, in this process: what every job does. The stage returns the record its
    registry entry declares."""
    stage = stage_of(cfg)
    result = stage.function()(cfg)
    if not isinstance(result, stage.result):
        raise TypeError(f"stage {stage.name} returned a {type(result).__name__}; its registry entry declares "
                        f"{stage.result.__name__} (tbx/runs/stages.py)")
    return result


@dataclass(frozen=True, slots=True)
class Submitted:
    """What launching returns without waiting for the jobs (`launcher.wait=false`): their ids."""

    job_ids: tuple[str, ...]
    exit_code: int = 0


@dataclass(frozen=True)
class StageFailure:
    """An input error raised inside a job, carried back as data: exceptions with their own
    constructor do not survive pickling, and the debug executor would open pdb on one."""

    kind: type[InputError]
    source: str
    field: str
    problem: str
    fix: str

    def error(self) -> InputError:
        return self.kind(self.source, self.field, self.problem, self.fix)


def stopping_error(exc: InfraError | OSError) -> InputError:
    """A failure outside any episode as the one-line error that ends the stage: a disk that refused a
    write, or a service that failed for good (after its own retries) while the run was going. The run
    resumes when the same command runs again. Any other OSError is a bug and keeps its traceback."""
    if isinstance(exc, InfraError):
        return ServiceStopped("(the run)", "(a service it uses)", str(exc).splitlines()[0],
                              "check that service, then run the same command again: the run resumes")
    if is_disk_error(exc):
        return unwritable(exc.filename or "(a run file)", exc)
    raise exc


class StageJob(Checkpointable):
    """One stage as a job. `checkpoint()` (from Checkpointable) resubmits it unchanged: the rerun
    resumes from the results store."""

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def __call__(self) -> Any:
        try:
            try:
                return call_preemptible(run_stage, self.cfg)  # a preemption waits for the event loop to unwind
            except (InfraError, OSError) as exc:
                raise stopping_error(exc) from exc
        except InputError as exc:
            if "SUBMITIT_LOCAL_JOB_ID" in os.environ or "SLURM_JOB_ID" in os.environ:  # the job's log; here
                print(f"error: {exc}", file=sys.stderr)  # in launch.py's process, launch.py prints it once
            return StageFailure(type(exc), exc.source, exc.field, exc.problem, exc.fix)


class RayJob(Checkpointable):
    """Every task of the job joins one Ray cluster; `function(*args)` runs on rank 0 (the head).

    Each run of the job meets in a rendezvous folder of its own, so a requeued run never reads the
    previous run's address or done mark: `attempt` counts checkpoints (the requeued pickle, which
    every task loads, carries it) and SLURM_RESTART_COUNT counts Slurm's own requeues."""

    def __init__(self, function: Callable[..., Any], args: tuple, plan: JobPlan, auth_mode: str, attempt: int = 0):
        self.function, self.args, self.plan, self.auth_mode, self.attempt = function, args, plan, auth_mode, attempt

    def __call__(self) -> Any:
        env = submitit.JobEnvironment()
        run = f"ray-{env.job_id}-{self.attempt}-{os.environ.get('SLURM_RESTART_COUNT', '0')}"
        spec = RaySpec(num_nodes=env.num_tasks, cpus=self.plan.ray_cpus, gpus=self.plan.ray_gpus,
                       auth_mode=self.auth_mode, rendezvous=Path(env.paths.folder) / run, hosts=env.num_nodes,
                       fake_gpus=self.plan.ray_gpus > self.plan.gpus_per_task,
                       object_store_bytes=self.plan.ray_object_store_bytes)
        return run_on_ray_cluster(self.function, self.args, spec, env.global_rank)

    def checkpoint(self) -> DelayedSubmission:
        return DelayedSubmission(RayJob(self.function, self.args, self.plan, self.auth_mode, self.attempt + 1))


def shard_config(cfg: Config, index: int, count: int) -> Config:
    """Job `index` of the array: its slice of the tasks; no logging or summary file (the final job's)."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, shard=index, num_shards=count),
                               logger=dataclasses.replace(cfg.logger, kind="none"), summary_path=None)


def final_config(cfg: Config) -> Config:
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, shard=0, num_shards=1))


def make_executor(cfg: Config, plan: JobPlan, name: str) -> submitit.AutoExecutor:
    if plan.executor == "slurm" and not shutil.which("sbatch"):
        raise ConfigError(f"conf/hardware/{plan.hardware}.yaml", "hardware.executor",
                          "is slurm, but sbatch is not on PATH", "submit from a Slurm login node, or use "
                          "hardware=local_cpu")
    executor = submitit.AutoExecutor(folder=cfg.launcher.folder, cluster=plan.executor)
    params = executor_parameters(cfg.hardware, plan, cfg.launcher, name)
    if params:
        executor.update_parameters(**params)
    return executor


@dataclass
class Submission:
    """What `submit` queued: the shards (if any) and the job whose result is the stage's."""

    plan: JobPlan
    executor: submitit.AutoExecutor
    shards: list[submitit.Job] = field(default_factory=list)
    final: submitit.Job | None = None  # None until the shards ended (executors without dependencies)
    final_job: StageJob | None = None

    def job_ids(self) -> list[str]:
        return [job.job_id for job in self.shards] + ([self.final.job_id] if self.final else [])


def submit(cfg: Config, plan: JobPlan, job: Callable[[], Any] | None = None) -> Submission:
    """Queue the stage (or `job`, e.g. a test's RayJob) as `plan` says; return without waiting."""
    from tbx.runs.identity import run_name

    executor = make_executor(cfg, plan, run_name(cfg))
    if job is None and plan.ray_nodes:
        job = RayJob(StageJob(cfg), (), plan, str(cfg.hardware.ray_auth_mode))
    if job is not None or not plan.sharded:
        return Submission(plan, executor, final=executor.submit(job or StageJob(cfg)))
    create_store(cfg)
    with executor.batch():
        shards = [executor.submit(StageJob(shard_config(cfg, i, plan.shards))) for i in range(plan.shards)]
    submission = Submission(plan, executor, shards=shards, final_job=StageJob(final_config(cfg)))
    if plan.executor == "slurm":
        array_id = shards[0].job_id.split("_")[0]
        executor.update_parameters(slurm_dependency=f"afterany:{array_id}")
        submission.final = executor.submit(submission.final_job)
    return submission


def create_store(cfg: Config) -> None:
    """Create the run's results table before the shards start: jobs that all create it at once race
    (SQLite: "table attempts already exists", seen with 3 shards on one node)."""
    from tbx.runs.identity import resolve_run_dir, run_identity
    from tbx.store import open_store

    open_store(cfg.store.url, resolve_run_dir(cfg), run_identity(cfg), cfg.stage.name).close()


def wait(submission: Submission, timeout_s: float | None = None) -> Any:
    """Wait for the shards, then the final job; return the stage's result (rank 0's for Ray jobs)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for job in submission.shards:
        try:
            outcome = collect(job, submission.plan, deadline, echo=False)
        except (FailedJobError, UncompletedJobError, JobLostError) as exc:
            print(f"warning: shard job {job.job_id} did not finish ({failure_reason(exc)}); "
                  "the final job runs what it left", file=sys.stderr)
            continue
        if isinstance(outcome, StageFailure):
            if submission.final is not None:
                submission.final.cancel(check=False)  # queued behind the array, it would only repeat this
            raise outcome.error()
    if submission.final is None:
        submission.final = submission.executor.submit(submission.final_job)
    result = collect(submission.final, submission.plan, deadline)
    if isinstance(result, StageFailure):
        raise result.error()
    return result


def failure_reason(exc: Exception) -> str:
    """The exception line of a job's traceback (submitit puts the whole traceback in the message)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    found = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)]
    return (found or lines or ["no detail"])[-1]


def collect(job: submitit.Job, plan: JobPlan, deadline: float | None, echo: bool = True) -> Any:
    """The job's result (rank 0's); raises when it failed, ended without a result, or time ran out.
    `echo`: print what the job printed (its summary), as a run in this process would have."""
    if isinstance(job, DebugJob):
        return job.submission().result()
    await_results(job, plan, deadline)
    results = job.results()
    if echo:
        echo_output(job)
    return results[0]


def await_results(job: submitit.Job, plan: JobPlan, deadline: float | None, poll_s: float = 0.5) -> None:
    tasks = [job.task(i) for i in range(job.num_tasks)]
    ended_at: float | None = None
    while not all(task.paths.result_pickle.exists() for task in tasks):
        state = slurm_state(job.job_id) if plan.executor == "slurm" else ("ENDED" if job.done() else "RUNNING")
        if state in ENDED:
            ended_at = ended_at or time.monotonic()
            if plan.executor == "local" or time.monotonic() - ended_at > RESULT_GRACE_S:
                raise JobLostError(f"job {job.job_id} ended ({state}) without a result; see {job.paths.stderr}")
        else:
            ended_at = None
        if deadline is not None and time.monotonic() > deadline:
            raise JobLostError(f"job {job.job_id} still {state} when the wait timed out (launcher.wait_timeout_s)")
        time.sleep(poll_s)


def slurm_state(job_id: str) -> str:
    """JobState from scontrol (works without accounting); GONE once Slurm has forgotten the job."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=60,
                         check=False)
    match = re.search(r"JobState=(\S+)", out.stdout)
    if out.returncode != 0 or not match:
        return "GONE" if "Invalid job id" in out.stderr else "UNKNOWN"
    return match.group(1)


def echo_output(job: submitit.Job) -> None:
    """The stage's printed summary, from the job's log, minus submitit's own lines."""
    text = job.stdout() or ""
    lines = [line for line in text.splitlines() if not line.startswith("submitit ")]
    if lines:
        print("\n".join(lines))


def dispatch(cfg: Config, plan: JobPlan) -> StageResult:
    """Submit the stage; with launcher.wait, wait and return its result (else the job ids)."""
    submission = submit(cfg, plan)
    if plan.executor == "debug":
        return wait(submission)
    print(f"submitted {plan.stage} as {plan.executor} job(s) {', '.join(submission.job_ids())}; logs in "
          f"{cfg.launcher.folder}", file=sys.stderr)
    if not cfg.launcher.wait:
        return Submitted(tuple(submission.job_ids()))
    return wait(submission, cfg.launcher.wait_timeout_s)
