"""Reliability metrics with hand-worked values (the working is in the comments)."""

from __future__ import annotations

import numpy as np
import pytest

from tbx.stats.metrics import (
    IncompleteInventoryError,
    bootstrap_ci,
    check_inventory,
    flip_stats,
    jeffreys_interval,
    outcomes_from_records,
    pass_at_k,
    pass_curves,
    pass_hat_k,
    summarize,
)
from tbx.view.store import AttemptRow
from tests.helpers.records import reference_counts
from tests.store.records import stored

T, F = True, False


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),        # 1 - C(3,1)/C(5,1) = 1 - 3/5
    (5, 2, 2, 0.7),        # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 3, 0.9),        # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (5, 2, 4, 1.0),        # n - c = 3 < k: every 4-subset holds a success
    (5, 2, 5, 1.0),        # k = n: solved at least once
    (5, 0, 5, 0.0),        # c = 0
    (5, 0, 1, 0.0),
    (5, 5, 1, 1.0),        # c = n
    (20, 1, 1, 0.05),
    (20, 1, 20, 1.0),
])
def test_pass_at_k(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),        # C(2,1)/C(5,1) = 2/5
    (5, 2, 2, 0.1),        # C(2,2)/C(5,2) = 1/10
    (5, 2, 3, 0.0),        # C(2,3) = 0
    (5, 4, 5, 0.0),        # k = n, one failure: never all five
    (5, 5, 5, 1.0),        # k = n = c
    (5, 0, 1, 0.0),        # c = 0
    (4, 3, 2, 0.5),        # C(3,2)/C(4,2) = 3/6
])
def test_pass_hat_k(n: int, c: int, k: int, expected: float) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 6), (5, 2, 0), (5, 6, 1), (5, -1, 1), (0, 0, 1)])
def test_pass_estimators_refuse_impossible_counts(n: int, c: int, k: int) -> None:
    for estimator in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError, match=r"k=|c <= n"):
            estimator(n, c, k)


def test_summarize_overall_and_by_domain() -> None:
    outcomes = {"a": [T, T, F, F], "b": [T, T, T, T], "c": [F, F, F, F]}
    s = summarize(outcomes, {"a": "x", "b": "x", "c": "y"})
    # 6 of 12 attempts; pass@4: a and b solved at least once -> 2/3; only b at 4/4 -> 1/3
    assert (s.n_tasks, s.attempts, s.successes, s.k) == (3, 12, 6, 4)
    assert s.pass_at_1 == pytest.approx(0.5)
    assert s.pass_at_k == pytest.approx(2 / 3)
    assert s.observed_all == pytest.approx(1 / 3)
    assert (s.tasks_all, s.tasks_any) == (1, 2)
    x, y = s.by_domain["x"], s.by_domain["y"]
    assert (x.pass_at_1, x.pass_at_k, x.observed_all, x.n_tasks) == (0.75, 1.0, 0.5, 2)
    assert (y.pass_at_1, y.pass_at_k, y.observed_all, y.successes) == (0.0, 0.0, 0.0, 0)
    as_dict = s.to_dict()
    assert as_dict["by_domain"]["x"]["pass_at_1"] == 0.75
    assert as_dict["pass_at_k"] == pytest.approx(2 / 3)


def test_summarize_k_below_attempts_uses_unbiased_estimator() -> None:
    outcomes = {"a": [T, T, F, F], "b": [T, T, T, T], "c": [F, F, F, F]}
    s = summarize(outcomes, attempts=2)
    # pass@2: a = 1 - C(2,2)/C(4,2) = 5/6, b = 1, c = 0 -> (5/6 + 1) / 3 = 11/18
    assert s.k == 2
    assert s.pass_at_k == pytest.approx(11 / 18)
    assert s.observed_all == pytest.approx(1 / 3)  # all recorded attempts, not k of them


def test_summarize_refuses_short_tasks_and_names_them() -> None:
    outcomes = {"a": [T, F], "b": [T], "c": []}
    with pytest.raises(IncompleteInventoryError, match=r"b \(1 of 2\), c \(0 of 2\)") as caught:
        summarize(outcomes)
    assert caught.value.missing == [("b", 1, 2), ("c", 0, 2)]
    with pytest.raises(IncompleteInventoryError, match=r"a \(2 of 3\)"):
        summarize({"a": [T, F], "b": [T, T, T]}, attempts=3)


