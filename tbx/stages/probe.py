"""stage=probe: attempt every candidate task with the base policy to measure its difficulty.

Fixed mode runs `probe.attempts` (n) attempts per task, like the reference. Adaptive mode (our
addition) probes in rounds and stops a task once more attempts are unlikely to change whether
the pool keeps it (posterior predictive flip probability under the chosen pool strategy, see
`tbx.stats.adaptive`), never beyond n. Every attempt goes to the results store, so a killed probe
resumes exactly: rounds are recomputed from what is stored, and nothing final runs again.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from tbx.campaign import build_world, prepare_all, run_campaign, write_runtimes
from tbx.campaign.components import build_backend
from tbx.campaign.workers import check_workers
from tbx.catalog import resolve_tasks
from tbx.config import Config
from tbx.episodes import EpisodeWorld
from tbx.errors import EXIT_NO_VERDICT, ConfigError
from tbx.process.durable import write_text
from tbx.process.preemption import run_loop
from tbx.records import Outcome
from tbx.runs.identity import resolve_run_dir, run_identity, save_run_meta
from tbx.runs.results import ProbedTask, ProbeResult
from tbx.runs.sinks import stage_sink
from tbx.stats.adaptive import StoppingRule, should_stop
from tbx.stats.difficulty import describe
from tbx.stats.pool import PoolStrategy, full_param_strategy, lora_strategy
from tbx.store import ResultStore, open_store


def counts(store: ResultStore, below: int | None = None) -> dict[str, tuple[int, int]]:
    """(k, n) per task: successes among final attempts that reached a verdict (attempts < `below`)."""
    tally: dict[str, list[int]] = {}
    for record in store.final_records():
        if below is not None and record.attempt >= below:
            continue
        k_n = tally.setdefault(record.task_id, [0, 0])
        if record.outcome in (Outcome.SUCCESS, Outcome.FAILURE):
            k_n[0] += record.outcome is Outcome.SUCCESS
            k_n[1] += 1
    return {task: (k, n) for task, (k, n) in tally.items()}


def decision_strategies(cfg: Config) -> tuple[PoolStrategy, ...]:
    """The pool decisions adaptive stopping protects: the chosen strategy's (about half the
    episodes of fixed n in our simulation), or with `probe.protect_both` also both reference
    strategies' (about two thirds), so that one probe serves either pool."""
    chosen = PoolStrategy(cfg.pool.name, tuple(tuple(r) for r in cfg.pool.keep_ranges))
    return (full_param_strategy(), lora_strategy(), chosen) if cfg.probe.protect_both else (chosen,)


def validate_probe(cfg: Config) -> StoppingRule:
    p = cfg.probe
    if p.attempts < 1:
        raise ConfigError("conf/config.yaml", "probe.attempts", f"is {p.attempts}", "give probe.attempts >= 1")
    try:
        return StoppingRule(kind=p.rule, threshold=p.threshold, min_attempts=p.min_attempts,
                            round_size=p.round_size)
    except ValueError as exc:
        raise ConfigError("conf/config.yaml", f"probe.{p.rule}", str(exc), "see the probe settings") from exc


async def _probe(cfg: Config, world: EpisodeWorld, store: ResultStore, rule: StoppingRule, run_dir: Path) -> int:
    """Run the rounds; return how many rounds ran."""
    n_max, edges, runtimes = cfg.probe.attempts, cfg.difficulty.edges, world.runtimes
    if not cfg.probe.adaptive:
        await run_campaign(cfg, world, store, {t: range(n_max) for t in runtimes}, "probe", run_dir)
        store.refresh()
        return 1
    strategies = decision_strategies(cfg)
    done: set[str] = set()
    rounds, target = 0, min(max(rule.min_attempts, rule.round_size), n_max)
    while True:
        active = {t: range(target) for t in runtimes if t not in done}
        if not active:
            return rounds
        rounds += 1
        await run_campaign(cfg, world, store, active, f"probe r{rounds} (n={target})", run_dir)
        store.refresh()  # the round's attempts other processes played: every process decides alike
        # a resumed probe may hold attempts of a later round (killed mid-round): the decision counts
        # only this round's attempts, so it is the one the uninterrupted probe made at this n
        tallies = counts(store, below=target)
        for task_id in active:
            k, n = tallies.get(task_id, (0, 0))
            if target >= n_max or (n > 0 and should_stop(k, n, n_max, rule, strategies, edges)):
                done.add(task_id)
        target = min(target + rule.round_size, n_max)


