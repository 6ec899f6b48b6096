"""The report at k = 1, 2 and 20, and the paired per-task difference with hand-worked numbers.

The paired bootstrap resamples the shared tasks (a task's attempts in both runs travel together);
with enough resamples its percentile interval is the quantiles of an exact distribution:

- k = 1, 6 tasks, base FFFFFF, new one S: the change is X / 6 with X ~ Binomial(6, 1/6) (how often the
  changed task is drawn). P(X = 0) = (5/6)^6 = 0.335 > 2.5 %, P(X >= 3) = 6.2 %, P(X >= 4) = 0.9 %:
  estimate +16.67 pp, interval [0, +50] pp.
- k = 2, 2 tasks, base FF SS, new SS SS: per-task change +1 and 0; a resample's mean is 0, 1/2, 1 with
  probability 1/4, 1/2, 1/4: estimate +50 pp, interval [0, +100] for pass@1, pass@2 and observed 2/2.
- k = 20, 4 tasks with 5, 10, 0, 15 of 20 successes before and 10, 15, 5, 20 after: every task gains
  exactly 5 of 20, so every resample's pooled pass@1 change is +25 pp: the interval is [+25, +25]
  (a bootstrap that resampled attempts apart from their task would not give zero width). pass@20
  moves on task 3 only (0 -> 1) and observed 20/20 on task 4 only (0 -> 1): a resample's change is
  Y / 4, Y ~ Binomial(4, 1/4); P(Y = 0) = 31.6 %, P(Y >= 3) = 5.1 %, P(Y = 4) = 0.4 %: +25 [0, +75].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tbx.report import RunData, render_report
from tbx.report.data import compare_runs, compute_stats
from tbx.report.figures import _change_cell, heatmap_metrics
from tbx.stats.paired import paired_difference
from tests.helpers.records import PRICES, make_records

RESAMPLES = 20_000


def pattern(successes: int, k: int) -> str:
    return "S" * successes + "F" * (k - successes)


K20_BASE = {"a/1": pattern(5, 20), "a/2": pattern(10, 20), "b/1": pattern(0, 20), "b/2": pattern(15, 20)}
K20_NEW = {"a/1": pattern(10, 20), "a/2": pattern(15, 20), "b/1": pattern(5, 20), "b/2": pattern(20, 20)}


def outcomes(patterns: dict[str, str]) -> dict[str, list[bool]]:
    return {task: [letter == "S" for letter in letters] for task, letters in patterns.items()}


def pp(interval) -> tuple[float, float, float]:
    return tuple(round(100 * v, 2) for v in (interval.estimate, interval.low, interval.high))


def test_paired_difference_at_k1() -> None:
    base = outcomes({f"t/{i}": "F" for i in range(6)})
    new = {**base, "t/3": [True]}
    diff = paired_difference(base, new, 1, np.random.default_rng(0), RESAMPLES)
    assert pp(diff.pass_at_1) == (16.67, 0.0, 50.0)
    assert pp(diff.pass_at_k) == pp(diff.pass_at_1)  # at k = 1 they are one number
    assert (diff.n_tasks, diff.better, diff.worse) == (6, 1, 0)
    assert not diff.excludes_zero("pass_at_1")


def test_paired_difference_at_k2() -> None:
    diff = paired_difference(outcomes({"t/1": "FF", "t/2": "SS"}), outcomes({"t/1": "SS", "t/2": "SS"}), 2,
                             np.random.default_rng(0), RESAMPLES)
    for rate in ("pass_at_1", "pass_at_k", "observed_all"):
        assert pp(diff.interval(rate)) == (50.0, 0.0, 100.0)


def test_paired_difference_at_k20_keeps_attempts_with_their_task() -> None:
    diff = paired_difference(outcomes(K20_BASE), outcomes(K20_NEW), 20, np.random.default_rng(0), RESAMPLES)
    assert pp(diff.pass_at_1) == (25.0, 25.0, 25.0)
    assert diff.excludes_zero("pass_at_1")
    assert pp(diff.pass_at_k) == (25.0, 0.0, 75.0)
    assert pp(diff.observed_all) == (25.0, 0.0, 75.0)
    assert (diff.better, diff.worse) == (4, 0)


def test_paired_difference_of_all_0_or_all_1_runs_keeps_its_width() -> None:
    # 0 of 10 both times: every resample gives 0, yet 10 attempts cannot show 0 exactly. Jeffreys on 0 of 10 is
    # [0, 21.72] %, so square-and-add gives 0 [-21.72, +21.72] pp; 0 of 10 -> 10 of 10 (Jeffreys [78.28, 100] %):
    # low 1 - hypot(1 - 0.7828, 0.2172 - 0) = 69.28 %, high 1 + hypot(0, 0) = 100 % -> +100 [+69.28, +100] pp.
    never = outcomes({f"t/{i}": "F" for i in range(10)})
    always = outcomes({f"t/{i}": "S" for i in range(10)})
    same = paired_difference(never, never, 1, np.random.default_rng(0), 200)
    assert pp(same.pass_at_1) == (0.0, -21.72, 21.72) and not same.excludes_zero("pass_at_1")
    assert pp(paired_difference(never, always, 1, np.random.default_rng(0), 200).pass_at_1) == (100.0, 69.28, 100.0)


def test_paired_difference_only_on_shared_tasks() -> None:
    base = outcomes({"t/1": "FF", "t/2": "SS", "t/gone": "SS"})
    new = outcomes({"t/1": "SS", "t/2": "SS", "t/new": "FF"})
    diff = paired_difference(base, new, 2, np.random.default_rng(0), 100)
    assert diff.n_tasks == 2 and round(100 * diff.pass_at_1.estimate, 2) == 50.0
    assert paired_difference(outcomes({"x": "S"}), outcomes({"y": "S"}), 1, np.random.default_rng(0)) is None


def runs_at(k: int, base: dict[str, str], new: dict[str, str]) -> list[RunData]:
    return [RunData("base", make_records(base, (10, 1)), "tiny", PRICES, k),
            RunData("tuned", make_records(new, (10, 1)), "tiny", PRICES, k)]


def test_report_at_k1(tmp_path: Path) -> None:
    base = {f"t/{i}": "F" for i in range(6)}
    files = render_report(runs_at(1, base, {**base, "t/3": "S"}), tmp_path, resamples=RESAMPLES)
    text = files.markdown_path.read_text()
    table1 = text.split("**Table 1.")[1].split("**Table 2.")[0]
    assert "| pass@1 (%) | 0.00 | 16.67 | +16.67 pp | +16.67 [+0.00, +50.00] |" in table1
    uncertainty = text.split("**Uncertainty.**")[1].split("## Figures")[0]
    assert "| run | pass@1 (%) |\n" in uncertainty  # one pass@1 column, no flip rate (one attempt cannot flip)
    assert uncertainty.split("\n\n")[1].count("pass@1") == 1
    names = sorted(p.name for p in files.png_paths)
    assert names == ["attempt_grid.png", "domains_1_tuned.png"]  # no one-point curve
    assert "No pass@k curves: with one attempt per task" in text
    assert heatmap_metrics(1) == (("pass@1", "pass_at_1"),)


def test_report_at_k2(tmp_path: Path) -> None:
    files = render_report(runs_at(2, {"t/1": "FF", "t/2": "SS"}, {"t/1": "SS", "t/2": "SS"}), tmp_path,
                          resamples=RESAMPLES)
    table1 = files.markdown_path.read_text().split("**Table 1.")[1].split("**Table 2.")[0]
    for label in ("pass@1 (%)", "pass@2 (%)", "observed 2/2 (%)"):
        assert f"| {label} | 50.00 | 100.00 | +50.00 pp | +50.00 [+0.00, +100.00] |" in table1
    assert sorted(p.name for p in files.png_paths) == ["attempt_grid.png", "domains_1_tuned.png", "pass_curves.png"]


def test_report_at_k20(tmp_path: Path) -> None:
    files = render_report(runs_at(20, K20_BASE, K20_NEW), tmp_path, resamples=RESAMPLES)
    table1 = files.markdown_path.read_text().split("**Table 1.")[1].split("**Table 2.")[0]
    assert "| pass@1 (%) | 37.50 | 62.50 | +25.00 pp | +25.00 [+25.00, +25.00] |" in table1
    assert "| pass@20 (%) | 75.00 | 100.00 | +25.00 pp | +25.00 [+0.00, +75.00] |" in table1
    assert "| observed 20/20 (%) | 0.00 | 25.00 | +25.00 pp | +25.00 [+0.00, +75.00] |" in table1
    assert "4 tasks better, 0 worse" in table1
    assert files.tables[0].rows[0][4] == [25.0, 25.0, 25.0]


def test_heat_map_marks_changes_inside_the_noise() -> None:
    rng = np.random.default_rng(0)
    base, new = (compute_stats(run, rng, 200) for run in runs_at(20, K20_BASE, K20_NEW))
    comparison = compare_runs(base, new, rng, RESAMPLES)
    # domain a: tasks a/1, a/2 both +5 of 20 -> pass@1 +25 [+25, +25], beyond the noise; pass@20 does not move
    assert comparison.by_domain["a"].excludes_zero("pass_at_1")
    assert not comparison.by_domain["a"].excludes_zero("pass_at_k")
    assert comparison.by_domain["b"].n_tasks == 2 and comparison.overall.n_tasks == 4
    faded, label = _change_cell(12.5, False, None)
    assert label == "(+12.5)" and faded[:3] == (0.93, 0.93, 0.93)
    from matplotlib.colors import TwoSlopeNorm

    norm = TwoSlopeNorm(0, -50, 50)
    assert _change_cell(80.0, True, norm) == _change_cell(50.0, True, norm)[:1] + ("+80.0",)  # clipped at 50


def test_attempt_grid_left_out_when_no_task_changed(tmp_path: Path) -> None:
    same = {"t/1": "FF", "t/2": "SF"}
    files = render_report(runs_at(2, same, same), tmp_path, resamples=100)
    text = files.markdown_path.read_text()
    assert "attempt_grid.png" not in [p.name for p in files.png_paths]
    assert "No attempt grid: no task's success rate changed between base and tuned." in text
    assert "| pass@1 (%) | 25.00 | 25.00 | +0.00 pp | +0.00 [+0.00, +0.00] |" in text


def test_attempt_grid_shows_only_changed_tasks(tmp_path: Path) -> None:
    from tbx.report.figures import pick_changed_tasks

    rng = np.random.default_rng(0)
    stats = [compute_stats(run, rng, 50) for run in runs_at(2, {"t/1": "FF", "t/2": "FF", "t/3": "SF"},
                                                             {"t/1": "FF", "t/2": "SS", "t/3": "SF"})]
    assert pick_changed_tasks(stats) == ["t/2"]  # 0/2 -> 0/2 and 1/2 -> 1/2 are not changes
    assert pick_changed_tasks(stats[:1]) == ["t/3"]  # one run: only a task that flips


@pytest.mark.parametrize("k", [1, 2, 20])
def test_every_figure_renders_at_k(tmp_path: Path, k: int) -> None:
    base = {f"d{i % 2}/{i}": pattern(i % (k + 1), k) for i in range(8)}
    new = {task: pattern(min(k, letters.count("S") + 1), k) for task, letters in base.items()}
    files = render_report(runs_at(k, base, new), tmp_path, resamples=200)
    for path in files.png_paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ("pass_curves.png" in [p.name for p in files.png_paths]) == (k > 1)