def test_summarize_allow_incomplete_counts_what_is_there() -> None:
    s = summarize({"a": [T, F], "b": [T], "c": []}, {"a": "x", "b": "x", "c": "y"}, allow_incomplete=True)
    # c has no judged attempt and drops out; b counts with n = 1: pass@1 = 2/3,
    # pass@min(2, n): a = 1, b = 1 -> 1; observed all: a no, b yes -> 1/2
    assert (s.n_tasks, s.attempts, s.successes) == (2, 3, 2)
    assert s.pass_at_1 == pytest.approx(2 / 3)
    assert s.pass_at_k == 1.0
    assert s.observed_all == 0.5
    assert s.incomplete == ("b", "c")
    assert set(s.by_domain) == {"x"}  # y has no judged attempt at all


def test_summarize_rejects_unplaced_tasks_and_empty_input() -> None:
    with pytest.raises(ValueError, match=r"no domain for task\(s\) \['b'\]"):
        summarize({"a": [T], "b": [F]}, {"a": "x"})
    with pytest.raises(ValueError, match="empty"):
        summarize({})


def test_reference_aggregates_from_per_task_counts() -> None:
    counts = reference_counts()
    records = [stored(f"t{i:03d}", a, "success" if a < c else "failure",
                      domain=["retail", "travel", "auto", "neobank", "consulting"][i % 5])
               for i, c in enumerate(counts) for a in range(20)]
    outcomes, domains, errors = outcomes_from_records(records)
    s = summarize(outcomes, domains, attempts=20)
    assert (s.n_tasks, s.attempts, s.successes) == (507, 10140, 5242)
    assert (s.tasks_all, s.tasks_any) == (38, 453)
    assert f"{100 * s.pass_at_1:.2f}" == "51.70"      # 5242 / 10140 = 51.696%
    assert f"{100 * s.observed_all:.2f}" == "7.50"    # 38 / 507 = 7.495%
    assert f"{100 * s.pass_at_k:.2f}" == "89.35"      # 453 / 507 = 89.349%
    assert sum(d.n_tasks for d in s.by_domain.values()) == 507
    assert sum(errors.values()) == 0


def test_outcomes_from_records_separates_errors() -> None:
    records = [
        stored("a", 1, "failure", domain="x"),
        stored("a", 0, "success", domain="x"),
        stored("a", 2, "infra_error", domain="x"),
        stored("b", 0, "user_sim_error", domain="y"),
        stored("b", 1, "excluded", domain="y"),
        stored("b", 2, "verifier_error", domain="y"),
    ]
    outcomes, domains, errors = outcomes_from_records(records)
    assert outcomes == {"a": [T, F], "b": []}  # attempt order, errors left out, b still present
    assert domains == {"a": "x", "b": "y"}
    assert errors == {"infra_error": 1, "user_sim_error": 1, "verifier_error": 1, "excluded": 1}
    with pytest.raises(ValueError, match="two records for task 'a' attempt 0"):
        outcomes_from_records(records + [records[1]])
    with pytest.raises(ValueError, match="unknown outcome 'win'"):  # a row of the viewer's, read from a column
        outcomes_from_records([AttemptRow("a", 0, 1, "x", "f", "win", None, 0, 0.0, 0.0)])


def test_check_inventory() -> None:
    records = [
        stored("a", 0, "success"),
        stored("a", 1, "failure"),
        stored("b", 0, "success"),
        stored("b", 1, "infra_error"),  # not judged
        stored("c", 0, "success"),
        stored("c", 5, "success"),  # beyond the 2 asked
    ]
    assert check_inventory(records, ["a", "b", "c", "d"], 2) == [("b", 1, 2), ("c", 1, 2), ("d", 0, 2)]
    assert check_inventory(records, ["a"], 2) == []


def test_bootstrap_matches_summary_and_is_reproducible() -> None:
    outcomes = {f"t{i}": [j < i % 5 for j in range(4)] for i in range(40)}
    s = summarize(outcomes)
    ci = bootstrap_ci(outcomes, np.random.default_rng(7), resamples=500)
    again = bootstrap_ci(outcomes, np.random.default_rng(7), resamples=500)
    assert ci == again
    for name in ("pass_at_1", "pass_at_k", "observed_all"):
        interval = getattr(ci, name)
        assert interval.estimate == pytest.approx(getattr(s, name))
        assert interval.low <= interval.estimate <= interval.high
        assert interval.high - interval.low > 0.01  # 40 mixed tasks: a real spread
    assert (ci.k, ci.resamples, ci.level) == (4, 500, 0.95)


