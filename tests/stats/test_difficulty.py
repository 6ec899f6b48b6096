"""Jeffreys posterior, band masses and band assignment, checked against independent computations."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import integrate

from tbx.errors import ConfigError
from tbx.stats.difficulty import (
    DEFAULT_BAND_NAMES,
    DEFAULT_EDGES,
    Difficulty,
    assign_band,
    band_masses,
    credible_interval,
    describe,
    posterior_mean,
    validate_band_names,
    validate_edges,
)


def beta_pdf(x: float, a: float, b: float) -> float:
    """Written out, so the check does not reuse scipy's incomplete beta like the code under test."""
    log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return math.exp((a - 1) * math.log(x) + (b - 1) * math.log1p(-x) - log_norm)


def masses_by_quadrature(k: int, n: int, edges) -> list[float]:
    a, b = k + 0.5, n - k + 0.5
    return [integrate.quad(beta_pdf, lo, hi, args=(a, b), limit=200)[0]
            for lo, hi in zip(edges, edges[1:], strict=False)]


def cdf_half_three_halves(x: float) -> float:
    """CDF of Beta(½, 3/2) (k=0, n=1) by hand: pdf t^(−½)(1−t)^(½)/B with B = π/2; substituting
    t = sin²θ gives CDF = (2/π)(arcsin √x + √(x(1−x)))."""
    return (2 / math.pi) * (math.asin(math.sqrt(x)) + math.sqrt(x * (1 - x)))


@pytest.mark.parametrize("k,n", [(0, 20), (1, 20), (7, 20), (13, 20), (19, 20), (20, 20), (3, 5), (0, 3)])
def test_band_masses_match_numerical_integration(k, n):
    expected = masses_by_quadrature(k, n, DEFAULT_EDGES)
    assert band_masses(k, n) == pytest.approx(expected, abs=1e-7)


def test_band_masses_custom_edges_match_numerical_integration():
    edges = (0.0, 0.25, 0.5, 0.75, 1.0)
    assert band_masses(4, 9, edges) == pytest.approx(masses_by_quadrature(4, 9, edges), abs=1e-7)


def test_closed_form_for_zero_of_one_and_one_of_one():
    cdf = cdf_half_three_halves
    # k=0, n=1: Beta(½, 3/2); mass below 0.08 = (2/π)(asin 0.28284 + √0.0736) = (2/π)(0.28676 + 0.27129) ≈ 0.35527
    expected = [cdf(b) - cdf(a) for a, b in zip(DEFAULT_EDGES, DEFAULT_EDGES[1:], strict=False)]
    assert band_masses(0, 1) == pytest.approx(expected, abs=1e-12)
    assert band_masses(0, 1)[0] == pytest.approx(0.35527, abs=1e-5)
    # k=1, n=1: Beta(3/2, ½) is the mirror image, so the band masses come out reversed
    mirrored = [cdf(1 - a) - cdf(1 - b) for a, b in zip(DEFAULT_EDGES, DEFAULT_EDGES[1:], strict=False)]
    assert band_masses(1, 1) == pytest.approx(mirrored, abs=1e-12)


@pytest.mark.parametrize("k,n", [(0, 1), (0, 20), (20, 20), (10, 20), (500, 1000)])
def test_masses_are_non_negative_and_sum_to_one(k, n):
    masses = band_masses(k, n)
    assert len(masses) == len(DEFAULT_EDGES) - 1
    assert all(m >= 0 for m in masses)
    assert sum(masses) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("k,n,band", [
    (0, 20, 0),   # masses ≈ [0.934, 0.066, 0, 0, 0]
    (1, 20, 0),   # ≈ [0.651, 0.346, ...]: one success in 20 is still "rarely"
    (2, 20, 1),   # ≈ [0.332, 0.650, 0.018, ...]
    (10, 20, 2),  # centred on 0.5
    (18, 20, 3),  # ≈ [..., 0.540, 0.458]
    (19, 20, 4),  # ≈ [..., 0.244, 0.755]
    (20, 20, 4),  # ≈ [..., 0.039, 0.961]
    (0, 4, 0),    # ≈ [0.601, 0.318, 0.076, 0.005, 0]
    (4, 4, 4),    # ≈ [0, 0.001, 0.035, 0.307, 0.657]
])
def test_assign_band_hand_checked(k, n, band):
    assert assign_band(k, n) == band
    assert describe(k, n).band == band


