"""Training curves without W&B: one PNG of a GRPO run's per-step metrics (stage=train's `curves.png`).

Panels: reward mean, pool pass@1 so far, loss, gradient norm, zero-variance group rate and the
log-prob gap (trainer vs sampler), each against the optimizer step. A metric a step did not log (no
update: no loss; a temperature other than 1: no log-prob gap, NaN) leaves a gap, never a made-up
point; a panel with nothing logged says so. A bare `Figure` with the Agg canvas, as the other plots.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tbx.process.durable import write_bytes

PANELS = (
    ("train/reward_mean", "reward mean"),
    ("train/pool_pass_at_1_so_far", "pool pass@1 so far"),
    ("train/loss", "loss"),
    ("train/grad_norm", "gradient norm"),
    ("train/sampler/zero_variance_rate", "zero-variance group rate"),
    ("train/logprob_gap", "log-prob gap (trainer − sampler)"),
)


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps that did not log it or logged NaN."""
    steps, values = [], []
    for index, metrics in enumerate(history, start=1):
        value = metrics.get(key)
        if isinstance(value, int | float) and not math.isnan(value):
            steps.append(int(metrics.get("train/step", index)))
            values.append(float(value))
    return steps, values


def training_curves_figure(history: Sequence[Mapping[str, Any]], path: Path | str, title: str = "") -> Path:
    """Write the six panels of `history` (TrainState.history: one metrics dict per step) to `path`."""
    if not history:
        raise ValueError("no training step to plot: the history is empty")
    fig = Figure(figsize=(12, 6.4), layout="constrained")
    axes = fig.subplots(2, 3, sharex=True).ravel()
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        steps, values = _series(history, key)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3.5)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="#777")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in axes[3:]:
        ax.set_xlabel("optimizer step")
    fig.suptitle(title or f"GRPO training: {len(history)} step(s)", fontsize=11)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=120)
    write_bytes(path, image.getvalue())  # atomic: a killed step leaves the last whole figure
    return Path(path)
