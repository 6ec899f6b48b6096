"""The paired per-task difference between two runs on the tasks they share (pure).

A before/after comparison plays the same tasks twice, so the question is how much each task moved,
not how far apart two independent samples are. `paired_difference` resamples the shared tasks with
replacement (a task's attempts in both runs travel together, so their correlation widens the
interval as it should) and takes the percentile interval of new - base for pass@1 (pooled over the
resampled attempts), pass@k and observed k/k. Where both runs are all 0 or all 1 on a rate (every task
failed, or every task passed, in each run), every resample gives the same change and the bootstrap has
no width, though n attempts cannot show a rate exactly: there the interval is the square-and-add
(MOVER, Newcombe 1998) combination of the two runs' Jeffreys intervals, so 0 of 10 against 0 of 10 is
0 [-21.7, +21.7] pp, never [0, 0], as the report's text promises. Elsewhere the paired bootstrap
stands alone (a change that every task shares exactly, +5 of 20 each, is [+25, +25] over those tasks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tbx.stats.metrics import Interval, jeffreys_interval, pass_at_k

RATES = ("pass_at_1", "pass_at_k", "observed_all")


@dataclass(frozen=True)
class PairedDifference:
    """new - base on `n_tasks` shared tasks (rates as fractions); `better`/`worse` count the tasks whose
    success rate rose/fell; `level` the interval's coverage."""

    pass_at_1: Interval
    pass_at_k: Interval
    observed_all: Interval
    n_tasks: int
    better: int
    worse: int
    resamples: int
    level: float

    def interval(self, rate: str) -> Interval:
        return getattr(self, rate)

    def excludes_zero(self, rate: str) -> bool:
        """Whether the interval of `rate` lies wholly above or below 0: a change beyond the noise."""
        i = self.interval(rate)
        return i.low > 0 or i.high < 0


def _arrays(outcomes: Mapping[str, Sequence[bool]], tasks: Sequence[str], k: int) -> dict[str, np.ndarray]:
    n = np.array([len(outcomes[t]) for t in tasks], dtype=np.int64)
    c = np.array([sum(bool(x) for x in outcomes[t]) for t in tasks], dtype=np.int64)
    pak = np.array([pass_at_k(int(ni), int(ci), min(k, int(ni))) for ni, ci in zip(n, c, strict=True)])
    return {"n": n, "c": c, "pass_at_k": pak, "all": (c == n).astype(np.float64)}


def _counts(a: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """(successes, trials) behind each rate: attempts for pass@1, tasks for the others."""
    tasks = float(len(a["n"]))
    return {"pass_at_1": (float(a["c"].sum()), float(a["n"].sum())),
            "pass_at_k": (float(a["pass_at_k"].sum()), tasks), "observed_all": (float(a["all"].sum()), tasks)}


def _at_bounds(successes: float, trials: float) -> bool:
    return successes <= 0 or successes >= trials


def mover_interval(base: tuple[float, float], new: tuple[float, float], level: float) -> tuple[float, float]:
    """new - base from each run's (successes, trials) by square-and-add over their Jeffreys intervals."""
    (xb, nb), (xn, nn) = base, new
    pb, pn = xb / nb, xn / nn
    (lb, ub), (ln, un) = jeffreys_interval(xb, nb, level), jeffreys_interval(xn, nn, level)
    change = pn - pb
    return change - float(np.hypot(pn - ln, ub - pb)), change + float(np.hypot(un - pn, pb - lb))


def _rates(a: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Each rate over the tasks `index` picks (last axis), for every row of `index`."""
    return {"pass_at_1": a["c"][index].sum(axis=-1) / a["n"][index].sum(axis=-1),
            "pass_at_k": a["pass_at_k"][index].mean(axis=-1), "observed_all": a["all"][index].mean(axis=-1)}


def shared_tasks(base: Mapping[str, Sequence[bool]], new: Mapping[str, Sequence[bool]]) -> list[str]:
    """Tasks with at least one judged attempt in both runs, sorted."""
    return sorted(t for t in set(base) & set(new) if len(base[t]) and len(new[t]))


def paired_difference(base: Mapping[str, Sequence[bool]], new: Mapping[str, Sequence[bool]], k: int,
                      rng: np.random.Generator, resamples: int = 2000, level: float = 0.95) -> PairedDifference | None:
    """new - base on the shared tasks, with percentile-bootstrap intervals over tasks; None when no task
    is shared. `k` is the runs' common attempts per task (pass@k and observed k/k at that k)."""
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1; got {resamples}, {level}")
    tasks = shared_tasks(base, new)
    if not tasks:
        return None
    a, b = _arrays(base, tasks, k), _arrays(new, tasks, k)
    everything = np.arange(len(tasks))
    estimate = {r: float(v) for r, v in _subtract(_rates(b, everything), _rates(a, everything)).items()}
    index = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
    draws = _subtract(_rates(b, index), _rates(a, index))
    tail = (1 - level) / 2
    intervals = {}
    counts_a, counts_b = _counts(a), _counts(b)
    for rate in RATES:
        low, high = (float(q) for q in np.quantile(draws[rate], [tail, 1 - tail]))
        if _at_bounds(*counts_a[rate]) and _at_bounds(*counts_b[rate]):  # every resample agrees: no width
            mover = mover_interval(counts_a[rate], counts_b[rate], level)
            low, high = min(low, mover[0]), max(high, mover[1])
        intervals[rate] = Interval(estimate[rate], low, high)
    change = b["c"] / b["n"] - a["c"] / a["n"]
    return PairedDifference(n_tasks=len(tasks), better=int((change > 0).sum()), worse=int((change < 0).sum()),
                            resamples=resamples, level=level, **intervals)


def _subtract(new: dict[str, np.ndarray], base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {rate: new[rate] - base[rate] for rate in RATES}
