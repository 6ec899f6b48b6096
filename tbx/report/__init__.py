"""The evaluation report: three tables and the figures, from stored episode records.

`render_report(runs, out_dir)` writes `report.md` and PNGs into out_dir and returns the tables as
plain data too, so a caller can log them (e.g. to W&B) without parsing Markdown. The first run is
the base of every comparison. Runs must share k (attempts per task): pass@k and observed k/k at
different k do not compare.

Every figure of tbx is drawn here (matplotlib, a bare `Figure` on the Agg canvas, no pyplot state): the
report's (`figures`), the probe's band histogram (`band_histogram`, stage=select) and a GRPO run's curves
(`training_curves`, stage=train's curves.png).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tbx.process.durable import write_text
from tbx.report.data import Comparison, RunData, RunStats, compare_runs, compute_stats
from tbx.report.figures import attempt_grid_figure, curves_figure, domain_heatmap_figure, pick_changed_tasks
from tbx.report.tables import Table, before_after_table, cost_table, pct, side_by_side_table

__all__ = ["INTERVAL_COLUMNS", "Comparison", "ReportFiles", "RunData", "RunStats", "Table", "compare_runs", "compute_stats",
           "render_report"]


@dataclass(frozen=True)
class ReportFiles:
    markdown_path: Path
    png_paths: tuple[Path, ...]
    tables: tuple[Table, ...]  # Table 1, 2, 3 (plain rows in .rows, .to_dict())
    intervals: tuple[tuple[Any, ...], ...] = ()  # rows of INTERVAL_COLUMNS, in percent / pp
    curves: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # run -> ks, pass_at_k, pass_hat_k (%)


INTERVAL_COLUMNS = ("run", "kind", "metric", "estimate", "low", "high", "tasks")


def interval_rows(stats: Sequence[RunStats], comparisons: Sequence[Comparison]) -> tuple[tuple[Any, ...], ...]:
    """Every interval of the report as numbers: each run's own ("run") and each paired change against the
    base ("paired change"), in percent and percentage points."""
    k = stats[0].summary.k
    fields = [("pass@1", "pass_at_1")] + ([(f"pass@{k}", "pass_at_k"), (f"observed {k}/{k}", "observed_all")]
                                         if k > 1 else [])
    rows = []
    for s in stats:
        for label, name in fields:
            i = getattr(s.ci, name)
            rows.append((s.name, "run", label, *(round(100 * v, 6) for v in (i.estimate, i.low, i.high)),
                         s.summary.n_tasks))
    for c in comparisons:
        if c.overall is not None:
            for label, name in fields:
                i = c.overall.interval(name)
                rows.append((c.new.name, "paired change", label,
                             *(round(100 * v, 6) for v in (i.estimate, i.low, i.high)), c.overall.n_tasks))
    return tuple(rows)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


def _check_runs(runs: Sequence[RunData]) -> None:
    if not runs:
        raise ValueError("render_report needs at least one run")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique (they label rows and columns); got {names}")
    ks = {r.name: r.k for r in runs}
    if len(set(ks.values())) != 1:
        raise ValueError(f"runs have different k (attempts per task): {ks}; pass@k and observed k/k "
                         "only compare at the same k, so report runs with the same attempts together")


def _uncertainty_markdown(stats: Sequence[RunStats]) -> str:
    """The intervals per run, with flip rates; at k = 1 only pass@1 (pass@k and observed 1/1 are pass@1,
    and one attempt cannot flip)."""
    s0 = stats[0].ci
    k = s0.k
    columns = [("pass@1 (%)", "pass_at_1")]
    if k > 1:
        columns += [(f"pass@{k} (%)", "pass_at_k"), (f"observed {k}/{k} (%)", "observed_all")]
    flips = (" With the flip rate: the share of tasks with both a success and a failure, and the mean share "
             "of a task's attempts that differ from its majority verdict." if k > 1
             else " One attempt per task: pass@k and observed 1/1 are pass@1, and no task can flip.")
    header = ["run"] + [label for label, _ in columns] + (["flip rate (%)", "minority share (%)"] if k > 1 else [])
    lines = [f"**Uncertainty.** {int(100 * s0.level)}% intervals: the wider of a percentile bootstrap over "
             f"tasks ({s0.resamples:,} resamples; a task's attempts stay together) and the Jeffreys interval on "
             "the counts (so all-0 or all-1 results keep their width)." + flips, "",
             "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for s in stats:
        cells = [s.name] + [f"{pct(i.estimate)} [{pct(i.low)}, {pct(i.high)}]"
                            for i in (getattr(s.ci, field) for _, field in columns)]
        if k > 1:
            cells += [pct(s.flips.flip_rate), pct(s.flips.mean_minority_share)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _runs_markdown(stats: Sequence[RunStats]) -> str:
    lines = ["| run | agent | tasks | k | judged attempts | errors / exclusions | missing · errored · abandoned "
             "of asked | incomplete tasks |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for s in stats:
        errors = ", ".join(f"{name} {n}" for name, n in s.errors.items() if n) or "none"
        t = s.tally
        lines.append(f"| {s.name} | {s.run.model_name} | {s.summary.n_tasks} | {s.summary.k} | "
                     f"{s.summary.attempts:,} | {errors} | {t.missing} · {t.errored} · {t.abandoned} of {t.asked:,} | "
                     f"{len(s.summary.incomplete)} |")
    return "\n".join(lines)


def _figures(stats: Sequence[RunStats], comparisons: Sequence[Comparison],
             out_dir: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(caption, path) of every figure, written into out_dir, and a sentence for each figure left out."""
    figures, left_out = [], []
    tasks = pick_changed_tasks(stats)
    if tasks:
        caption = (f"Attempts on the tasks whose success rate changed most between {stats[0].name} and "
                   f"{stats[1].name}" if len(stats) > 1 else f"Attempts of {stats[0].name} on the tasks that flip most")
        figures.append((caption, attempt_grid_figure(stats, tasks, out_dir / "attempt_grid.png")))
    elif len(stats) > 1:
        left_out.append(f"No attempt grid: no task's success rate changed between {stats[0].name} and "
                        f"{stats[1].name}.")
    else:
        left_out.append(f"No attempt grid: no task of {stats[0].name} has both a success and a failure.")
    for i, comparison in enumerate(comparisons, start=1):
        path = out_dir / f"domains_{i}_{_slug(comparison.new.name)}.png"
        figures.append((f"Per-domain scores and change: {stats[0].name} → {comparison.new.name}",
                        domain_heatmap_figure(comparison, path)))
    if stats[0].summary.k > 1:
        figures.append(("pass@k and pass^k for k = 1..n", curves_figure(stats, out_dir / "pass_curves.png")))
    else:
        left_out.append("No pass@k curves: with one attempt per task, pass@k and pass^k are pass@1 (Table 1).")
    return figures, left_out


