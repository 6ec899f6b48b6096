"""W&B as a dashboard reads it (offline, as by default): the runs of one comparison and their report in
one group, an episode table per evaluation, the report's intervals as numeric columns and pass@k /
pass^k as line plots."""

from pathlib import Path

from tests import wandb_reader
from tests.helpers.stage import make_cfg, run


def test_a_comparison_in_one_group_with_episodes_intervals_and_curves(tmp_path):
    common = ("tasks=mock", "eval.attempts=2", "logger=wandb_offline", "logger.group=base-vs-oracle")
    null = run(make_cfg(tmp_path, *common, "policy=null_agent"))
    oracle = run(make_cfg(tmp_path, *common, "policy=oracle"))
    report = run(make_cfg(tmp_path, "stage=report", f"runs=[{null.run_dir},{oracle.run_dir}]",
                          "logger=wandb_offline", "logger.group=base-vs-oracle"))
    for run_dir in (null.run_dir, oracle.run_dir, report.run_dir):
        assert wandb_reader.run_group(run_dir) == "base-vs-oracle"

    episodes = wandb_reader.table(null.run_dir, "eval/episodes")
    assert episodes["columns"] == ["task", "attempt", "outcome", "reward", "turns", "tokens", "cause",
                                   "transcript (end)"]
    assert len(episodes["data"]) == 6 and {row[2] for row in episodes["data"]} == {"failure"}
    first = episodes["data"][0]
    assert first[:2] == ["mock/nickname/1", 0] and first[-1].startswith("user: I want to give my account 2")

    intervals = wandb_reader.table(report.run_dir, "report/intervals")
    assert intervals["columns"] == ["run", "kind", "metric", "estimate", "low", "high", "tasks"]
    paired = [row for row in intervals["data"] if row[1] == "paired change"]
    # oracle - null: +100 pp on every one of the 3 tasks, so every resample says +100; yet 6 of 6 against 0 of 6
    # attempts (3 of 3 tasks) cannot show +100 exactly: the square-and-add of the two runs' Jeffreys intervals
    assert [row[2:] for row in paired] == [["pass@1", 100.0, 53.275952, 100.0, 3], ["pass@2", 100.0, 24.257091, 100.0, 3],
                                           ["observed 2/2", 100.0, 24.257091, 100.0, 3]]
    table1 = wandb_reader.table(report.run_dir, "report/table1")
    assert table1["data"][0][-1] == "+100.00 [+53.28, +100.00]"

    keys = {key for row in wandb_reader.history(report.run_dir, wait_for="report/pass_hat_k_table/_type")
            for key in row}
    assert {"report/pass_at_k_table/_type", "report/pass_hat_k_table/_type"} <= keys
    curve = wandb_reader.table(report.run_dir, "report/pass_at_k_table")
    points = sorted(tuple(row) for row in curve["data"])  # (k, series, value in %)
    assert points == [(1, "null", 0.0), (1, "oracle", 100.0), (2, "null", 0.0), (2, "oracle", 100.0)], curve
    assert Path(report.markdown).is_file()