def run_probe(cfg: Config) -> ProbeResult:
    """Start-up checks first (tasks, backend, store): a failing start leaves an earlier run as it was."""
    rule = validate_probe(cfg)
    check_workers(cfg)
    every_task = resolve_tasks(cfg.tasks)
    tasks = every_task[cfg.eval.shard :: cfg.eval.num_shards]
    if not tasks:
        raise ConfigError("conf/tasks", "tasks", "the task set is empty", "pick a task set with tasks=...")
    identity = run_identity(cfg, every_task)
    backend = build_backend(cfg)
    try:
        run_dir = resolve_run_dir(cfg)
        store = open_store(cfg.store.url, run_dir, identity, "probe", cfg.store.timeout_s)
        try:
            world = build_world(cfg, backend, prepare_all(cfg, tasks, backend))
            save_run_meta(run_dir, cfg)
            write_runtimes(run_dir / "tasks.jsonl", world.runtimes)
            rounds = run_loop(_probe(cfg, world, store, rule, run_dir))
        finally:
            store.close()
    finally:
        backend.close()
    per_task = {}
    for task_id, (k, n) in sorted(counts(store).items()):
        d = describe(k, n, cfg.difficulty.edges) if n else None
        per_task[task_id] = ProbedTask(k=k, n=n, band=None if d is None else cfg.difficulty.names[d.band],
                                       mean=None if d is None else round(d.mean, 4))
    episodes = len(store.records)
    bands = Counter(v.band for v in per_task.values())
    no_verdict = bool(episodes) and all(v.n == 0 for v in per_task.values())
    summary = ProbeResult(
        run_dir=str(run_dir), n_tasks=len(per_task), rounds=rounds, episodes=episodes, error_tries=store.error_tries(),
        episodes_share_of_fixed_n=episodes / (cfg.probe.attempts * max(len(per_task), 1)),
        bands={name: bands.get(name, 0) for name in cfg.difficulty.names} | {"no verdict": bands.get(None, 0)},
        cost_usd=sum(r.cost_usd for r in store.records), tasks=per_task,
        exit_code=EXIT_NO_VERDICT if no_verdict else 0)
    write_text(run_dir / "probe.json", json.dumps(summary.to_json(), indent=2))
    with stage_sink(cfg, run_dir) as sink:
        sink.log({"probe/episodes": episodes, "probe/episodes_share_of_fixed_n": summary.episodes_share_of_fixed_n,
                  "probe/cost_usd": summary.cost_usd} | {f"probe/band/{b}": c for b, c in summary.bands.items()})
        sink.table("probe/tasks", ["task", "k", "n", "band", "mean"],
                   [[t, v.k, v.n, v.band, v.mean] for t, v in per_task.items()])
    print(f"probe {cfg.tasks.name} with {cfg.policy.name}: {summary.n_tasks} tasks, {episodes} episodes "
          f"({100 * summary.episodes_share_of_fixed_n:.0f}% of fixed n={cfg.probe.attempts}), "
          f"{rounds} round(s) -> {run_dir}")
    print("bands: " + ", ".join(f"{name}: {count}" for name, count in summary.bands.items()))
    if no_verdict:
        print(f"no attempt reached a verdict ({summary.error_tries} error tries): no task has a band",
              file=sys.stderr)
    return summary