def render_report(runs: Sequence[RunData], out_dir: Path | str, *, rng: np.random.Generator | None = None,
                  resamples: int = 2000) -> ReportFiles:
    """Write report.md and the PNGs into out_dir; `rng` drives the bootstrap (default: seed 0)."""
    _check_runs(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = rng if rng is not None else np.random.default_rng(0)
    stats = [compute_stats(run, rng, resamples) for run in runs]
    comparisons = [compare_runs(stats[0], new, rng, resamples) for new in stats[1:]]
    tables = (before_after_table(stats, comparisons), side_by_side_table(stats), cost_table(stats))
    figures, left_out = _figures(stats, comparisons, out)
    parts = ["# Evaluation report", "", _runs_markdown(stats), ""]
    for table in tables:
        parts += [table.to_markdown(), ""]
    parts += [_uncertainty_markdown(stats), "", "## Figures", ""]
    for caption, path in figures:
        parts += [f"![{caption}]({path.name})", "", f"*{caption}.*", ""]
    for sentence in left_out:
        parts += [sentence, ""]
    markdown_path = out / "report.md"
    write_text(markdown_path, "\n".join(parts))
    curves = {s.name: {"ks": list(s.curves.ks), "pass_at_k": [100 * v for v in s.curves.pass_at_k],
                       "pass_hat_k": [100 * v for v in s.curves.pass_hat_k]} for s in stats}
    return ReportFiles(markdown_path, tuple(path for _, path in figures), tables, interval_rows(stats, comparisons),
                       curves)
