"""A campaign's run folder: the settings checked, this shard's tasks prepared, the store opened, and at
the end the summary over the final try of every attempt (summary.json, the logging sink, the table).

The run folder and the run id are the run's identity hash, so re-running the same command resumes
where a killed run stopped; shards of a campaign (`eval.shard=i eval.num_shards=m`) write to the same
run. Used by stage=eval and stage=serve.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from tbx.backend import Backend
from tbx.campaign.components import build_backend, build_world
from tbx.campaign.prepare import prepare_all, write_runtimes
from tbx.campaign.workers import check_workers
from tbx.catalog import TaskRuntime, resolve_tasks
from tbx.config import Config
from tbx.episodes import EpisodeWorld
from tbx.errors import EXIT_NO_VERDICT, ConfigError
from tbx.process.durable import write_text
from tbx.records import StoredTry
from tbx.runs.identity import resolve_run_dir, run_identity, save_run_meta
from tbx.runs.results import EvalResult
from tbx.runs.sinks import stage_sink
from tbx.stats.metrics import attempt_tally, format_summary, outcome_summary, outcomes_from_records, summarize
from tbx.store import ResultStore, open_store
from tbx.view import viewer_command


def validate_eval(cfg: Config) -> None:
    e = cfg.eval
    if e.attempts < 1:
        raise ConfigError("conf/config.yaml", "eval.attempts", f"is {e.attempts}", "give eval.attempts >= 1")
    if e.concurrency < 1:
        raise ConfigError("conf/config.yaml", "eval.concurrency", f"is {e.concurrency}", "give >= 1")
    if e.num_shards < 1 or not 0 <= e.shard < e.num_shards:
        raise ConfigError("conf/config.yaml", "eval.shard", f"shard {e.shard} of {e.num_shards}",
                          "give 0 <= eval.shard < eval.num_shards")
    check_workers(cfg)


EPISODE_COLUMNS = ["task", "attempt", "outcome", "reward", "turns", "tokens", "cause", "transcript (end)"]


def transcript_excerpt(record: StoredTry, limit: int = 300) -> str:
    """The end of an episode's conversation as one line (who said what, tool calls by name), at most
    `limit` characters: where a failure usually shows."""
    parts = []
    for message in record.transcript:
        if message.role == "system":
            continue
        calls = "".join(f" [{c.name}]" for c in message.tool_calls)
        text = " ".join(message.content.split())
        parts.append(f"{message.role}: {text[:120]}{calls}")
    line = " | ".join(parts)
    return line if len(line) <= limit else "…" + line[-(limit - 1):]


def episode_rows(records: list[StoredTry]) -> list[list[Any]]:
    """One row per attempt (its final try) for the W&B episode table (EPISODE_COLUMNS)."""
    rows = []
    for r in sorted(records, key=lambda r: (r.task_id, r.attempt)):
        tokens = sum(u.prompt_tokens + u.completion_tokens for u in r.usage.values())
        rows.append([r.task_id, r.attempt, r.outcome.value, r.reward, r.counts.get("turns", 0), tokens, r.cause[:200],
                     transcript_excerpt(r)])
    return rows


def log_summary(cfg: Config, run_dir: Path, summary: EvalResult, prefix: str,
                records: list[StoredTry] | None = None) -> None:
    """Headline metrics per domain, a per-family table and, given the records, the episode table to the
    logging sink."""
    metrics = {f"{prefix}/{key}": getattr(summary, key) for key in ("pass_at_1", "pass_at_k", "pass_hat_k",
                                                                   "observed_all", "n_tasks", "episodes", "cost_usd")
               if getattr(summary, key) is not None}
    metrics |= {f"{prefix}/outcome/{name}": count for name, count in summary.counts.items()}
    metrics |= {f"{prefix}/attempts/{name}": count for name, count in asdict(summary.tally).items()}
    for domain, group in summary.by_domain.items():
        if group.pass_at_1 is not None:
            metrics[f"{prefix}/{domain}/pass_at_1"] = group.pass_at_1
    rows = [[name, g.n_tasks, g.episodes, g.pass_at_1, g.counts["success"], g.counts["failure"], g.errors]
            for name, g in summary.by_family.items()]
    with stage_sink(cfg, run_dir) as sink:
        sink.log(metrics)
        sink.table(f"{prefix}/families", ["family", "tasks", "episodes", "pass_at_1", "success", "failure",
                                          "errors"], rows)
        if records:
            sink.table(f"{prefix}/episodes", EPISODE_COLUMNS, episode_rows(records))


def headline(records: list[StoredTry], attempts: int) -> dict[str, Any]:
    """pass@k, observed k/k and the short tasks (EvalResult's fields); pass@k and observed k/k None
    (undefined) when no attempt got a verdict."""
    outcomes, _, _ = outcomes_from_records(records)
    if not any(outcomes.values()):  # every attempt errored: there is nothing to estimate, not a 0
        return {"pass_at_k": None, "observed_all": None, "incomplete_tasks": tuple(sorted(outcomes))}
    summary = summarize(outcomes, attempts=attempts, allow_incomplete=True)
    return {"pass_at_k": summary.pass_at_k, "observed_all": summary.observed_all,
            "incomplete_tasks": tuple(summary.incomplete), "pass_hat_k": summary.pass_hat_k}


@dataclass
class OpenRun:
    """A campaign's run folder, results store, and the world its episodes play in (this shard's tasks)."""

    run_dir: Path
    log: ResultStore
    world: EpisodeWorld

    @property
    def backend(self) -> Backend:
        return self.world.backend

    @property
    def runtimes(self) -> dict[str, TaskRuntime]:
        return self.world.runtimes  # type: ignore[return-value]  (open_run's are TaskRuntimes)


@contextmanager
def open_run(cfg: Config, stage: str) -> Iterator[OpenRun]:
    """Check the settings, resolve this shard's tasks, open the backend, prepare the tasks, build the episode
    world (which checks the faults), open the run folder (the run's identity) and its store; close the store
    and backend on the way out. The run folder's files are written only once the start-up checks passed, so
    a failing start leaves an earlier run as it was; other processes' tries are read back once the body
    finished."""
    validate_eval(cfg)
    every_task = resolve_tasks(cfg.tasks)
    tasks = every_task[cfg.eval.shard :: cfg.eval.num_shards]
    if not tasks:
        raise ConfigError("conf/tasks", "tasks", "the task set is empty after filtering",
                          "check tasks.split, tasks.families, tasks.limit and the shard")
    identity = run_identity(cfg, every_task)
    suffix = f".shard{cfg.eval.shard}of{cfg.eval.num_shards}" if cfg.eval.num_shards > 1 else ""
    backend = build_backend(cfg)
    try:
        world = build_world(cfg, backend, prepare_all(cfg, tasks, backend))
        run_dir = resolve_run_dir(cfg)
        log = open_store(cfg.store.url, run_dir, identity, stage, cfg.store.timeout_s)
        try:
            save_run_meta(run_dir, cfg, every_task)
            write_runtimes(run_dir / f"tasks{suffix}.jsonl", world.runtimes)
            yield OpenRun(run_dir, log, world)
            log.refresh()  # other processes on this run (its workers too) stored theirs
        finally:
            log.close()
    finally:
        backend.close()


def write_summary(cfg: Config, run_dir: Path, log: ResultStore, task_ids: Iterable[str], label: str, title: str,
                  out: TextIO | None = None) -> EvalResult:
    """The run's summary over the final try of every (task, attempt) asked: summary.json, the logging
    sink, `summary_path`, and the table printed to `out` (stdout by default). `label` names the agent.
    A run without any verdict (every attempt errored) reports pass@1 as undefined and exits 3."""
    wanted = {(t, a) for t in task_ids for a in range(cfg.eval.attempts)}
    records = [r for r in log.final_records() if (r.task_id, r.attempt) in wanted]
    outcomes = outcome_summary(records)
    no_verdict = outcomes.pass_at_1 is None and bool(records)
    summary = EvalResult.of(outcomes, **headline(records, cfg.eval.attempts), k=cfg.eval.attempts,
                            run_dir=str(run_dir), policy=label, tasks=cfg.tasks.name, attempts=cfg.eval.attempts,
                            error_tries=log.error_tries(), cost_usd=sum(r.cost_usd for r in log.records),
                            tally=attempt_tally(records, {t for t, _ in wanted}, cfg.eval.attempts),
                            exit_code=EXIT_NO_VERDICT if no_verdict else 0)
    text = json.dumps(summary.to_json(), indent=2)
    write_text(run_dir / "summary.json", text)
    log_summary(cfg, run_dir, summary, "eval", records)
    if cfg.summary_path:
        write_text(cfg.summary_path, text, "summary_path")
    print(format_summary(outcomes, title, summary.tally), file=out or sys.stdout)
    if summary.k > 1 and summary.pass_at_k is not None:
        print(f"k={summary.k}: pass@{summary.k} {100 * summary.pass_at_k:.1f}%  pass^{summary.k} "
              f"{100 * summary.pass_hat_k:.1f}%  observed {summary.k}/{summary.k} {100 * summary.observed_all:.1f}%",
              file=out or sys.stdout)
    print(f"look at the episodes: {viewer_command([str(run_dir)])}", file=out or sys.stdout)
    if no_verdict:
        print(f"no attempt reached a verdict ({summary.errors} errors, {summary.counts['excluded']} "
              f"excluded): pass@1 is undefined; the causes are stored with each try", file=sys.stderr)
    return summary
