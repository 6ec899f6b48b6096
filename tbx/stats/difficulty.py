"""Difficulty of a task relative to the policy: Jeffreys posterior over its success rate.

For k successes in n attempts that reached a verdict (errors excluded: they are not the agent's
fault) the policy's success rate gets the Jeffreys posterior Beta(k+½, n−k+½). The
unit interval is cut into difficulty bands by `edges`; a task belongs to the band holding the
most posterior mass (docs/training.md). Everything here is a pure function of (k, n, edges).

Default bands (edges 0, 0.08, 0.30, 0.60, 0.90, 1), named for how often the policy solves the
task: "rarely" [0, 0.08), "hard" [0.08, 0.30), "medium" [0.30, 0.60), "often" [0.60, 0.90),
"almost always" [0.90, 1].

Tie rule (our choice; the reference does not say): when two bands hold the same mass (within
`TIE_TOLERANCE`) the task goes to the **lower** band, i.e. it is treated as the harder one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from tbx.errors import ConfigError

DEFAULT_EDGES: tuple[float, ...] = (0.0, 0.08, 0.30, 0.60, 0.90, 1.0)
DEFAULT_BAND_NAMES: tuple[str, ...] = ("rarely", "hard", "medium", "often", "almost always")
TIE_TOLERANCE = 1e-12  # masses closer than this count as equal (float noise of betainc)


def validate_edges(edges: Sequence[float]) -> tuple[float, ...]:
    """Return `edges` as a tuple of floats, or raise ConfigError naming the bad value and fix.

    Edges must start at 0, end at 1 and increase strictly, so the bands cover [0, 1] without
    overlap or empty bands.
    """
    values = tuple(float(e) for e in edges)
    if len(values) < 2:
        raise ConfigError("difficulty", "edges", f"got {list(values)}, need at least 2 values",
                          "give the band edges from 0 to 1, e.g. [0, 0.08, 0.3, 0.6, 0.9, 1]")
    if values[0] != 0.0 or values[-1] != 1.0:
        raise ConfigError("difficulty", "edges",
                          f"edges must start at 0 and end at 1, got {values[0]} ... {values[-1]}",
                          "make the first edge 0 and the last edge 1")
    for low, high in zip(values, values[1:], strict=False):
        if not low < high:
            raise ConfigError("difficulty", "edges",
                              f"edges must increase strictly, got {low} followed by {high}",
                              "sort the edges and remove duplicates")
    return values


def validate_band_names(names: Sequence[str], edges: Sequence[float]) -> tuple[str, ...]:
    """Return `names` as a tuple, checking there is exactly one name per band."""
    if len(names) != len(edges) - 1:
        raise ConfigError("difficulty", "band_names",
                          f"{len(names)} names for {len(edges) - 1} bands (edges {list(edges)})",
                          "give one name per band, i.e. len(edges) - 1 names")
    return tuple(names)


def check_counts(k: int, n: int) -> None:
    """Raise ValueError unless 0 <= k <= n and n >= 1 (whole numbers)."""
    if n != int(n) or k != int(k):
        raise ValueError(f"k and n must be whole numbers of attempts, got k={k}, n={n}")
    if n < 1:
        raise ValueError(f"n={n}: a task needs at least one non-error attempt to have a difficulty; "
                         "probe it again or leave it out of the pool")
    if k < 0 or k > n:
        raise ValueError(f"k={k} successes out of n={n} attempts: k must lie in 0..n; "
                         "count successes among the non-error attempts only")


def _posterior_parameters(k: int, n: int) -> tuple[float, float]:
    check_counts(k, n)
    return k + 0.5, n - k + 0.5


def band_masses(k: int, n: int, edges: Sequence[float] = DEFAULT_EDGES) -> list[float]:
    """Posterior mass of Beta(k+½, n−k+½) in each band [edges[i], edges[i+1]); sums to 1."""
    a, b = _posterior_parameters(k, n)
    cdf = special.betainc(a, b, np.asarray(validate_edges(edges)))
    cdf[0], cdf[-1] = 0.0, 1.0  # exact ends, so the masses telescope to exactly 1 - 0
    return [max(float(m), 0.0) for m in np.diff(cdf)]


def assign_band(k: int, n: int, edges: Sequence[float] = DEFAULT_EDGES) -> int:
    """Index of the band holding the most posterior mass; a tie goes to the lower band."""
    return _most_mass(band_masses(k, n, edges))


def _most_mass(masses: Sequence[float]) -> int:
    best = 0
    for index, mass in enumerate(masses):
        if mass > masses[best] + TIE_TOLERANCE:
            best = index
    return best


def posterior_mean(k: int, n: int) -> float:
    """Mean of the Jeffreys posterior, (k+½)/(n+1)."""
    a, b = _posterior_parameters(k, n)
    return a / (a + b)


def credible_interval(k: int, n: int, level: float = 0.9) -> tuple[float, float]:
    """Central credible interval: the (1−level)/2 and (1+level)/2 posterior quantiles."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: a credible level must lie strictly between 0 and 1, e.g. 0.9")
    a, b = _posterior_parameters(k, n)
    tail = (1.0 - level) / 2.0
    low, high = special.betaincinv(a, b, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Difficulty:
    """What probing says about one task: counts, band, and the posterior behind the band."""

    k: int  # successes among non-error attempts
    n: int  # non-error attempts
    band: int  # index into the bands (0 = lowest success rate)
    masses: tuple[float, ...]  # posterior mass per band, sums to 1
    mean: float  # posterior mean success rate
    interval: tuple[float, float]  # central 90% credible interval


def describe(k: int, n: int, edges: Sequence[float] = DEFAULT_EDGES) -> Difficulty:
    """The full `Difficulty` record for k successes in n non-error attempts."""
    masses = tuple(band_masses(k, n, edges))
    return Difficulty(k=int(k), n=int(n), band=_most_mass(masses), masses=masses,
                      mean=posterior_mean(k, n), interval=credible_interval(k, n))