def test_bootstrap_hand_worked_extremes() -> None:
    # identical tasks: every resample is the same (a zero-width bootstrap), so the Jeffreys interval on
    # 2 successes of 4 attempts gives the width: Beta(2.5, 2.5) quantiles 0.1228 and 0.8772
    same = bootstrap_ci({"a": [T, F], "b": [T, F]}, np.random.default_rng(0), resamples=200)
    assert (same.pass_at_1.low, same.pass_at_1.high) == pytest.approx((0.1228, 0.8772), abs=1e-4)
    # all failures, 10 tasks x 1 attempt: never [0, 0]; Jeffreys upper end Beta(0.5, 10.5)'s 97.5% = 0.2172
    none = bootstrap_ci({str(i): [F] for i in range(10)}, np.random.default_rng(0), resamples=200)
    for interval in (none.pass_at_1, none.pass_at_k, none.observed_all):
        assert (interval.estimate, interval.low) == (0.0, 0.0) and interval.high == pytest.approx(0.2172, abs=1e-4)
    assert jeffreys_interval(10, 10)[1] == 1.0 and jeffreys_interval(0, 0) == (0.0, 1.0)
    # one solved and one unsolved task: a resample's observed-all is 0, 1/2 or 1 with chance
    # 1/4, 1/2, 1/4, so the 95% interval spans [0, 1]
    split = bootstrap_ci({"a": [T], "b": [F]}, np.random.default_rng(0), resamples=2000)
    assert (split.observed_all.low, split.observed_all.high) == (0.0, 1.0)
    with pytest.raises(IncompleteInventoryError):
        bootstrap_ci({"a": [T, F], "b": [T]}, np.random.default_rng(0))


def test_flip_stats() -> None:
    fs = flip_stats({"a": [T, T, F], "b": [T, T, T], "c": [F, T], "d": [F], "e": []})
    # minority shares: a 1/3, b 0, c 1/2 (a tie), d 0 (one attempt cannot flip); e has none
    assert fs.minority_share == pytest.approx({"a": 1 / 3, "b": 0.0, "c": 0.5, "d": 0.0})
    assert (fs.flipping_tasks, fs.n_tasks, fs.flip_rate) == (2, 4, 0.5)
    assert fs.mean_minority_share == pytest.approx(5 / 24)  # (1/3 + 1/2) / 4


def test_pass_curves() -> None:
    outcomes = {"a": [T, F, F], "b": [T, T, T]}
    curves = pass_curves(outcomes)
    # k=1: (1/3 + 1)/2 both; k=2: pass@2 a = 1 - C(2,2)/C(3,2) = 2/3 -> 5/6, pass^2 a = 0 -> 1/2
    # k=3: pass@3 = 1, pass^3 = 1/2
    assert curves.ks == (1, 2, 3)
    assert curves.pass_at_k == pytest.approx((2 / 3, 5 / 6, 1.0))
    assert curves.pass_hat_k == pytest.approx((2 / 3, 0.5, 0.5))
    s = summarize(outcomes)
    assert curves.pass_at_k[-1] == pytest.approx(s.pass_at_k)
    assert curves.pass_hat_k[-1] == pytest.approx(s.observed_all)
    assert pass_curves(outcomes, attempts=2).ks == (1, 2)
    # the summary carries τ²-bench's pass^k beside pass@k: a C(1,3)/C(3,3) = 0, b 1 -> 1/2; at k=2 (a has 4
    # attempts, 2 successes: C(2,2)/C(4,2) = 1/6; b 1) -> 7/12
    assert s.pass_hat_k == pytest.approx(0.5) == curves.pass_hat_k[-1]
    assert summarize({"a": [T, F, T, F], "b": [T, T]}, attempts=2).pass_hat_k == pytest.approx(7 / 12)
    with pytest.raises(IncompleteInventoryError, match=r"b \(1 of 3\)"):
        pass_curves({"a": [T, F, T], "b": [F]})
    # allowed: b counts at min(k, 1): pass@k a = 1 for k >= 2, b = 0 -> 1/2; pass^k a = 2/3, 1/3, 0
    short = pass_curves({"a": [T, F, T], "b": [F]}, allow_incomplete=True)
    assert short.pass_at_k == pytest.approx((1 / 3, 1 / 2, 1 / 2))
    assert short.pass_hat_k == pytest.approx((1 / 3, 1 / 6, 0.0))


def test_abandoned_is_a_verdict_of_zero_with_its_own_count() -> None:
    from tbx.stats.metrics import format_summary, outcome_summary

    records = [stored("a", 0, "success"), stored("a", 1, "abandoned"), stored("b", 0, "failure"),
               stored("b", 1, "infra_error")]
    outcomes, _, errors = outcomes_from_records(records)
    assert outcomes == {"a": [T, F], "b": [F]}  # abandoned counts as a failed attempt; the error does not
    assert "abandoned" not in errors
    summary = outcome_summary(records)
    assert summary.pass_at_1 == 1 / 3  # 1 success of 3 verdicts (success, abandoned, failure)
    assert summary.counts["abandoned"] == 1 and summary.errors == 1
    table = format_summary(summary, "t")
    assert table.splitlines()[2].split()[4:6] == ["1", "2"]  # succ 1, fail 2 (failure + abandoned)
    assert "fail includes 1 abandoned" in table
