"""stage=eval: every task of the set, `eval.attempts` times, concurrently, resumable.

Results go to the results store (one row per try; `<run folder>/results.sqlite` unless
`store.url` names a shared database). The run folder and the run id are the run's identity
hash, so re-running the same command resumes where a killed run stopped; shards of a campaign
(`eval.shard=i eval.num_shards=m`) write to the same run. Error outcomes are re-run up to
`eval.max_error_retries` times and never count as failures.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from tbx.backend import Backend
from tbx.catalog import TaskRuntime, prepare_task, resolve_tasks
from tbx.config import Config
from tbx.durable import write_text
from tbx.episodes import run_episode
from tbx.errors import EXIT_NO_VERDICT, ConfigError
from tbx.faults import validate_faults
from tbx.metrics import format_summary, outcome_summary, outcomes_from_records, summarize
from tbx.preemption import run_loop
from tbx.runs import record_engine, resolve_run_dir, run_identity, save_run_meta
from tbx.sinks import stage_sink
from tbx.stages.components import build_backend, build_judge, build_policy, build_user, episode_cost
from tbx.store import ResultStore, open_store
from tbx.store.claims import Claim, ClaimLost, describe_owner


def episode_seed(run_seed: int, task_id: str, attempt: int, try_index: int) -> int:
    digest = hashlib.sha256(f"{run_seed}|{task_id}|{attempt}|{try_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def validate_eval(cfg: Config) -> None:
    e = cfg.eval
    if e.attempts < 1:
        raise ConfigError("conf/config.yaml", "eval.attempts", f"is {e.attempts}", "give eval.attempts >= 1")
    if e.concurrency < 1:
        raise ConfigError("conf/config.yaml", "eval.concurrency", f"is {e.concurrency}", "give >= 1")
    if e.num_shards < 1 or not 0 <= e.shard < e.num_shards:
        raise ConfigError("conf/config.yaml", "eval.shard", f"shard {e.shard} of {e.num_shards}",
                          "give 0 <= eval.shard < eval.num_shards")


def write_runtimes(path: Path, runtimes: dict[str, TaskRuntime]) -> None:
    """Tasks as run (content, initial state, expected changes): what `stage=regrade` needs."""
    lines = [json.dumps({"task": rt.task.raw, "source": rt.task.source, "initial": rt.initial,
                         "expected": [vars(e) for e in rt.expected], "volatile": list(rt.volatile)}, default=str)
             for rt in runtimes.values()]
    write_text(path, "\n".join(lines) + "\n")


CLAIM_POLL_S = 1.0  # how often an attempt held by another process is looked at again


class _HeldNotice:
    """Says once per campaign that another process plays some of this run's attempts."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, owner: str) -> None:
        if not self.said and owner:
            self.said = True
            print(f"note: another process ({describe_owner(owner)}) is playing attempts of this run; this one "
                  "plays the others, then waits for those (nothing runs twice)", file=sys.stderr)


