"""Histogram of tasks per difficulty band, kept and dropped tasks in different colours.

Draws on a bare `Figure` with the Agg canvas rather than pyplot, so it works headless and leaves
no global figure state behind in a notebook or a stage.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tbx.stats.difficulty import Difficulty, validate_band_names, validate_edges

KEPT_COLOUR, DROPPED_COLOUR = "#2a9d8f", "#b0b0b0"


def _counts(difficulties: Mapping[str, Difficulty], kept_ids: Collection[str],
            bands: int) -> tuple[list[int], list[int]]:
    unknown = sorted(set(kept_ids) - set(difficulties))
    if unknown:
        raise ValueError(f"kept ids {unknown[:5]} have no difficulty record; pass the ids of the "
                         "PoolSelection made from these same difficulties")
    kept, dropped = [0] * bands, [0] * bands
    for task_id, difficulty in difficulties.items():
        if not 0 <= difficulty.band < bands:
            raise ValueError(f"task '{task_id}': band {difficulty.band} is outside the {bands} "
                             "bands of these edges; recompute it with describe(k, n, edges)")
        (kept if task_id in kept_ids else dropped)[difficulty.band] += 1
    return kept, dropped


def plot_band_histogram(difficulties: Mapping[str, Difficulty], edges: Sequence[float],
                        names: Sequence[str], kept_ids: Collection[str], path: str | Path) -> Path:
    """Write a bar chart of tasks per band (kept part and dropped part stacked) to `path`."""
    edges = validate_edges(edges)
    names = validate_band_names(names, edges)
    kept_set = frozenset(kept_ids)
    kept, dropped = _counts(difficulties, kept_set, len(names))
    labels = [f"{name}\n[{lo:g}, {hi:g}{']' if hi == 1 else ')'}"
              for name, lo, hi in zip(names, edges[:-1], edges[1:], strict=True)]
    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = range(len(names))
    axes.bar(positions, kept, color=KEPT_COLOUR, label="kept in pool")
    axes.bar(positions, dropped, bottom=kept, color=DROPPED_COLOUR, label="dropped")
    for x, (k, d) in enumerate(zip(kept, dropped, strict=True)):
        axes.annotate(str(k + d), (x, k + d), ha="center", va="bottom", xytext=(0, 2),
                      textcoords="offset points")
    axes.set_xticks(list(positions), labels)
    axes.set_xlabel("difficulty band (posterior success rate of the policy)")
    axes.set_ylabel("tasks")
    axes.set_ylim(0, max([k + d for k, d in zip(kept, dropped, strict=True)] + [1]) * 1.15)
    axes.set_title(f"Tasks per difficulty band: {len(difficulties)} probed, {sum(kept)} kept")
    axes.legend(frameon=False)
    axes.spines[["top", "right"]].set_visible(False)
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path
