"""Summaries of episode outcomes (pure): counts for the terminal, and the reliability metrics.

pass@1 is the mean success over attempts that reached a verdict: error outcomes and exclusions
are reported beside it, never counted as failures; `abandoned` (a served agent left mid-task) is a
verdict, a failure with its own count. Coverage (pass@k, solved at least once) and
repeatability (observed k/k, pass^k) are reported together, never one alone: coverage
alone hides an agent that succeeds only sometimes (docs/evaluation.md).
pass@k uses the unbiased estimator 1 - C(n-c, k) / C(n, k); with exactly k attempts per task it
equals the share of tasks solved at least once, which is what the reference publishes.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from tbx.errors import TbxError
from tbx.records import ERROR_OUTCOMES, AttemptTally, Outcome, OutcomeCounts, OutcomeSummary, StoredTry

VERDICTS = (Outcome.SUCCESS, Outcome.FAILURE, Outcome.ABANDONED)  # outcomes with a reward (1, 0, 0)


def _rate(counts: Counter) -> float | None:
    judged = sum(counts[o] for o in VERDICTS)
    return counts[Outcome.SUCCESS] / judged if judged else None


class Attempt(Protocol):
    """What counting outcomes reads of an attempt's final try: a stored try (`tbx.records.StoredTry`) or the
    viewer's row of one (`tbx.view.store.AttemptRow`). `outcome` is an Outcome or its value."""

    task_id: str
    attempt: int
    domain: str
    outcome: str


def _group(records: Iterable[Attempt]) -> OutcomeCounts:
    counts: Counter = Counter()
    tasks = set()
    for record in records:
        counts[Outcome(record.outcome)] += 1
        tasks.add(record.task_id)
    return OutcomeCounts(n_tasks=len(tasks), episodes=sum(counts.values()), pass_at_1=_rate(counts),
                         counts={o.value: counts[o] for o in Outcome}, errors=sum(counts[o] for o in ERROR_OUTCOMES))


def outcome_summary(records: Sequence[StoredTry]) -> OutcomeSummary:
    """Summary of final tries: overall, per domain, per family, with their tokens and tool calls."""
    by_domain: dict[str, list] = defaultdict(list)
    by_family: dict[str, list] = defaultdict(list)
    tokens: Counter = Counter()
    tools: Counter = Counter()
    for record in records:
        by_domain[record.domain].append(record)
        by_family[f"{record.domain}/{record.family}"].append(record)
        for role, usage in record.usage.items():
            for kind, value in usage.to_dict().items():
                tokens[f"{role}_{kind}"] += value
        tools.update(record.counts)
    overall = _group(records)
    return OutcomeSummary(
        n_tasks=overall.n_tasks, episodes=overall.episodes, pass_at_1=overall.pass_at_1, counts=overall.counts,
        errors=overall.errors, by_domain={name: _group(rs) for name, rs in sorted(by_domain.items())},
        by_family={name: _group(rs) for name, rs in sorted(by_family.items())}, tokens=dict(tokens),
        tool_calls=tools["tool_calls"], tool_errors=tools["tool_errors"], malformed_calls=tools["malformed_calls"])


def format_summary(summary: OutcomeSummary, title: str, tally: AttemptTally | None = None) -> str:
    """A plain-text table for the terminal, with where the attempts asked stand (`tally`) below it."""
    def pct(value: float | None) -> str:
        return "   n/a" if value is None else f"{100 * value:6.1f}%"

    lines = [title, f"{'group':40s} {'tasks':>6s} {'eps':>6s} {'pass@1':>7s} {'succ':>5s} {'fail':>5s} "
             f"{'error':>5s} {'excl':>5s}"]
    rows: list[tuple[str, OutcomeCounts]] = [("all", summary), *summary.by_family.items()]
    for name, group in rows:
        c = group.counts
        failed = c["failure"] + c["abandoned"]
        lines.append(f"{name[:40]:40s} {group.n_tasks:6d} {group.episodes:6d} {pct(group.pass_at_1)} "
                     f"{c['success']:5d} {failed:5d} {group.errors:5d} {c['excluded']:5d}")
    if summary.counts["abandoned"]:
        lines.append(f"fail includes {summary.counts['abandoned']} abandoned (the agent left before the user "
                     "ended the conversation)")
    if tally is not None:
        lines.append(tally.line())
    return "\n".join(lines)


# --- pass@k, pass^k and the per-task view -------------------------------------------------------
#
# The functions below work on `outcomes`: task id -> one boolean per attempt that reached a verdict
# (True = success). Errors and exclusions never enter these lists; `outcomes_from_records` builds
# them from stored records and counts the rest separately.