@pytest.mark.parametrize("k,n", [(1, 2), (2, 4), (5, 10)])
def test_tie_goes_to_the_lower_band(k, n):
    # k = n/2 gives a symmetric posterior: exactly half the mass on either side of 0.5
    masses = band_masses(k, n, (0.0, 0.5, 1.0))
    assert masses == pytest.approx([0.5, 0.5], abs=1e-12)
    assert assign_band(k, n, (0.0, 0.5, 1.0)) == 0


def test_tie_between_outer_bands_goes_to_the_lower_one():
    # symmetric posterior and symmetric edges: bands 0 and 2 hold equal mass, more than band 1
    edges = (0.0, 0.45, 0.55, 1.0)
    masses = band_masses(1, 2, edges)
    assert masses[0] == pytest.approx(masses[2], abs=1e-12) and masses[0] > masses[1]
    assert assign_band(1, 2, edges) == 0


def test_posterior_mean_and_interval():
    assert posterior_mean(3, 10) == pytest.approx(3.5 / 11)
    assert posterior_mean(0, 1) == pytest.approx(0.25)
    low, high = credible_interval(0, 1, level=0.9)
    # hand-derived CDF of Beta(½, 3/2) puts 5% below low and 5% above high
    assert cdf_half_three_halves(low) == pytest.approx(0.05, abs=1e-9)
    assert cdf_half_three_halves(high) == pytest.approx(0.95, abs=1e-9)
    wide, narrow = credible_interval(10, 20), credible_interval(100, 200)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    assert credible_interval(10, 20, 0.5)[1] < credible_interval(10, 20, 0.99)[1]


def test_describe_returns_a_frozen_record():
    difficulty = describe(3, 8)
    assert isinstance(difficulty, Difficulty)
    assert (difficulty.k, difficulty.n) == (3, 8)
    assert difficulty.masses == pytest.approx(tuple(band_masses(3, 8)))
    assert difficulty.mean == pytest.approx(3.5 / 9)
    assert difficulty.interval == pytest.approx(credible_interval(3, 8, 0.9))
    with pytest.raises(dataclasses.FrozenInstanceError):
        difficulty.band = 0  # type: ignore[misc]


def test_describe_with_custom_edges():
    difficulty = describe(9, 10, (0.0, 0.5, 1.0))
    assert len(difficulty.masses) == 2 and difficulty.band == 1


def test_zero_attempts_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one non-error attempt"):
        band_masses(0, 0)
    with pytest.raises(ValueError, match="at least one non-error attempt"):
        describe(0, 0)


@pytest.mark.parametrize("k,n", [(-1, 5), (6, 5)])
def test_successes_outside_zero_to_n_are_rejected(k, n):
    with pytest.raises(ValueError, match=f"k={k} successes out of n={n}"):
        assign_band(k, n)


@pytest.mark.parametrize("edges,message", [
    ((0.0, 0.6, 0.3, 1.0), "0.6 followed by 0.3"),
    ((0.0, 0.3, 0.3, 1.0), "increase strictly"),
    ((0.1, 0.5, 1.0), "start at 0 and end at 1"),
    ((0.0, 0.5, 0.9), "start at 0 and end at 1"),
    ((0.0,), "at least 2"),
])
def test_bad_edges_name_the_value_and_the_fix(edges, message):
    with pytest.raises(ConfigError, match=message) as error:
        band_masses(1, 2, edges)
    assert error.value.fix


def test_credible_level_must_be_a_probability():
    with pytest.raises(ValueError, match="level=1.5"):
        credible_interval(1, 2, 1.5)


def test_default_names_cover_default_bands():
    assert validate_band_names(DEFAULT_BAND_NAMES, DEFAULT_EDGES) == DEFAULT_BAND_NAMES
    assert validate_edges([0, 0.5, 1]) == (0.0, 0.5, 1.0)
    with pytest.raises(ConfigError, match="3 names for 5 bands"):
        validate_band_names(("a", "b", "c"), DEFAULT_EDGES)
