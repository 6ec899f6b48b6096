"""Worker processes: a campaign's attempts spread over `eval.workers` processes, each with its own event
loop, backend and results-store connection, so a campaign uses every core (one event loop is one core).

The parent unpacks nothing and plays nothing: it starts the workers (spawned, so no lock, thread or
open connection of the parent is copied into them), hands each the prepared tasks and the list of
pending attempts, and follows their progress. Attempts are handed out through a shared counter, each
to one worker, as workers free up (a worker slowed by a busy core takes fewer). Each worker claims its
attempts in the store as any process does (`tbx.store.claims`): one verdict per attempt, and a killed
campaign resumes from the store. Workers end with their parent: a SIGKILLed parent takes them along
(Linux: the parent-death signal; elsewhere within a second), and their claims are taken over at once by
the next start, like those of any dead process. An input error in a worker (a full disk, an unreachable
store) stops the campaign with that one line; a worker killed by a signal (the out-of-memory killer) stops it
as an interruption (`RunInterrupted`: one line, the same command resumes); a crash stops it with the
worker's traceback.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tbx.campaign.attempts import Attempt, play_attempts
from tbx.campaign.components import build_backend, build_world
from tbx.catalog import TaskRuntime
from tbx.config import Config
from tbx.errors import ConfigError, InputError, RunInterrupted
from tbx.process.preemption import preemption_signal, run_loop
from tbx.store import ResultStore, open_store
from tbx.traits import traits_of

MIN_ATTEMPTS_PER_WORKER = 64  # below this a worker's start-up (~1-2 s: imports, tasks) is not worth it
POLL_S = 0.2  # how often the parent looks at its workers


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def share_processes(cfg: Config, items: int, per_process: int) -> int:
    """Processes to spread `items` pieces of work over: `eval.workers` (default: the cores available),
    at most one per `per_process` pieces (fewer would not repay a process's start-up)."""
    return min(cfg.eval.workers or available_cores(), items // per_process)


def plan_workers(cfg: Config, pending: int) -> int:
    """Worker processes for `pending` attempts: `eval.workers`, or by default the cores available when
    the harness sets the pace (a reference policy with the scripted user), never more than one per
    `MIN_ATTEMPTS_PER_WORKER` attempts; 1 (this process) otherwise."""
    if cfg.eval.workers is not None:
        return max(1, min(cfg.eval.workers, pending))
    harness_bound = (traits_of(cfg.policy._target_, "policy").is_reference
                     and traits_of(cfg.user._target_, "user").is_scripted)
    if not harness_bound:
        return 1
    return max(1, min(available_cores(), pending // MIN_ATTEMPTS_PER_WORKER))


def check_workers(cfg: Config) -> None:
    model_served_here = (traits_of(cfg.policy._target_, "policy").plays_model and cfg.model.kind == "vllm"
                         and not cfg.model.endpoint.base_url)
    if model_served_here and (cfg.eval.workers or 1) > 1:
        raise ConfigError("conf/config.yaml", "eval.workers", f"is {cfg.eval.workers} with a model tbx serves "
                          "itself (each worker would start its own vLLM)",
                          "leave eval.workers=null (one process), or serve the model once "
                          "(`python launch.py stage=serve_model`) and give model.endpoint.base_url=<the URL it prints>")


@dataclass(frozen=True)
class WorkerJob:
    """What a worker needs: the settings, the run's store, the prepared tasks, the attempts."""

    cfg: Config
    run_id: str
    stage: str
    run_dir: str  # the run folder (its results.sqlite unless store.url; its run.json)
    runtimes: dict[str, TaskRuntime]
    pending: list[Attempt]
    record_engine: bool  # this worker writes what served the policy into run.json


@dataclass(frozen=True)
class WorkerFailure:
    """How a worker failed, as data (an exception with its own constructor may not survive pickling)."""

    traceback: str
    input_error: tuple[type[InputError], str, str, str, str] | None = None
    killed: str | None = None  # a worker that a signal ended, before it could report: how

    def error(self) -> Exception:
        if self.killed is not None:
            return RunInterrupted(self.killed)
        if self.input_error is not None:
            kind, source, field, problem, fix = self.input_error
            return kind(source, field, problem, fix)
        return RuntimeError(f"a campaign worker failed:\n{self.traceback}")


def follow_parent(parent: int) -> None:
    """End this worker when its parent ends, however it ends (a SIGKILLed parent runs no clean-up)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: Linux sends it when the parent dies
    except (OSError, AttributeError):
        pass

    def watch() -> None:  # elsewhere (and if the parent died before prctl): look every half second
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="tbx-parent-watch", daemon=True).start()


def map_shares(fn: Callable[[Config, list], Any], cfg: Config, items: list, processes: int, desc: str) -> Iterator[Any]:
    """`fn(cfg, share)` over `items` split into shares (four per process, so a process slowed by a busy
    core takes fewer), in `processes` spawned processes that end with this one; each share's result in
    order, with a progress bar. A process that dies raises BrokenProcessPool here."""
    shares = [items[i::processes * 4] for i in range(processes * 4)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"), initializer=follow_parent,
                             initargs=(os.getpid(),)) as pool:
        yield from tqdm(pool.map(fn, [cfg] * len(shares), shares), total=len(shares), desc=desc, unit="share",
                        file=sys.stderr, mininterval=2.0)


def _worker(job: WorkerJob, parent: int, next_index, finished, retried, report) -> None:  # shared values, a pipe
    follow_parent(parent)
    for signum in (signal.SIGINT, preemption_signal()):  # the parent decides; it ends the workers
        if signum is not None:
            signal.signal(signum, signal.SIG_IGN)
    cfg = job.cfg
    try:
        backend = build_backend(cfg)
        try:
            store = open_store(cfg.store.url, Path(job.run_dir), job.run_id, job.stage, cfg.store.timeout_s,
                               read_tries=False)
            try:
                world = build_world(cfg, backend, job.runtimes)  # this process's own
                run_loop(play_attempts(cfg, world, store, _taker(job.pending, next_index), _counter(finished),
                                       Path(job.run_dir) if job.record_engine else None, _counter(retried)))
            finally:
                store.close()
        finally:
            backend.close()
    except InputError as exc:
        report.send(WorkerFailure(traceback.format_exc(), (type(exc), exc.source, exc.field, exc.problem, exc.fix)))
    except BaseException:
        report.send(WorkerFailure(traceback.format_exc()))
    else:
        report.send(None)
    finally:
        report.close()


def _taker(pending: list[Attempt], next_index) -> Callable[[], Attempt | None]:  # a shared value
    def take() -> Attempt | None:
        with next_index.get_lock():
            index = next_index.value
            next_index.value += 1
        return pending[index] if index < len(pending) else None

    return take


def _counter(finished) -> Callable[[], None]:  # a shared value
    def done() -> None:
        with finished.get_lock():
            finished.value += 1

    return done


async def run_in_workers(cfg: Config, runtimes: dict[str, TaskRuntime], log: ResultStore, pending: list[Attempt],
                         workers: int, progress: Callable[[int], object], run_dir: Path,
                         on_retry: Callable[[int], object] = lambda n: None) -> None:
    """Play `pending` in `workers` processes; `progress(n)` as attempts finish, `on_retry(n)` as error tries
    are played again. Returns when every worker has ended; a failed worker stops the others and raises
    its error here."""
    context = multiprocessing.get_context("spawn")
    next_index, finished, retried = context.Value("q", 0), context.Value("q", 0), context.Value("q", 0)
    procs, reports = [], []
    try:
        for index in range(workers):
            job = WorkerJob(cfg, log.run_id, log.stage, str(run_dir), runtimes, pending, record_engine=index == 0)
            receive, send = context.Pipe(duplex=False)
            proc = context.Process(target=_worker, args=(job, os.getpid(), next_index, finished, retried, send),
                                   name=f"tbx-worker-{index}", daemon=True)
            proc.start()
            send.close()
            procs.append(proc)
            reports.append(receive)
        seen, seen_retried, heard, failure = 0, 0, set(), None
        while failure is None and any(proc.is_alive() for proc in procs):
            await asyncio.sleep(POLL_S)
            seen_retried = _advance(retried, seen_retried, on_retry)
            seen = _advance(finished, seen, progress)
            failure = _failure(procs, reports, heard)
        failure = failure or _failure(procs, reports, heard)
        _advance(retried, seen_retried, on_retry)
        _advance(finished, seen, progress)
        if failure is not None:
            raise failure.error()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join()
        for receive in reports:
            receive.close()


def _advance(finished, seen: int, progress: Callable[[int], object]) -> int:  # a shared value
    now = finished.value
    if now > seen:
        progress(now - seen)
    return now


def _failure(procs: list, reports: list, heard: set[int]) -> WorkerFailure | None:
    """The first failure a worker reported, or a worker that ended without a report (killed, out of
    memory); `heard` collects the workers whose last word was read."""
    for index, (proc, receive) in enumerate(zip(procs, reports, strict=True)):
        if index in heard or not receive.poll():
            continue
        heard.add(index)
        try:
            message = receive.recv()
        except EOFError:  # its end of the pipe closed without a report
            proc.join()
            message = WorkerFailure(f"{proc.name} ended without a report (exit {proc.exitcode})",
                                    killed=_killed(proc))
        if message is not None:
            return message
    return None


def _killed(proc) -> str | None:  # a multiprocessing.Process that has ended
    """How a signal ended `proc` (a negative exit code), or None when it exited by itself."""
    if proc.exitcode is None or proc.exitcode >= 0:
        return None
    try:
        name = signal.Signals(-proc.exitcode).name
    except ValueError:
        name = f"signal {-proc.exitcode}"
    why = " (what the kernel's out-of-memory killer sends)" if name == "SIGKILL" else ""
    return f"campaign worker {proc.name} (pid {proc.pid}) was killed by {name}{why}"
