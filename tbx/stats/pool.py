"""Pool strategies: which difficulty bands become the frozen training pool (docs/training.md).

A strategy is data — a name and the success-rate ranges it keeps — so configuration can define
new ones. A band is kept iff it lies inside one keep range; every keep-range end must be a band
edge, otherwise "keep 0.1 to 0.9" over bands cut at 0.08 would silently mean something else.

The reference's two strategies: **full-parameter** keeps success rates in [0.08, 0.90);
**LoRA** also drops the "often solved" band [0.60, 0.90), i.e. keeps [0.08, 0.60).
Selection is a pure function over per-task `Difficulty` records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tbx.errors import ConfigError
from tbx.stats.difficulty import Difficulty, validate_edges

EDGE_TOLERANCE = 1e-9  # a keep-range end this close to a band edge counts as that edge


@dataclass(frozen=True)
class PoolStrategy:
    """Keep the tasks whose band lies inside one of `keep_ranges` ([low, high) success rates)."""

    name: str
    keep_ranges: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        # Config hands lists; store tuples so the strategy stays hashable and immutable.
        ranges = tuple(sorted((float(low), float(high)) for low, high in self.keep_ranges))
        for low, high in ranges:
            if not 0.0 <= low < high <= 1.0:
                raise ConfigError(f"pool strategy '{self.name}'", "keep_ranges",
                                  f"range [{low}, {high}) is not inside [0, 1] with low < high",
                                  "give each range as [low, high] with 0 <= low < high <= 1")
        for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False):
            if low < high:
                raise ConfigError(f"pool strategy '{self.name}'", "keep_ranges",
                                  f"ranges overlap: one ends at {high}, the next starts at {low}",
                                  "merge the overlapping ranges into one")
        object.__setattr__(self, "keep_ranges", ranges)


def full_param_strategy(keep: tuple[float, float] = (0.08, 0.90)) -> PoolStrategy:
    """The reference's full-parameter pool: keep success rates in [keep[0], keep[1])."""
    return PoolStrategy("full_param", (tuple(keep),))


def lora_strategy(keep: tuple[float, float] = (0.08, 0.90),
                  also_drop: tuple[float, float] = (0.60, 0.90)) -> PoolStrategy:
    """The reference's LoRA pool: the full-parameter range minus the "often solved" band."""
    (low, high), (drop_low, drop_high) = keep, also_drop
    pieces = [(low, min(high, drop_low)), (max(low, drop_high), high)]
    return PoolStrategy("lora", tuple((a, b) for a, b in pieces if a < b))


FULL_PARAM = full_param_strategy()
LORA = lora_strategy()


def _edge_index(value: float, edges: tuple[float, ...], strategy: PoolStrategy) -> int:
    for index, edge in enumerate(edges):
        if math.isclose(value, edge, abs_tol=EDGE_TOLERANCE):
            return index
    raise ConfigError(f"pool strategy '{strategy.name}'", "keep_ranges",
                      f"range end {value} is not a band edge (edges {list(edges)})",
                      "make every keep-range end one of the band edges, or add it to the edges")


def kept_bands(strategy: PoolStrategy, edges: Sequence[float]) -> tuple[bool, ...]:
    """For each band, whether `strategy` keeps it (True iff the band lies in a keep range)."""
    edges = validate_edges(edges)
    kept = [False] * (len(edges) - 1)
    for low, high in strategy.keep_ranges:
        for band in range(_edge_index(low, edges, strategy), _edge_index(high, edges, strategy)):
            kept[band] = True
    return tuple(kept)


@dataclass(frozen=True)
class PoolSelection:
    """The outcome of selecting a pool: which tasks are kept, which dropped, and why."""

    strategy: str  # PoolStrategy.name
    kept: tuple[str, ...]  # task ids, sorted
    dropped: tuple[str, ...]  # task ids, sorted
    band_counts: tuple[int, ...]  # tasks per band (all tasks, kept or not)
    kept_bands: tuple[bool, ...]  # per band: kept by the strategy


def select_pool(difficulties: Mapping[str, Difficulty], strategy: PoolStrategy,
                edges: Sequence[float]) -> PoolSelection:
    """Split tasks into kept and dropped by their band under `strategy`."""
    keep = kept_bands(strategy, edges)
    counts = [0] * len(keep)
    kept: list[str] = []
    dropped: list[str] = []
    for task_id, difficulty in difficulties.items():
        if len(difficulty.masses) != len(keep) or not 0 <= difficulty.band < len(keep):
            raise ValueError(f"task '{task_id}': its difficulty has {len(difficulty.masses)} bands "
                             f"(band {difficulty.band}) but the edges {list(edges)} define "
                             f"{len(keep)}; recompute it with describe(k, n, edges)")
        counts[difficulty.band] += 1
        (kept if keep[difficulty.band] else dropped).append(task_id)
    return PoolSelection(strategy=strategy.name, kept=tuple(sorted(kept)),
                         dropped=tuple(sorted(dropped)), band_counts=tuple(counts),
                         kept_bands=keep)

