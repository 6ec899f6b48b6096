"""Benchmark: adaptive probing against fixed n = 20 probing, in simulation (no model in the loop).

Task success rates come from a Beta fitted to the reference base model (SPEC §5: pass@1 0.52,
observed 20/20 on 7.5% of tasks), i.e. E[p] = 0.52 and E[p^20] = 0.075. Each task gets one
sequence of 20 Bernoulli outcomes; fixed probing sees all of it, adaptive probing a prefix.
Prints, per rule: episodes spent relative to fixed n = 20, the share of tasks whose pool decision
(full-parameter and LoRA strategies) equals the fixed-n decision, and the share whose exact band
equals. A measurement, not a test: it asserts nothing.

    .venv/bin/python benchmarks/adaptive_probing.py [--tasks 5000] [--seed 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import optimize, special

from tbx.stats.adaptive import StoppingRule, simulate
from tbx.stats.difficulty import DEFAULT_EDGES, assign_band
from tbx.stats.pool import FULL_PARAM, LORA, kept_bands

N_MAX = 20
MEAN, ALL_SOLVED = 0.52, 0.075  # reference base model: pass@1, share of tasks at 20/20
TARGET_AGREEMENT, TARGET_SHARE = 0.98, 0.55
STRATEGIES = (FULL_PARAM, LORA)


def fit_beta(mean: float, all_solved: float, n: int) -> tuple[float, float]:
    """Beta(a, b) with E[p] = mean and E[p^n] = all_solved (a = mean * s, solve for s = a + b)."""
    def gap(total: float) -> float:
        a, b = mean * total, (1 - mean) * total
        return special.betaln(a + n, b) - special.betaln(a, b) - np.log(all_solved)
    total = optimize.brentq(gap, 1e-3, 1e4)
    return mean * total, (1 - mean) * total


def fixed_n_noise(rates: np.ndarray, seed: int) -> dict[str, float]:
    """Context: how often fixed n = 20 itself gets the decision of the band holding the true rate."""
    rng = np.random.default_rng(seed)
    successes = (rng.random((rates.size, N_MAX)) < rates[:, None]).sum(axis=1)
    band_20 = np.array([assign_band(k, N_MAX) for k in range(N_MAX + 1)])[successes]
    band_true = np.searchsorted(DEFAULT_EDGES, rates, side="right") - 1
    band_true = np.minimum(band_true, len(DEFAULT_EDGES) - 2)
    result = {}
    for strategy in STRATEGIES:
        keep = np.array(kept_bands(strategy, DEFAULT_EDGES))
        result[strategy.name] = float(np.mean(keep[band_20] == keep[band_true]))
    return result


def row(label: str, rule: StoppingRule, protects: tuple, rates: np.ndarray, seed: int) -> None:
    result = simulate(rates, N_MAX, rule, np.random.default_rng(seed), protects or STRATEGIES,
                      evaluate=STRATEGIES)
    agree = result.decision_agreement
    meets = bool(protects) and all(agree[s.name] >= TARGET_AGREEMENT for s in protects)
    flag = "  <- target met" if meets and result.episode_share <= TARGET_SHARE else ""
    print(f"{label:<30}{rule.round_size:>6}{rule.threshold:>8.2f}{result.episode_share:>10.1%}"
          f"{agree['full_param']:>12.2%}{agree['lora']:>9.2%}{result.band_agreement:>9.2%}{flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    a, b = fit_beta(MEAN, ALL_SOLVED, N_MAX)
    rates = np.random.default_rng(args.seed).beta(a, b, args.tasks)
    print(f"fitted Beta(a={a:.4f}, b={b:.4f}): E[p]={a / (a + b):.4f}, "
          f"E[p^20]={np.exp(special.betaln(a + N_MAX, b) - special.betaln(a, b)):.4f}; "
          f"sample of {args.tasks}: mean {rates.mean():.4f}")
    noise = fixed_n_noise(rates, args.seed + 1)
    print(f"fixed n=20 vs the band of the true rate (context): decision agreement "
          f"full_param {noise['full_param']:.2%}, lora {noise['lora']:.2%}\n")
    print(f"{'rule (protects)':<30}{'round':>6}{'thresh':>8}{'episodes':>10}"
          f"{'full_param':>12}{'lora':>9}{'band':>9}")
    for threshold in (0.6, 0.7, 0.8, 0.9, 0.95):
        for round_size in (1, 4):
            row("naive band mass", StoppingRule("band_mass", threshold, 4, round_size), (), rates,
                args.seed + 1)
    for protects in ((FULL_PARAM,), (LORA,), STRATEGIES):
        label = "predictive (" + "+".join(s.name for s in protects) + ")"
        for round_size in (1, 2, 4):
            for threshold in (0.01, 0.02, 0.03, 0.05):
                row(label, StoppingRule("predictive", threshold, 4, round_size), protects, rates,
                    args.seed + 1)
    print(f"\nepisodes = attempts spent / ({args.tasks} tasks x {N_MAX}); full_param, lora = share "
          f"of tasks with the fixed-n pool decision; band = share with the fixed-n band. "
          f"Target: >= {TARGET_AGREEMENT:.0%} decision agreement on the protected strategy with "
          f"<= {TARGET_SHARE:.0%} of the episodes. min_attempts = 4 throughout. "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
