"""Campaigns: a run's attempts of a task set, played and stored, used by every stage that plays
episodes (eval, probe, serve, train) so that no stage is a library for another.

- `run_campaign`: play every pending (task, attempt) in this process or spread over worker processes
  (`eval.workers`, `tbx.campaign.workers`), claimed and stored in the results store (resumable).
- `prepare_all`: the tasks' runtimes (template, initial state, expected changes), from the prepared-
  task cache when their content was prepared before (`tbx.campaign.prepare`).
- `open_run` and `write_summary`: a campaign's run folder and store, and its summary (`run_folder`).
- `build_world`: the episode world (`tbx.episodes.EpisodeWorld`) every episode of a run plays in, per process
  (`components`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm

from tbx.campaign.attempts import pending_attempts, play_attempts, say_replayed
from tbx.campaign.components import build_world
from tbx.campaign.prepare import prepare_all, write_runtimes
from tbx.campaign.run_folder import OpenRun, open_run, validate_eval, write_summary
from tbx.campaign.workers import plan_workers, run_in_workers
from tbx.config import Config
from tbx.episodes import EpisodeWorld
from tbx.store import ResultStore

__all__ = ["OpenRun", "build_world", "open_run", "prepare_all", "run_campaign", "validate_eval", "write_runtimes",
           "write_summary"]


async def run_campaign(cfg: Config, world: EpisodeWorld, log: ResultStore, attempts: dict[str, range], label: str,
                       run_dir: Path) -> None:
    """Run every (task, attempt) of `attempts` that is not final in `log` (attempts an earlier command left in
    error included, within `eval.resume_error_retries`): in this process in `world`, or over worker
    processes (`plan_workers`, each with a world of its own built from `cfg` and the world's runtimes),
    `eval.concurrency` at once in each; record what served the policy in `run_dir`'s run.json. Each attempt
    is claimed in the store first, so however many processes run, every attempt is played once and gets one
    verdict."""
    pending = pending_attempts(cfg, log, attempts)
    if not pending:
        return
    say_replayed(cfg, log, pending)
    workers = plan_workers(cfg, len(pending))
    bar = tqdm(total=len(pending), desc=f"{label} {cfg.policy.name}" + (f" ({workers} workers)" if workers > 1 else ""),
               unit="ep", file=sys.stderr, disable=False, mininterval=2.0, dynamic_ncols=True)
    retried = [0]

    def on_retry(count: int = 1) -> None:  # error tries played again: shown beside the attempts done
        retried[0] += count
        bar.set_postfix_str(f"{retried[0]} error {'try' if retried[0] == 1 else 'tries'} re-run")

    try:
        if workers > 1:
            await run_in_workers(cfg, world.runtimes, log, pending, workers, bar.update, run_dir, on_retry)
            return
        source = iter(pending)
        await play_attempts(cfg, world, log, lambda: next(source, None), lambda: bar.update(1), run_dir, on_retry)
    finally:
        bar.close()
