"""stage=train's curves.png (tbx/report/training_curves.py): the six per-step panels from a GRPO history, with a
gap where a step logged nothing (no update: no loss) or NaN (log-prob gap at a temperature other than 1)."""

import pytest

from tbx.report.training_curves import PANELS, _series, training_curves_figure
from tests.helpers.records import HISTORY


def test_series_skip_steps_that_logged_nothing():
    # pool pass@1 so far = mean of every reward so far: (0.25 + 0.5 * 1 + ...) as the trainer logs it
    assert _series(HISTORY, "train/pool_pass_at_1_so_far") == ([1, 2, 3], [0.25, 0.375, 0.5])
    assert _series(HISTORY, "train/loss") == ([2, 3], [0.12, -0.03])
    assert _series(HISTORY, "train/logprob_gap") == ([3], [0.002])  # NaN at step 2 is a gap
    assert [key for key, _ in PANELS] == ["train/reward_mean", "train/pool_pass_at_1_so_far", "train/loss",
                                          "train/grad_norm", "train/sampler/zero_variance_rate",
                                          "train/logprob_gap"]


def test_curves_png_is_written_atomically(tmp_path):
    path = training_curves_figure(HISTORY, tmp_path / "curves.png", "three steps")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]  # no partial file left
    with pytest.raises(ValueError, match="history is empty"):
        training_curves_figure([], tmp_path / "none.png")
