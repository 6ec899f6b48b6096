"""Adaptive probing: stop probing a task once more attempts are unlikely to change its pool fate.

The reference probes every task a fixed n times (n = 20). Most tasks are far from a band edge
that matters, so their pool decision (kept or dropped) is settled long before. We probe in
rounds and, after each round, ask the **posterior predictive**: given k successes in n attempts,
the remaining m = n_max − n attempts yield K ~ Beta-Binomial(m, k+½, n−k+½) more successes; the
*flip probability* is P(the decision at (k+K, n_max) differs from the decision at (k, n)). When
it is at most a threshold, we stop and record (k, n). We compare against the decision *now*
(not the most likely final one) because the stopped record is what `select_pool` later bands.

A "decision" is the tuple of kept/dropped under each strategy the rule protects, so a probe run
can protect the full-parameter and the LoRA pools at once. A naive baseline stops once one band
holds at least a given posterior mass; `simulate` measures both against fixed-n probing on the
same Bernoulli outcomes (adaptive sees a prefix). Pure: randomness only through `rng`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from tbx.stats.difficulty import DEFAULT_EDGES, assign_band, band_masses, check_counts
from tbx.stats.pool import FULL_PARAM, PoolStrategy, kept_bands

Strategies = PoolStrategy | Sequence[PoolStrategy]


@dataclass(frozen=True)
class StoppingRule:
    """When to stop probing a task; checked only at the end of a round.

    kind "predictive": stop when the decision flip probability is at most `threshold`.
    kind "band_mass" (naive baseline): stop when one band holds at least `threshold` mass.
    Never stops before `min_attempts` non-error attempts; always stops at n_max.
    """

    kind: Literal["predictive", "band_mass"] = "predictive"
    threshold: float = 0.02
    min_attempts: int = 4
    round_size: int = 2  # benchmarks/adaptive_probing.py: 4 costs ~4 pp more episodes

    def __post_init__(self) -> None:
        if self.kind not in ("predictive", "band_mass"):
            raise ValueError(f"stopping rule kind '{self.kind}' is unknown; use 'predictive' or 'band_mass'")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"stopping rule threshold={self.threshold} must lie in [0, 1] "
                             "(e.g. 0.03 for 'predictive', 0.95 for 'band_mass')")
        if self.min_attempts < 1 or self.round_size < 1:
            raise ValueError(f"min_attempts={self.min_attempts} and round_size={self.round_size} "
                             "must both be at least 1")


def _strategies(strategy: Strategies) -> tuple[PoolStrategy, ...]:
    return (strategy,) if isinstance(strategy, PoolStrategy) else tuple(strategy)


def _check_budget(n: int, n_max: int) -> None:
    if n > n_max:
        raise ValueError(f"n={n} attempts exceeds n_max={n_max}; n_max is the fixed probe budget, "
                         "raise it or stop probing at n_max")


def _band_decisions(strategies: tuple[PoolStrategy, ...], edges: Sequence[float]) -> np.ndarray:
    """bool [band, strategy]: whether each strategy keeps each band."""
    return np.array([kept_bands(s, edges) for s in strategies], dtype=bool).T


def decision(k: int, n: int, strategy: Strategies, edges: Sequence[float] = DEFAULT_EDGES) -> tuple[bool, ...]:
    """Kept (True) or dropped under each strategy, for the band of (k, n)."""
    return tuple(bool(d) for d in _band_decisions(_strategies(strategy), edges)[assign_band(k, n, edges)])


def _final_decisions(n_max: int, strategies: tuple[PoolStrategy, ...],
                     edges: Sequence[float]) -> np.ndarray:
    """bool [k_final, strategy]: the decision at (k_final, n_max) for k_final = 0..n_max."""
    by_band = _band_decisions(strategies, edges)
    return np.array([by_band[assign_band(k, n_max, edges)] for k in range(n_max + 1)])


def _flip(k: int, n: int, n_max: int, current: np.ndarray, finals: np.ndarray) -> float:
    remaining = n_max - n
    if remaining == 0:
        return 0.0
    differs = np.any(finals[k:k + remaining + 1] != current, axis=1)  # [K], K = 0..remaining
    if not differs.any():
        return 0.0  # exactly: no remaining outcome can change the decision
    more = np.arange(remaining + 1)
    pmf = stats.betabinom.pmf(more, remaining, k + 0.5, n - k + 0.5)
    return float(min(pmf[differs].sum(), 1.0))


def decision_flip_probability(k: int, n: int, n_max: int, strategy: Strategies,
                              edges: Sequence[float] = DEFAULT_EDGES) -> float:
    """P(decision at (k+K, n_max) != decision at (k, n)), K ~ BetaBinomial(n_max−n, k+½, n−k+½)."""
    check_counts(k, n)
    _check_budget(n, n_max)
    strategies = _strategies(strategy)
    by_band = _band_decisions(strategies, edges)
    current = by_band[assign_band(k, n, edges)]
    return _flip(k, n, n_max, current, _final_decisions(n_max, strategies, edges))


def should_stop(k: int, n: int, n_max: int, rule: StoppingRule, strategy: Strategies = FULL_PARAM,
                edges: Sequence[float] = DEFAULT_EDGES) -> bool:
    """Whether to stop probing a task with k successes in n non-error attempts."""
    check_counts(k, n)
    _check_budget(n, n_max)
    if n == n_max:
        return True
    if n < rule.min_attempts:
        return False
    if rule.kind == "band_mass":
        return max(band_masses(k, n, edges)) >= rule.threshold
    return decision_flip_probability(k, n, n_max, strategy, edges) <= rule.threshold


def checkpoints(n_max: int, rule: StoppingRule) -> tuple[int, ...]:
    """Attempt counts after which the rule is checked: round ends from min_attempts on, and n_max."""
    if n_max < 1:
        raise ValueError(f"n_max={n_max} must be at least 1")
    ends = {min(r * rule.round_size, n_max) for r in range(1, n_max // rule.round_size + 2)}
    return tuple(sorted(n for n in ends if n >= rule.min_attempts or n == n_max))


def stop_table(n_max: int, rule: StoppingRule, strategy: Strategies = FULL_PARAM,
               edges: Sequence[float] = DEFAULT_EDGES) -> dict[int, np.ndarray]:
    """For each checkpoint n, bool [k] for k = 0..n: whether the rule stops at (k, n)."""
    return {n: np.array([should_stop(k, n, n_max, rule, strategy, edges) for k in range(n + 1)])
            for n in checkpoints(n_max, rule)}


@dataclass(frozen=True)
class SimulationResult:
    """Adaptive probing against fixed n_max probing on the same outcome sequences."""

    tasks: int
    episodes_used: int  # attempts the adaptive rule spent
    episodes_fixed: int  # tasks × n_max
    decision_agreement: Mapping[str, float]  # per strategy name: share with the fixed-n decision
    band_agreement: float  # share whose band at the stop equals the band at n_max
    stopped_at: Mapping[int, int]  # attempts at the stop → number of tasks

    @property
    def episode_share(self) -> float:
        """Episodes used relative to fixed-n probing."""
        return self.episodes_used / self.episodes_fixed


def simulate(true_rates: np.ndarray, n_max: int, rule: StoppingRule, rng: np.random.Generator,
             strategy: Strategies = FULL_PARAM, edges: Sequence[float] = DEFAULT_EDGES,
             evaluate: Strategies | None = None) -> SimulationResult:
    """Probe tasks with success rates `true_rates` [tasks] adaptively and with fixed n_max.

    One sequence of n_max Bernoulli outcomes per task; the adaptive rule sees a prefix. The rule
    protects `strategy`; agreement is reported for `evaluate` (default: the same strategies).
    """
    rates = np.asarray(true_rates, dtype=float)
    if rates.ndim != 1 or rates.size == 0 or np.any((rates < 0) | (rates > 1)):
        raise ValueError("true_rates must be a non-empty 1-d array of success rates in [0, 1]")
    outcomes = rng.random((rates.size, n_max)) < rates[:, None]  # bool [tasks, n_max]
    successes = np.cumsum(outcomes, axis=1)  # [tasks, n_max]: k after n = column + 1 attempts
    stopped_n = np.full(rates.size, n_max)
    open_tasks = np.ones(rates.size, dtype=bool)
    for n, table in stop_table(n_max, rule, strategy, edges).items():
        stops = open_tasks & table[successes[:, n - 1]]
        stopped_n[stops] = n
        open_tasks &= ~stops
    k_stop = successes[np.arange(rates.size), stopped_n - 1]
    band_at = {n: np.array([assign_band(k, n, edges) for k in range(n + 1)])
               for n in checkpoints(n_max, rule)}  # n -> band [k]; includes n_max
    band_stop = np.empty(rates.size, dtype=int)
    for n, bands in band_at.items():
        at = stopped_n == n
        band_stop[at] = bands[k_stop[at]]
    band_full = band_at[n_max][successes[:, -1]]
    agreement = {}
    for target in _strategies(strategy if evaluate is None else evaluate):
        keep = np.array(kept_bands(target, edges))
        agreement[target.name] = float(np.mean(keep[band_stop] == keep[band_full]))
    return SimulationResult(tasks=rates.size, episodes_used=int(stopped_n.sum()),
                            episodes_fixed=rates.size * n_max, decision_agreement=agreement,
                            band_agreement=float(np.mean(band_stop == band_full)),
                            stopped_at=dict(sorted(Counter(stopped_n.tolist()).items())))