JUDGED = {Outcome.SUCCESS.value: True, Outcome.FAILURE.value: False, Outcome.ABANDONED.value: False}
NOT_JUDGED = tuple(o.value for o in Outcome if o not in VERDICTS)  # errors and exclusions


class IncompleteInventoryError(TbxError, ValueError):
    """Some tasks have fewer judged attempts than asked; `missing` lists (task_id, have, want)."""

    def __init__(self, missing: list[tuple[str, int, int]]):
        self.missing = missing
        shown = ", ".join(f"{task} ({have} of {want})" for task, have, want in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        super().__init__(
            f"{len(missing)} task(s) have fewer judged attempts than asked: {shown}{more}. Fix: finish "
            "them (re-run the eval stage, which resumes), or pass allow_incomplete=True to summarize "
            "what is there (each short task then counts with the attempts it has)")


def _check_counts(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 attempts and 0 <= c <= n successes; got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..n (n={n}): the estimator needs at least k attempts; "
                         "ask for a smaller k or run more attempts")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one of k attempts succeeds) from c of n: 1 - C(n-c, k) / C(n, k)."""
    _check_counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased P(all k attempts succeed) from c of n (pass^k): C(c, k) / C(n, k)."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Summary:
    """Reliability of one run (or one domain of it) over the tasks that have judged attempts.

    pass_at_1 is pooled over attempts (successes / attempts); pass_at_k is the mean over tasks of
    the unbiased estimator at k (= the share of tasks solved at least once when every task has
    exactly k attempts); observed_all is the share of tasks that succeeded in every attempt.
    `incomplete` names the tasks with fewer than k attempts (only when allow_incomplete=True).
    """

    n_tasks: int
    attempts: int
    successes: int
    k: int
    pass_at_1: float
    pass_at_k: float
    observed_all: float
    tasks_all: int  # tasks at k/k
    tasks_any: int  # tasks solved at least once
    incomplete: tuple[str, ...] = ()
    by_domain: dict[str, Summary] = field(default_factory=dict)
    # τ²-bench's pass^k: the mean over tasks of the unbiased P(all k attempts succeed), C(c, k) / C(n, k); with
    # exactly k attempts per task it is observed k/k
    pass_hat_k: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resolve_k(outcomes: Mapping[str, Sequence[bool]], attempts: int | None,
               allow_incomplete: bool) -> tuple[int, tuple[str, ...]]:
    """The k of the run (asked, or the most attempts any task has) and the tasks short of it."""
    if not outcomes:
        raise ValueError("no tasks to summarize: outcomes is empty")
    k = attempts if attempts is not None else max(len(v) for v in outcomes.values())
    if k < 1:
        raise ValueError(f"k={k}: no task has a judged attempt (all errors or exclusions?)")
    missing = [(task, len(v), k) for task, v in sorted(outcomes.items()) if len(v) < k]
    if missing and not allow_incomplete:
        raise IncompleteInventoryError(missing)
    return k, tuple(task for task, _, _ in missing)


def _task_arrays(outcomes: Mapping[str, Sequence[bool]], k: int) -> dict[str, np.ndarray]:
    """Per task with >= 1 attempt: attempts n, successes c, pass@min(k, n), all-succeeded flag."""
    judged = [list(v) for v in outcomes.values() if len(v) > 0]
    n = np.array([len(v) for v in judged], dtype=np.int64)
    c = np.array([sum(bool(x) for x in v) for v in judged], dtype=np.int64)
    pak = np.array([pass_at_k(int(ni), int(ci), min(k, int(ni))) for ni, ci in zip(n, c, strict=True)])
    hat = np.array([pass_hat_k(int(ni), int(ci), min(k, int(ni))) for ni, ci in zip(n, c, strict=True)])
    return {"n": n, "c": c, "pass_at_k": pak, "pass_hat_k": hat, "all": (c == n).astype(np.float64)}


def _summary(outcomes: Mapping[str, Sequence[bool]], k: int, incomplete: tuple[str, ...]) -> Summary:
    a = _task_arrays(outcomes, k)
    if len(a["n"]) == 0:
        raise ValueError(f"no task among {sorted(outcomes)[:5]} has a judged attempt")
    return Summary(
        n_tasks=len(a["n"]), attempts=int(a["n"].sum()), successes=int(a["c"].sum()), k=k,
        pass_at_1=float(a["c"].sum() / a["n"].sum()), pass_at_k=float(a["pass_at_k"].mean()),
        observed_all=float(a["all"].mean()), tasks_all=int(a["all"].sum()), tasks_any=int((a["c"] > 0).sum()),
        incomplete=tuple(t for t in incomplete if t in outcomes), pass_hat_k=float(a["pass_hat_k"].mean()))


def summarize(outcomes: Mapping[str, Sequence[bool]], domains: Mapping[str, str] | None = None, *,
              attempts: int | None = None, allow_incomplete: bool = False) -> Summary:
    """pass@1, pass@k and observed k/k overall and per domain.

    k is `attempts` when given, else the most attempts any task has. A task with fewer attempts
    than k raises IncompleteInventoryError (naming the tasks) unless allow_incomplete=True; a task
    with more uses the unbiased estimator at k.
    """
    k, incomplete = _resolve_k(outcomes, attempts, allow_incomplete)
    overall = _summary(outcomes, k, incomplete)
    if domains is None:
        return overall
    unplaced = sorted(set(outcomes) - set(domains))
    if unplaced:
        raise ValueError(f"no domain for task(s) {unplaced[:10]}: give every task id a domain")
    groups: dict[str, dict[str, Sequence[bool]]] = defaultdict(dict)
    for task, values in outcomes.items():
        groups[domains[task]][task] = values
    by_domain = {d: _summary(g, k, incomplete) for d, g in sorted(groups.items())
                 if any(len(v) for v in g.values())}
    return replace(overall, by_domain=by_domain)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def jeffreys_interval(successes: float, trials: float, level: float = 0.95) -> tuple[float, float]:
    """The Jeffreys interval: central quantiles of Beta(x + 1/2, n - x + 1/2), with the lower end 0 at
    x = 0 and the upper end 1 at x = n (Brown, Cai & DasGupta 2001). x may be fractional (pass@k sums
    per-task estimates). For 0 of 10: [0, 0.217]; never [0, 0] as a bootstrap of all-0 outcomes is."""
    from scipy.stats import beta

    if trials <= 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    low = 0.0 if successes <= 0 else float(beta.ppf(tail, successes + 0.5, trials - successes + 0.5))
    high = 1.0 if successes >= trials else float(beta.ppf(1 - tail, successes + 0.5, trials - successes + 0.5))
    return low, high


@dataclass(frozen=True)
class BootstrapCI:
    """Intervals for pass@1, pass@k and observed k/k: the hull of a percentile bootstrap over tasks
    (resampled with replacement, attempts staying with their task, so correlated attempts widen it)
    and the Jeffreys interval on the pooled counts (attempts for pass@1, tasks for the others), so a
    result of all 0 or all 1, where every resample agrees, still says how little n attempts show."""

    pass_at_1: Interval
    pass_at_k: Interval
    observed_all: Interval
    k: int
    resamples: int
    level: float


def bootstrap_ci(outcomes: Mapping[str, Sequence[bool]], rng: np.random.Generator, *,
                 attempts: int | None = None, allow_incomplete: bool = False,
                 resamples: int = 2000, level: float = 0.95) -> BootstrapCI:
    """Task-level bootstrap CIs for pass@1, pass@k and observed k/k (same k rules as summarize)."""
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1; got {resamples}, {level}")
    k, _ = _resolve_k(outcomes, attempts, allow_incomplete)
    a = _task_arrays(outcomes, k)
    index = rng.integers(0, len(a["n"]), size=(resamples, len(a["n"])))
    draws = {
        "pass_at_1": a["c"][index].sum(axis=1) / a["n"][index].sum(axis=1),
        "pass_at_k": a["pass_at_k"][index].mean(axis=1),
        "observed_all": a["all"][index].mean(axis=1),
    }
    estimates = {"pass_at_1": a["c"].sum() / a["n"].sum(), "pass_at_k": a["pass_at_k"].mean(),
                 "observed_all": a["all"].mean()}
    counts = {"pass_at_1": (a["c"].sum(), a["n"].sum()), "pass_at_k": (a["pass_at_k"].sum(), len(a["n"])),
              "observed_all": (a["all"].sum(), len(a["n"]))}
    tail = (1 - level) / 2
    intervals = {}
    for name, d in draws.items():
        low, high = (float(q) for q in np.quantile(d, [tail, 1 - tail]))
        jeffreys = jeffreys_interval(float(counts[name][0]), float(counts[name][1]), level)
        intervals[name] = Interval(float(estimates[name]), min(low, jeffreys[0]), max(high, jeffreys[1]))
    return BootstrapCI(k=k, resamples=resamples, level=level, **intervals)


@dataclass(frozen=True)
class FlipStats:
    """How often a task's verdict changes across attempts.

    A task *flips* when it has both a success and a failure. `minority_share[task]` is the
    fraction of its attempts that differ from its majority verdict, min(c, n - c) / n: 0 for a
    task that always (or never) succeeds, 0.5 at most (a tie). Rates are over tasks with >= 1
    judged attempt; a task with a single attempt cannot flip.
    """

    flip_rate: float
    flipping_tasks: int
    n_tasks: int
    mean_minority_share: float
    minority_share: dict[str, float]


def flip_stats(outcomes: Mapping[str, Sequence[bool]]) -> FlipStats:
    shares: dict[str, float] = {}
    flipping = 0
    for task, values in sorted(outcomes.items()):
        n, c = len(values), sum(bool(x) for x in values)
        if n == 0:
            continue
        shares[task] = min(c, n - c) / n
        flipping += 0 < c < n
    if not shares:
        raise ValueError("no task has a judged attempt")
    return FlipStats(flip_rate=flipping / len(shares), flipping_tasks=flipping, n_tasks=len(shares),
                     mean_minority_share=sum(shares.values()) / len(shares), minority_share=shares)


@dataclass(frozen=True)
class PassCurves:
    """Mean over tasks of pass@k and pass^k for k = 1..K (K as in summarize).

    A task with fewer than k attempts (allowed only with allow_incomplete) counts at min(k, n),
    as summarize counts it, so the last point equals summarize's pass_at_k and observed_all.
    """

    ks: tuple[int, ...]
    pass_at_k: tuple[float, ...]
    pass_hat_k: tuple[float, ...]


def pass_curves(outcomes: Mapping[str, Sequence[bool]], *, attempts: int | None = None,
                allow_incomplete: bool = False) -> PassCurves:
    k_max, _ = _resolve_k(outcomes, attempts, allow_incomplete)
    counts = [(len(v), sum(bool(x) for x in v)) for v in outcomes.values() if len(v) > 0]
    ks = tuple(range(1, k_max + 1))
    at = tuple(sum(pass_at_k(n, c, min(k, n)) for n, c in counts) / len(counts) for k in ks)
    hat = tuple(sum(pass_hat_k(n, c, min(k, n)) for n, c in counts) / len(counts) for k in ks)
    return PassCurves(ks=ks, pass_at_k=at, pass_hat_k=hat)


# --- from stored records ------------------------------------------------------------------------

def outcomes_from_records(records: Iterable[Attempt]
                          ) -> tuple[dict[str, list[bool]], dict[str, str], dict[str, int]]:
    """Final tries -> (outcomes, domains, error_counts).

    outcomes: task id -> success booleans in attempt order, success/failure only; a task whose
    every attempt erred is present with an empty list, so inventory checks see it.
    error_counts: outcome name -> count for infra_error, user_sim_error, verifier_error, excluded.
    Pass final tries (one per task and attempt); a duplicate raises.
    """
    judged: dict[str, dict[int, bool]] = {}
    domains: dict[str, str] = {}
    errors = dict.fromkeys(NOT_JUDGED, 0)
    seen: set[tuple[str, int]] = set()
    for record in records:
        task, attempt, outcome = record.task_id, int(record.attempt), str(record.outcome)
        if (task, attempt) in seen:
            raise ValueError(f"two records for task {task!r} attempt {attempt}: pass final records only")
        seen.add((task, attempt))
        domains[task] = record.domain
        judged.setdefault(task, {})  # a task with only errors still appears
        if outcome in JUDGED:
            judged[task][attempt] = JUDGED[outcome]
        elif outcome in errors:
            errors[outcome] += 1
        else:
            raise ValueError(f"task {task!r} attempt {attempt}: unknown outcome {outcome!r}; "
                             f"expected one of {[o.value for o in Outcome]}")
    outcomes = {task: [v[a] for a in sorted(v)] for task, v in sorted(judged.items())}
    return outcomes, domains, errors


def check_inventory(records: Iterable[Attempt], task_ids: Iterable[str], attempts: int) -> list[tuple[str, int, int]]:
    """(task_id, have, want) for every task in task_ids with fewer than `attempts` judged attempts.

    have counts distinct attempt indices below `attempts` that reached success or failure.
    """
    have: dict[str, set[int]] = defaultdict(set)
    for record in records:
        if str(record.outcome) in JUDGED and int(record.attempt) < attempts:
            have[record.task_id].add(int(record.attempt))
    return [(task, len(have[task]), attempts) for task in sorted(set(task_ids)) if len(have[task]) < attempts]


def attempt_tally(records: Iterable[Attempt], asked: Iterable[str], attempts: int) -> AttemptTally:
    """How the `attempts` asked of each task of `asked` ended, from final tries (others are left out)."""
    tasks = set(asked)
    counts = Counter(Outcome(r.outcome) for r in records if r.task_id in tasks and int(r.attempt) < attempts)
    return AttemptTally(asked=len(tasks) * attempts, judged=sum(counts[o] for o in VERDICTS),
                        errored=sum(counts[o] for o in ERROR_OUTCOMES), excluded=counts[Outcome.EXCLUDED],
                        abandoned=counts[Outcome.ABANDONED], missing=len(tasks) * attempts - sum(counts.values()))
