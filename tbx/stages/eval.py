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
from tbx.episodes import run_episode
from tbx.errors import ConfigError
from tbx.faults import validate_faults
from tbx.metrics import format_summary, outcome_summary, outcomes_from_records, summarize
from tbx.preemption import run_loop
from tbx.runs import record_engine, resolve_run_dir, run_identity, save_run_meta
from tbx.sinks import stage_sink
from tbx.stages.components import build_backend, build_judge, build_policy, build_user, episode_cost
from tbx.store import ResultStore, open_store


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
    path.write_text("\n".join(lines) + "\n")


async def run_campaign(cfg: Config, runtimes: dict[str, TaskRuntime], log: ResultStore, backend,  # noqa: ANN001
                       attempts: dict[str, range], label: str, run_dir: Path | None = None) -> None:
    """Run every (task, attempt) of `attempts` that is not final in `log`, `eval.concurrency` at once;
    record what served the policy in `run_dir`'s run.json."""
    validate_faults(cfg.faults, cfg.eval.call_timeout_s)
    pending = [(task_id, a) for task_id, indices in attempts.items() for a in indices
               if not log.is_final(task_id, a, cfg.eval.max_error_retries)]
    if not pending:
        return
    policy, user, judge = build_policy(cfg), build_user(cfg), build_judge(cfg)
    if run_dir is not None:
        record_engine(run_dir, policy.engine())
    gate = asyncio.Semaphore(cfg.eval.concurrency)
    bar = tqdm(total=len(pending), desc=f"{label} {cfg.policy.name}", unit="ep", file=sys.stderr,
               disable=False, mininterval=2.0, dynamic_ncols=True)

    async def attempt(task_id: str, index: int) -> None:
        async with gate:
            while not log.is_final(task_id, index, cfg.eval.max_error_retries):
                # A re-run keeps the attempt's seed, so errors cannot bias which outcomes survive (an
                # error more likely on long, successful episodes would otherwise swap a success for a
                # fresh draw); only the injected faults are drawn anew per try.
                seed = episode_seed(cfg.seed, task_id, index, 0)
                fault_seed = episode_seed(cfg.seed, task_id, index, log.tries(task_id, index))
                result = await run_episode(runtimes[task_id], backend, policy, user, judge, index, seed,
                                           cfg.eval.max_turns, cfg.eval.call_timeout_s, cfg.faults, fault_seed)
                log.append(result, episode_cost(cfg, result.usage))
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


@dataclass
class OpenRun:
    """A campaign's run folder, results store, backend and prepared tasks (this shard's)."""

    run_dir: Path
    log: ResultStore
    backend: Backend
    runtimes: dict[str, TaskRuntime]


@contextmanager
def open_run(cfg: Config, stage: str) -> Iterator[OpenRun]:
    """Check the eval settings, resolve this shard's tasks, open the run folder (the run's identity),
    its store and the backend, and prepare the tasks; close the store and backend on the way out."""
    validate_eval(cfg)
    tasks = resolve_tasks(cfg.tasks)[cfg.eval.shard :: cfg.eval.num_shards]
    if not tasks:
        raise ConfigError("conf/tasks", "tasks", "the task set is empty after filtering",
                          "check tasks.split, tasks.families, tasks.limit and the shard")
    run_dir = resolve_run_dir(cfg)
    save_run_meta(run_dir, cfg)
    suffix = f".shard{cfg.eval.shard}of{cfg.eval.num_shards}" if cfg.eval.num_shards > 1 else ""
    log = open_store(cfg.store.url, run_dir, run_identity(cfg), stage)
    backend = build_backend(cfg)
    try:
        runtimes = prepare_all(tasks, backend)
        write_runtimes(run_dir / f"tasks{suffix}.jsonl", runtimes)
        yield OpenRun(run_dir, log, backend, runtimes)
    finally:
        backend.close()
        log.close()


def run_eval(cfg: Config) -> dict[str, Any]:
    with open_run(cfg, "eval") as run:
        attempts = {task_id: range(cfg.eval.attempts) for task_id in run.runtimes}
        run_loop(run_campaign(cfg, run.runtimes, run.log, run.backend, attempts, "eval", run.run_dir))
    return write_summary(cfg, run.run_dir, run.log, run.runtimes, cfg.policy.name,
                         f"eval {cfg.tasks.name} with {cfg.policy.name} -> {run.run_dir}")


def write_summary(cfg: Config, run_dir: Path, log: ResultStore, task_ids: Iterable[str], label: str, title: str,
                  out: TextIO | None = None) -> dict[str, Any]:
    """The run's summary over the final try of every (task, attempt) asked: summary.json, the logging
    sink, `summary_path`, and the table printed to `out` (stdout by default). `label` names the agent."""
    task_ids = list(task_ids)
    wanted = {(t, a) for t in task_ids for a in range(cfg.eval.attempts)}
    records = [r for r in log.final_records() if (r["task_id"], r["attempt"]) in wanted]
    outcomes, _, _ = outcomes_from_records(records)
    judged = any(outcomes.values())  # nothing judged yet (a served run before its first verdict): no headline
    headline = summarize(outcomes, attempts=cfg.eval.attempts, allow_incomplete=True) if judged else None
    summary = outcome_summary(records) | {"pass_at_k": headline.pass_at_k if headline else None,
                                          "observed_all": headline.observed_all if headline else None,
                                          "k": cfg.eval.attempts,
                                          "incomplete_tasks": list(headline.incomplete) if headline else
                                          sorted(set(task_ids)),
                                          "run_dir": str(run_dir), "policy": label,
                                          "tasks": cfg.tasks.name, "attempts": cfg.eval.attempts,
                                          "error_tries": log.error_tries(),
                                          "cost_usd": sum(r.get("cost_usd", 0.0) for r in log.records)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    log_summary(cfg, run_dir, summary, "eval")
    if cfg.summary_path:
        Path(cfg.summary_path).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.summary_path).write_text(json.dumps(summary, indent=2))
    print(format_summary(summary, title), file=out or sys.stdout)
    return summary
