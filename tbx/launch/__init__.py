"""Launching: a pure job plan from config + hardware (`plan`), submitit dispatch (`dispatch`) and
a Ray cluster inside a job (`ray_cluster`). launch.py calls `plan_for` and `dispatch`."""

from __future__ import annotations

from tbx.config import Config
from tbx.launch.dispatch import dispatch, run_stage
from tbx.launch.plan import JobPlan, TrainBatch, make_plan
from tbx.runs.stages import stage_of

__all__ = ["JobPlan", "TrainBatch", "dispatch", "make_plan", "plan_for", "run_stage"]


def plan_for(cfg: Config) -> JobPlan:
    """`make_plan` with the size of the task set when the campaign is sharded (to check the shard count)."""
    n_tasks = None
    if cfg.launcher.shards > 1 and stage_of(cfg).shardable:
        from tbx.catalog import resolve_tasks

        n_tasks = len(resolve_tasks(cfg.tasks))
    return make_plan(cfg, n_tasks=n_tasks)