async def run_campaign(cfg: Config, runtimes: dict[str, TaskRuntime], log: ResultStore, backend,  # noqa: ANN001
                       attempts: dict[str, range], label: str, run_dir: Path | None = None) -> None:
    """Run every (task, attempt) of `attempts` that is not final in `log`, `eval.concurrency` at once;
    record what served the policy in `run_dir`'s run.json.

    Each attempt is claimed in the store first: one held by a live process is left to it and waited
    for, so every attempt is played by one process and gets one verdict, however many run."""
    validate_faults(cfg.faults, cfg.eval.call_timeout_s)
    pending = [(task_id, a) for task_id, indices in attempts.items() for a in indices
               if not log.is_final(task_id, a, cfg.eval.max_error_retries)]
    if not pending:
        return
    policy, user, judge = build_policy(cfg), build_user(cfg), build_judge(cfg)
    if run_dir is not None:
        record_engine(run_dir, policy.engine())
    gate, notice = asyncio.Semaphore(cfg.eval.concurrency), _HeldNotice()
    bar = tqdm(total=len(pending), desc=f"{label} {cfg.policy.name}", unit="ep", file=sys.stderr,
               disable=False, mininterval=2.0, dynamic_ncols=True)

    async def play(task_id: str, index: int) -> None:
        while not log.is_final(task_id, index, cfg.eval.max_error_retries):
            # A re-run keeps the attempt's seed, so errors cannot bias which outcomes survive (an
            # error more likely on long, successful episodes would otherwise swap a success for a
            # fresh draw); only the injected faults are drawn anew per try.
            seed = episode_seed(cfg.seed, task_id, index, 0)
            fault_seed = episode_seed(cfg.seed, task_id, index, log.tries(task_id, index))
            result = await run_episode(runtimes[task_id], backend, policy, user, judge, index, seed,
                                       cfg.eval.max_turns, cfg.eval.call_timeout_s, cfg.faults, fault_seed,
                                       turn_timeout_s=cfg.eval.turn_timeout_s)
            log.append(result, episode_cost(cfg, result.usage))

    async def attempt(task_id: str, index: int) -> None:
        while True:
            async with gate:
                state, owner = log.claim(task_id, index, cfg.eval.max_error_retries)
                if state is Claim.OURS:
                    try:
                        await play(task_id, index)
                    except ClaimLost as lost:  # taken over while this process looked gone: its result is dropped
                        print(f"note: {lost}", file=sys.stderr)
                    finally:
                        log.release(task_id, index)
                if state is not Claim.HELD:
                    break
            notice(owner)
            await asyncio.sleep(CLAIM_POLL_S)
        bar.update(1)

    try:
        await asyncio.gather(*(attempt(t, a) for t, a in pending))
    finally:
        bar.close()
        for part in (policy, user, judge):
            if part is not None:
                await part.aclose()


def log_summary(cfg: Config, run_dir: Path, summary: dict[str, Any], prefix: str) -> None:
    """Headline metrics per domain and a per-family table to the logging sink."""
    metrics = {f"{prefix}/{key}": summary[key] for key in ("pass_at_1", "pass_at_k", "observed_all", "n_tasks",
                                                          "episodes", "cost_usd") if summary.get(key) is not None}
    metrics |= {f"{prefix}/outcome/{name}": count for name, count in summary["counts"].items()}
    for domain, group in summary["by_domain"].items():
        if group["pass_at_1"] is not None:
            metrics[f"{prefix}/{domain}/pass_at_1"] = group["pass_at_1"]
    rows = [[name, g["n_tasks"], g["episodes"], g["pass_at_1"], g["counts"]["success"], g["counts"]["failure"],
             g["errors"]] for name, g in summary["by_family"].items()]
    with stage_sink(cfg, run_dir) as sink:
        sink.log(metrics)
        sink.table(f"{prefix}/families", ["family", "tasks", "episodes", "pass_at_1", "success", "failure",
                                          "errors"], rows)


def prepare_all(tasks: list, backend) -> dict[str, TaskRuntime]:  # noqa: ANN001
    return {t.id: prepare_task(t, backend) for t in tqdm(tasks, desc="prepare", unit="task", file=sys.stderr,
                                                          disable=False, mininterval=2.0)}


def headline(records: list[dict[str, Any]], attempts: int) -> dict[str, Any]:
    """pass@k, observed k/k and the short tasks; all None (undefined) when no attempt got a verdict."""
    outcomes, _, _ = outcomes_from_records(records)
    if not any(outcomes.values()):  # every attempt errored: there is nothing to estimate, not a 0
        return {"pass_at_k": None, "observed_all": None, "incomplete_tasks": sorted(outcomes)}
    summary = summarize(outcomes, attempts=attempts, allow_incomplete=True)
    return {"pass_at_k": summary.pass_at_k, "observed_all": summary.observed_all,
            "incomplete_tasks": list(summary.incomplete)}


