"""The report's figures (matplotlib, Agg, no pyplot state): attempt grids, domain heat map, curves.

Colours: an attempt grid cell is green for a pass, red for a fail, grey for an error or
exclusion, white for a missing attempt; the grid shows only tasks that changed (with one run: that
flip). The heat map shows scores in a sequential blue scale (0-100 %) and changes on a fixed diverging
red-yellow-green scale centred at 0 and stopping at ±50 pp (green up, red down), so a colour means
the same in every report; each row names its tasks × attempts, and a change whose paired interval
includes 0 is grey and in parentheses. At k = 1 only pass@1 is shown (pass@k and observed 1/1 equal it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from tbx.report.data import Comparison, RunStats

PASS, FAIL, ERROR, MISSING = "#2e9e44", "#d62728", "#9e9e9e", "#ffffff"
SCORE_CMAP, CHANGE_CMAP = colormaps["Blues"], colormaps["RdYlGn"]


def pick_changed_tasks(stats: Sequence[RunStats], count: int = 3) -> list[str]:
    """Up to `count` tasks whose success rate changed between the first two runs, largest change first
    (ties: by task id); none when no task changed.

    With one run, the tasks whose attempts disagree most (highest minority share), only those that flip.
    """
    first = stats[0]
    if len(stats) < 2:
        ranked = sorted(((-share, task) for task, share in first.flips.minority_share.items() if share > 0))
        return [task for _, task in ranked[:count]]
    second = stats[1]
    changes = []
    for task in sorted(set(first.outcomes) & set(second.outcomes)):
        a, b = first.success_rate(task), second.success_rate(task)
        if a is not None and b is not None and a != b:
            changes.append((-abs(b - a), task))
    return [task for _, task in sorted(changes)[:count]]


def _cell_colour(outcome: str | None) -> str:
    return {"success": PASS, "failure": FAIL, "abandoned": FAIL, None: MISSING}.get(outcome, ERROR)


def attempt_grid_figure(stats: Sequence[RunStats], tasks: Sequence[str], path: Path) -> Path:
    """One panel per task: rows = runs, columns = attempts, a coloured cell per attempt."""
    k = max(s.run.k for s in stats)
    rows = len(stats)
    fig = Figure(figsize=(max(7.0, 2.6 + 0.36 * k), 0.9 + len(tasks) * (0.75 + 0.38 * rows)),
                 layout="constrained")
    axes = fig.subplots(len(tasks), 1, squeeze=False)[:, 0]
    for ax, task in zip(axes, tasks, strict=True):
        for r, s in enumerate(stats):
            cells = s.cells.get(task, {})
            for a in range(k):
                ax.add_patch(Rectangle((a, r), 1, 1, facecolor=_cell_colour(cells.get(a)),
                                       edgecolor="white", linewidth=1.5))
            values = s.outcomes.get(task, [])
            ax.text(k + 0.3, r + 0.5, f"{sum(values)}/{len(values)}", va="center", fontsize=9)
        ax.set_xlim(0, k + 1.6)
        ax.set_ylim(rows, 0)
        ax.set_xticks([a + 0.5 for a in range(k)], [str(a + 1) for a in range(k)], fontsize=8)
        ax.set_yticks([r + 0.5 for r in range(rows)], [s.name for s in stats], fontsize=9)
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"task {task}  ({stats[0].domains.get(task, '?')})", fontsize=10, loc="left")
    axes[-1].set_xlabel("attempt (right: successes / judged attempts)", fontsize=9)
    fig.legend(handles=[Patch(facecolor=PASS, label="pass"), Patch(facecolor=FAIL, label="fail"),
                        Patch(facecolor=ERROR, label="error / excluded"),
                        Patch(facecolor=MISSING, edgecolor="#999999", label="missing")],
               loc="outside lower center", ncols=4, fontsize=9, frameon=False)
    title = "the tasks that changed most" if len(stats) > 1 else "the tasks whose attempts disagree most"
    fig.suptitle(f"Attempts per run on {title}", fontsize=11, x=0.01, ha="left")
    fig.savefig(path, dpi=130)
    return path


METRICS = (("pass@1", "pass_at_1"), ("pass@k", "pass_at_k"), ("observed k/k", "observed_all"))
CHANGE_LIMIT_PP = 50.0  # the change scale is fixed (clipped beyond), so a colour reads the same in every report


def heatmap_metrics(k: int) -> tuple[tuple[str, str], ...]:
    """The metrics the heat map shows: at k = 1, pass@k and observed 1/1 are pass@1, so only it."""
    return METRICS if k > 1 else METRICS[:1]


def _domain_matrix(comparison: Comparison, metrics: Sequence[tuple[str, str]]) -> tuple[list[str], np.ndarray]:
    """Rows = "all" + domains; columns = (base, new, change) per metric, in percent / pp."""
    base, new = comparison.base, comparison.new
    names = ["all"] + sorted(set(base.summary.by_domain) | set(new.summary.by_domain))
    matrix = np.full((len(names), 3 * len(metrics)), np.nan)
    for r, name in enumerate(names):
        b = base.summary if name == "all" else base.summary.by_domain.get(name)
        n = new.summary if name == "all" else new.summary.by_domain.get(name)
        for m, (_, attr) in enumerate(metrics):
            if b is not None:
                matrix[r, 3 * m] = 100 * getattr(b, attr)
            if n is not None:
                matrix[r, 3 * m + 1] = 100 * getattr(n, attr)
            matrix[r, 3 * m + 2] = matrix[r, 3 * m + 1] - matrix[r, 3 * m]
    return names, matrix


def _text_colour(rgba: Sequence[float]) -> str:
    luminance = 0.2126 * rgba[0] + 0.7152 * rgba[1] + 0.0722 * rgba[2]
    return "black" if luminance > 0.5 else "white"


def _change_cell(value: float, beyond_noise: bool, norm: TwoSlopeNorm) -> tuple[tuple[float, ...], str]:
    """A change's colour and label: faded and in parentheses when its paired interval includes 0."""
    if not beyond_noise:
        return (0.93, 0.93, 0.93, 1.0), f"({value:+.1f})"
    return CHANGE_CMAP(norm(float(np.clip(value, -CHANGE_LIMIT_PP, CHANGE_LIMIT_PP)))), f"{value:+.1f}"


