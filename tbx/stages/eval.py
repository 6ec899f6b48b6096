"""stage=eval: every task of the set, `eval.attempts` times, concurrently, resumable.

Results go to the results store (one row per try; `<run folder>/results.sqlite` unless `store.url`
names a shared database). The campaign itself (run folder, preparation, worker processes, claims,
the summary) is `tbx.campaign`'s. Error outcomes are re-run up to `eval.max_error_retries` times and
never count as failures.
"""

from __future__ import annotations

from tbx.campaign import open_run, run_campaign, write_summary
from tbx.config import Config
from tbx.process.preemption import run_loop
from tbx.runs.results import EvalResult


def run_eval(cfg: Config) -> EvalResult:
    with open_run(cfg, "eval") as run:
        attempts = {task_id: range(cfg.eval.attempts) for task_id in run.runtimes}
        run_loop(run_campaign(cfg, run.world, run.log, attempts, "eval", run.run_dir))
    return write_summary(cfg, run.run_dir, run.log, run.runtimes, cfg.policy.name,
                         f"eval {cfg.tasks.name} with {cfg.policy.name} -> {run.run_dir}")
