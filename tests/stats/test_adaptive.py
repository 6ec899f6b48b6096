"""Adaptive probing: flip probabilities by hand, stopping rule, and the simulation's bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from tbx.stats.adaptive import (
    StoppingRule,
    checkpoints,
    decision,
    decision_flip_probability,
    should_stop,
    simulate,
)
from tbx.stats.difficulty import DEFAULT_EDGES, assign_band
from tbx.stats.pool import FULL_PARAM, LORA, PoolStrategy, kept_bands

# Two bands split at ½; the strategy keeps the upper one. Bands by hand:
# (0,1) Beta(½,3/2) lower; (1,1) Beta(3/2,½) upper; (1,2) Beta(3/2,3/2) symmetric: a tie, so lower;
# (0,2), (1,3) lower; (2,2), (2,3), (3,3) upper.
HALF = (0.0, 0.5, 1.0)
UPPER = PoolStrategy("upper", ((0.5, 1.0),))


def test_hand_bands_behind_the_small_cases():
    assert [assign_band(k, n, HALF) for k, n in [(0, 1), (1, 1), (1, 2), (0, 2), (1, 3), (2, 3)]] == [
        0, 1, 0, 0, 0, 1]
    assert decision(1, 1, UPPER, HALF) == (True,)
    assert decision(1, 2, UPPER, HALF) == (False,)


@pytest.mark.parametrize("k,n,n_max,expected", [
    # n_max=2 from (0,1): dropped now; finals (0,2), (1,2) both dropped, so nothing can flip it
    (0, 1, 2, 0.0),
    # from (1,1): kept now; one more failure gives (1,2), dropped. P(failure) = b/(a+b) = ½/2
    (1, 1, 2, 0.25),
    # n_max=3 from (1,1): flips only if both remaining fail: (½/2)·(3/2 / 3) = 0.125 (Pólya urn)
    (1, 1, 3, 0.125),
    # from (0,1): flips only if both succeed: (½/2)·(3/2 / 3) = 0.125
    (0, 1, 3, 0.125),
    # from (1,2) (tie, dropped): flips if the last succeeds, P = a/(a+b) = (3/2)/3
    (1, 2, 3, 0.5),
    # at the budget nothing remains
    (1, 2, 2, 0.0),
    (3, 3, 3, 0.0),
])
def test_flip_probability_hand_worked(k, n, n_max, expected):
    assert decision_flip_probability(k, n, n_max, UPPER, HALF) == pytest.approx(expected, abs=1e-12)


def test_flip_is_exactly_zero_when_no_outcome_changes_the_decision():
    # 2 of 4 is "hard" and kept; every final count 2..18 of 20 lies in hard/medium/often: kept
    assert decision_flip_probability(2, 4, 20, FULL_PARAM) == 0.0
    # 16 of 16 is dropped under LoRA, and so is every final count 16..20 of 20
    assert decision_flip_probability(16, 16, 20, LORA) == 0.0


def test_flip_shrinks_as_evidence_grows():
    for k_of_n in (lambda n: n, lambda n: 0):  # all successes, all failures
        flips = [decision_flip_probability(k_of_n(n), n, 20, FULL_PARAM) for n in (4, 8, 12, 16)]
        assert all(0 < f < 1 for f in flips)
        assert flips == sorted(flips, reverse=True) and flips[0] > 5 * flips[-1]


def test_flip_is_a_probability_and_one_step_flips_are_bernoulli():
    for n in range(1, 20):
        for k in range(n + 1):
            flip = decision_flip_probability(k, n, 20, (FULL_PARAM, LORA))
            assert 0.0 <= flip <= 1.0
    # one attempt left at 19: the flip is P(next success) = (k+½)/20 or P(failure), or 0
    for k in range(20):
        flip = decision_flip_probability(k, 19, 20, FULL_PARAM)
        assert flip == 0.0 or flip == pytest.approx((k + 0.5) / 20) or flip == pytest.approx((19.5 - k) / 20)
    # 1 of 19 is "rarely" (dropped); one success makes 2 of 20, "hard" (kept): P = 1.5/20
    assert decision_flip_probability(1, 19, 20, FULL_PARAM) == pytest.approx(0.075)
    # 18 of 19 is "almost always" (0.733, dropped); a failure makes 18 of 20, "often" (kept):
    # P(failure) = (1 + ½)/20
    assert decision_flip_probability(18, 19, 20, FULL_PARAM) == pytest.approx(0.075)


def test_protecting_two_strategies_flips_at_least_as_often_as_either():
    for k, n in [(3, 4), (4, 4), (0, 4), (9, 12), (11, 16)]:
        both = decision_flip_probability(k, n, 20, (FULL_PARAM, LORA))
        assert both >= max(decision_flip_probability(k, n, 20, s) for s in (FULL_PARAM, LORA)) - 1e-15
        assert both <= 1.0


def test_should_stop_respects_minimum_budget_and_threshold():
    rule = StoppingRule("predictive", threshold=0.02, min_attempts=4, round_size=4)
    assert not should_stop(2, 2, 20, rule, FULL_PARAM)  # flip is 0 but below min_attempts
    assert should_stop(2, 4, 20, rule, FULL_PARAM)  # flip exactly 0
    assert not should_stop(4, 4, 20, rule, FULL_PARAM)  # flip ≈ 0.35
    assert should_stop(4, 4, 4, rule, FULL_PARAM)  # the budget is spent
    flip = decision_flip_probability(16, 16, 20, FULL_PARAM)  # ≈ 0.012
    assert should_stop(16, 16, 20, StoppingRule(threshold=flip), FULL_PARAM)
    assert not should_stop(16, 16, 20, StoppingRule(threshold=flip * 0.99), FULL_PARAM)


def test_naive_rule_uses_the_largest_band_mass():
    # 0 of 20 puts ≈ 0.934 of the mass in "rarely"
    assert should_stop(0, 20, 40, StoppingRule("band_mass", 0.90))
    assert not should_stop(0, 20, 40, StoppingRule("band_mass", 0.95))


def test_checkpoints():
    assert checkpoints(20, StoppingRule(min_attempts=4, round_size=4)) == (4, 8, 12, 16, 20)
    assert checkpoints(20, StoppingRule(min_attempts=4, round_size=3)) == (6, 9, 12, 15, 18, 20)
    assert checkpoints(6, StoppingRule(min_attempts=4, round_size=1)) == (4, 5, 6)
    assert checkpoints(2, StoppingRule(min_attempts=4, round_size=4)) == (2,)


@pytest.mark.parametrize("kwargs,message", [
    ({"kind": "vote"}, "unknown"),
    ({"threshold": 1.5}, "threshold=1.5"),
    ({"round_size": 0}, "round_size=0"),
])
def test_rule_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StoppingRule(**kwargs)


def test_bad_counts_are_rejected():
    with pytest.raises(ValueError, match="exceeds n_max=20"):
        decision_flip_probability(3, 21, 20, FULL_PARAM)
    with pytest.raises(ValueError, match="at least one non-error attempt"):
        should_stop(0, 0, 20, StoppingRule())
    with pytest.raises(ValueError, match="true_rates"):
        simulate(np.array([0.5, 1.5]), 20, StoppingRule(), np.random.default_rng(0))


def reference_simulation(rates, n_max, rule, seed, strategy):
    """Task-by-task loop over the same outcomes, using only the public should_stop."""
    outcomes = np.random.default_rng(seed).random((rates.size, n_max)) < rates[:, None]
    used, same_band, same_decision = 0, 0, 0
    keep = kept_bands(strategy, DEFAULT_EDGES)
    for row in outcomes:
        stop_n = next(n for n in checkpoints(n_max, rule) if should_stop(int(row[:n].sum()), n, n_max, rule, strategy))
        used += stop_n
        band_stop, band_full = assign_band(int(row[:stop_n].sum()), stop_n), assign_band(int(row.sum()), n_max)
        same_band += band_stop == band_full
        same_decision += keep[band_stop] == keep[band_full]
    return used, same_decision / rates.size, same_band / rates.size


def test_simulation_matches_a_task_by_task_loop():
    rates = np.random.default_rng(5).beta(0.85, 0.78, 300)
    rule = StoppingRule("predictive", 0.03, 4, 4)
    result = simulate(rates, 20, rule, np.random.default_rng(9), FULL_PARAM)
    used, decision_share, band_share = reference_simulation(rates, 20, rule, 9, FULL_PARAM)
    assert result.episodes_used == used < result.episodes_fixed == 300 * 20
    assert result.decision_agreement == {"full_param": pytest.approx(decision_share)}
    assert result.band_agreement == pytest.approx(band_share)
    assert sum(result.stopped_at.values()) == 300
    assert sum(n * count for n, count in result.stopped_at.items()) == used


def test_threshold_zero_never_changes_a_decision():
    rates = np.random.default_rng(3).uniform(0, 1, 500)
    result = simulate(rates, 20, StoppingRule("predictive", 0.0, 4, 2), np.random.default_rng(4),
                      (FULL_PARAM, LORA))
    assert result.decision_agreement == {"full_param": 1.0, "lora": 1.0}
    assert result.episode_share < 1.0


def test_hopeless_tasks_stop_early_and_agree():
    result = simulate(np.zeros(50), 20, StoppingRule(), np.random.default_rng(0), FULL_PARAM)
    assert result.decision_agreement["full_param"] == 1.0 and result.band_agreement == 1.0
    assert max(result.stopped_at) < 20


def test_naive_rule_at_full_mass_never_stops_early():
    result = simulate(np.full(40, 0.5), 20, StoppingRule("band_mass", 1.0), np.random.default_rng(0))
    assert result.stopped_at == {20: 40} and result.episode_share == 1.0


def test_evaluate_reports_other_strategies_and_same_seed_repeats():
    rates = np.random.default_rng(1).uniform(0, 1, 200)
    first = simulate(rates, 20, StoppingRule(), np.random.default_rng(2), FULL_PARAM, evaluate=(FULL_PARAM, LORA))
    again = simulate(rates, 20, StoppingRule(), np.random.default_rng(2), FULL_PARAM, evaluate=(FULL_PARAM, LORA))
    assert set(first.decision_agreement) == {"full_param", "lora"}
    assert first == again