def _row_label(name: str, comparison: Comparison) -> str:
    paired = comparison.by_domain.get(name)
    shared = paired.n_tasks if paired is not None else 0
    return f"{name}  (n = {shared} × {comparison.base.summary.k})"


def domain_heatmap_figure(comparison: Comparison, path: Path) -> Path:
    """Per domain: base, new and change (pp) for pass@1, pass@k and observed k/k (pass@1 only at k = 1),
    annotated; each row names its shared tasks × attempts, and a change whose paired interval includes 0
    is greyed and in parentheses."""
    base, new = comparison.base, comparison.new
    k = base.summary.k
    metrics = heatmap_metrics(k)
    names, matrix = _domain_matrix(comparison, metrics)
    score_norm, change_norm = Normalize(0, 100), TwoSlopeNorm(0, -CHANGE_LIMIT_PP, CHANGE_LIMIT_PP)
    fig = Figure(figsize=(1.0 * matrix.shape[1] + 3.4, 0.48 * len(names) + 2.7), layout="constrained")
    ax = fig.add_subplot()
    for (r, c), value in np.ndenumerate(matrix):
        is_change = c % 3 == 2
        if np.isnan(value):
            colour, label = (0.85, 0.85, 0.85, 1.0), "—"
        elif is_change:
            paired = comparison.by_domain.get(names[r])
            beyond = paired is not None and paired.excludes_zero(metrics[c // 3][1])
            colour, label = _change_cell(value, beyond, change_norm)
        else:
            colour, label = SCORE_CMAP(score_norm(value)), f"{value:.1f}"
        ax.add_patch(Rectangle((c + (c // 3) * 0.25, r), 1, 1, facecolor=colour, edgecolor="white"))
        ax.text(c + (c // 3) * 0.25 + 0.5, r + 0.5, label, ha="center", va="center", fontsize=9,
                color=_text_colour(colour), fontweight="bold" if is_change else "normal")
    xs = [c + (c // 3) * 0.25 + 0.5 for c in range(matrix.shape[1])]
    ax.set_xticks(xs, [label for _ in metrics for label in (base.name, new.name, "change (pp)")],
                  fontsize=8, rotation=30, ha="right")
    ax.set_yticks([r + 0.5 for r in range(len(names))], [_row_label(n, comparison) for n in names], fontsize=9)
    for m, (label, _) in enumerate(metrics):
        title = label.replace("k/k", f"{k}/{k}").replace("@k", f"@{k}")
        ax.text(3 * m + m * 0.25 + 1.5, -0.25, f"{title} (%)", ha="center", va="bottom", fontsize=10,
                fontweight="bold")
    ax.set_xlim(0, matrix.shape[1] + 0.5)
    ax.set_ylim(len(names), -0.9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.colorbar(ScalarMappable(score_norm, SCORE_CMAP), ax=ax, location="bottom", shrink=0.45,
                 label="score (%)", pad=0.02, aspect=30)
    fig.colorbar(ScalarMappable(change_norm, CHANGE_CMAP), ax=ax, location="bottom", shrink=0.45,
                 label=f"change {new.name} − {base.name} (pp; the scale stops at ±{CHANGE_LIMIT_PP:.0f})",
                 pad=0.02, aspect=30)
    fig.suptitle(f"Per domain: {base.name} vs {new.name}. (…) grey: the paired 95% interval includes 0",
                 fontsize=10)
    fig.savefig(path, dpi=130)
    return path


def curves_figure(stats: Sequence[RunStats], path: Path) -> Path:
    """pass@k (coverage) and pass^k (repeatability) for k = 1..n, one line per run."""
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    at_ax, hat_ax = fig.subplots(1, 2, sharey=True)
    for s in stats:
        ks = s.curves.ks
        at_ax.plot(ks, [100 * v for v in s.curves.pass_at_k], marker="o", markersize=3, label=s.name)
        hat_ax.plot(ks, [100 * v for v in s.curves.pass_hat_k], marker="o", markersize=3, label=s.name)
    for ax, title in ((at_ax, "pass@k: solved at least once in k"), (hat_ax, "pass^k: solved in all k")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("k (attempts)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    at_ax.set_ylabel("tasks (%)")
    hat_ax.legend(fontsize=8, loc="best")
    fig.suptitle("Coverage and repeatability by number of attempts", fontsize=11)
    fig.savefig(path, dpi=130)
    return path