@dataclass
class OpenRun:
    """A campaign's run folder, results store, backend and prepared tasks (this shard's)."""

    run_dir: Path
    log: ResultStore
    backend: Backend
    runtimes: dict[str, TaskRuntime]


@contextmanager
def open_run(cfg: Config, stage: str) -> Iterator[OpenRun]:
    """Check the settings, resolve this shard's tasks, open the backend, the run folder (the run's
    identity) and its store, prepare the tasks; close the store and backend on the way out. The run
    folder's files are written only once the start-up checks passed, so a failing start leaves an
    earlier run as it was; other processes' tries are read back once the body finished."""
    validate_eval(cfg)
    validate_faults(cfg.faults, cfg.eval.call_timeout_s)
    every_task = resolve_tasks(cfg.tasks)
    tasks = every_task[cfg.eval.shard :: cfg.eval.num_shards]
    if not tasks:
        raise ConfigError("conf/tasks", "tasks", "the task set is empty after filtering",
                          "check tasks.split, tasks.families, tasks.limit and the shard")
    identity = run_identity(cfg, every_task)
    suffix = f".shard{cfg.eval.shard}of{cfg.eval.num_shards}" if cfg.eval.num_shards > 1 else ""
    backend = build_backend(cfg)
    try:
        run_dir = resolve_run_dir(cfg)
        log = open_store(cfg.store.url, run_dir, identity, stage, cfg.store.timeout_s)
        try:
            runtimes = prepare_all(tasks, backend)
            save_run_meta(run_dir, cfg)
            write_runtimes(run_dir / f"tasks{suffix}.jsonl", runtimes)
            yield OpenRun(run_dir, log, backend, runtimes)
            log.refresh()  # other processes on this run stored theirs
        finally:
            log.close()
    finally:
        backend.close()


def run_eval(cfg: Config) -> dict[str, Any]:
    with open_run(cfg, "eval") as run:
        attempts = {task_id: range(cfg.eval.attempts) for task_id in run.runtimes}
        run_loop(run_campaign(cfg, run.runtimes, run.log, run.backend, attempts, "eval", run.run_dir))
    return write_summary(cfg, run.run_dir, run.log, run.runtimes, cfg.policy.name,
                         f"eval {cfg.tasks.name} with {cfg.policy.name} -> {run.run_dir}")


def write_summary(cfg: Config, run_dir: Path, log: ResultStore, task_ids: Iterable[str], label: str, title: str,
                  out: TextIO | None = None) -> dict[str, Any]:
    """The run's summary over the final try of every (task, attempt) asked: summary.json, the logging
    sink, `summary_path`, and the table printed to `out` (stdout by default). `label` names the agent.
    A run without any verdict (every attempt errored) reports pass@1 as undefined and exits 3."""
    wanted = {(t, a) for t in task_ids for a in range(cfg.eval.attempts)}
    records = [r for r in log.final_records() if (r["task_id"], r["attempt"]) in wanted]
    summary = outcome_summary(records) | headline(records, cfg.eval.attempts) | {
        "k": cfg.eval.attempts, "run_dir": str(run_dir), "policy": label, "tasks": cfg.tasks.name,
        "attempts": cfg.eval.attempts, "error_tries": log.error_tries(),
        "cost_usd": sum(r.get("cost_usd", 0.0) for r in log.records)}
    write_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    log_summary(cfg, run_dir, summary, "eval")
    if cfg.summary_path:
        write_text(cfg.summary_path, json.dumps(summary, indent=2), "summary_path")
    print(format_summary(summary, title), file=out or sys.stdout)
    if summary["pass_at_1"] is None and records:
        print(f"no attempt reached a verdict ({summary['errors']} errors, {summary['counts']['excluded']} "
              f"excluded): pass@1 is undefined; the causes are stored with each try", file=sys.stderr)
        summary["exit_code"] = EXIT_NO_VERDICT
    return summary
