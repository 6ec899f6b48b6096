"""The runs a report compares, and everything derived from them once (metrics, cost, flips)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tbx.records import AttemptTally, StoredTry
from tbx.stats.cost import CampaignCost, Prices, ReliabilityCost, campaign_cost, reliability_cost
from tbx.stats.metrics import (
    BootstrapCI,
    FlipStats,
    PassCurves,
    Summary,
    attempt_tally,
    bootstrap_ci,
    flip_stats,
    outcomes_from_records,
    pass_curves,
    summarize,
)
from tbx.stats.paired import PairedDifference, paired_difference


@dataclass(frozen=True)
class RunData:
    """One evaluated run: its final tries (as stored) and how to price them.

    The agent's tokens are priced as `model_name`; the simulated user's and the judge's as
    `user_model` and `judge_model` (empty when that role spent no tokens). `k` is the attempts
    asked per task; a task with fewer judged attempts stops the report unless allow_incomplete.
    A model priced 0 in and out has no price: its cost is n/a. `billed_records`, when given, are what the bill sums (every try, retried errors included);
    otherwise `records` are billed. `tasks`, when given, is the set the run was asked to play: a task of
    it without any stored try counts as short of k too (a run killed between tasks is not complete).
    """

    name: str
    records: Sequence[StoredTry]
    model_name: str
    prices: Mapping[str, Prices]
    k: int
    user_model: str = ""
    judge_model: str = ""
    allow_incomplete: bool = False
    billed_records: Sequence[StoredTry] | None = None
    tasks: Mapping[str, str] | None = None  # the run's task set (id -> domain, from run.json); None: as stored
    unseen_roles: tuple[str, ...] = ()  # roles whose tokens tbx never sees (a served agent's): n/a, never 0

    def role_models(self) -> dict[str, str]:
        return {"agent": self.model_name, "user": self.user_model, "judge": self.judge_model}


@dataclass(frozen=True)
class RunStats:
    """A run with its metrics, bill and per-attempt verdicts, computed once for every table and figure."""

    run: RunData
    outcomes: dict[str, list[bool]]  # task -> judged attempts, in attempt order
    domains: dict[str, str]
    errors: dict[str, int]  # outcome -> count, errors and exclusions
    cells: dict[str, dict[int, str]]  # task -> attempt -> outcome, every outcome
    summary: Summary
    cost: CampaignCost
    reliability: ReliabilityCost
    flips: FlipStats
    curves: PassCurves
    ci: BootstrapCI
    tally: AttemptTally  # the attempts asked (the run's task set x k): judged, errored, abandoned, missing

    @property
    def name(self) -> str:
        return self.run.name

    def success_rate(self, task: str) -> float | None:
        values = self.outcomes.get(task, [])
        return sum(values) / len(values) if values else None


def compute_stats(run: RunData, rng: np.random.Generator, resamples: int = 2000) -> RunStats:
    if not run.records:
        raise ValueError(f"run {run.name!r} has no records")
    outcomes, domains, errors = outcomes_from_records(run.records)
    cells: dict[str, dict[int, str]] = {}
    for record in run.records:
        cells.setdefault(record.task_id, {})[record.attempt] = record.outcome.value
    unplayed = {task: domain for task, domain in (run.tasks or {}).items() if task not in outcomes}
    summary = summarize(outcomes | {task: [] for task in unplayed}, domains | unplayed, attempts=run.k,
                        allow_incomplete=run.allow_incomplete)
    billed = run.records if run.billed_records is None else run.billed_records
    cost = campaign_cost(billed, run.role_models(), run.prices, unseen=run.unseen_roles)
    return RunStats(
        run=run, outcomes=outcomes, domains=domains, errors=errors, cells=cells, summary=summary, cost=cost,
        reliability=reliability_cost(cost, summary.successes, summary.tasks_all),
        flips=flip_stats(outcomes),
        curves=pass_curves(outcomes, attempts=run.k, allow_incomplete=run.allow_incomplete),
        ci=bootstrap_ci(outcomes, rng, attempts=run.k, allow_incomplete=run.allow_incomplete,
                        resamples=resamples),
        tally=attempt_tally(run.records, set(run.tasks or ()) | set(outcomes), run.k))


@dataclass(frozen=True)
class Comparison:
    """One run against the base: the paired difference on their shared tasks, overall ("all") and per
    domain (a domain's tasks only), for Table 1 and the heat map."""

    base: RunStats
    new: RunStats
    by_domain: dict[str, PairedDifference | None]

    @property
    def overall(self) -> PairedDifference | None:
        return self.by_domain["all"]


def _in_domain(stats: RunStats, domain: str | None) -> dict[str, list[bool]]:
    """The run's outcomes of one domain's tasks (every task with None)."""
    return {t: v for t, v in stats.outcomes.items() if domain is None or stats.domains.get(t) == domain}


def compare_runs(base: RunStats, new: RunStats, rng: np.random.Generator, resamples: int = 2000) -> Comparison:
    k = base.summary.k
    groups = {"all": None} | {d: d for d in sorted(set(base.domains.values()) | set(new.domains.values()))}
    by_domain = {}
    for name, domain in groups.items():
        by_domain[name] = paired_difference(_in_domain(base, domain), _in_domain(new, domain), k, rng, resamples)
    return Comparison(base, new, by_domain)
