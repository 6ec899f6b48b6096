"""stage=eval and stage=regrade through real Hydra composition, and launch.py as users run it."""

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.stage import ROOT, launch, make_cfg, run


def test_eval_oracle_and_null_on_mock(tmp_path):
    summary_path = tmp_path / "s.json"
    oracle = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle", f"summary_path={summary_path}"))
    assert oracle.pass_at_1 == 1.0 and oracle.n_tasks == 3
    stored = json.loads(summary_path.read_text())
    assert stored["counts"]["success"] == 3 and stored["pass_at_1"] == 1.0
    null = run(make_cfg(tmp_path, "tasks=mock", "policy=null_agent", "eval.attempts=2"))
    assert null.pass_at_1 == 0.0 and null.episodes == 6


def stored_keys(run_dir):
    from tbx.store.results import read_records

    return [(r.task_id, r.attempt, r.try_index) for r in read_records(run_dir)]


@pytest.mark.slow
def test_eval_killed_at_random_points_resumes_with_nothing_lost_or_run_twice(tmp_path):
    # the first kill lands while the store is filling up; later ones at random points
    args = ["logger=none", "stage=eval", "tasks=travel", "policy=oracle", "eval.attempts=3", "eval.concurrency=4",
            f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db", "run_dir=" + str(tmp_path / "run")]
    rng = random.Random(7)
    kills = 0
    for delay in [rng.uniform(3.0, 6.0) for _ in range(3)]:
        proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    out = launch(*args)
    assert out.returncode == 0, out.stderr
    keys = stored_keys(tmp_path / "run")
    assert len(keys) == len(set(keys)) == 72 * 3  # every attempt once, no duplicate, none lost
    assert kills >= 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["pass_at_1"] == 1.0


def test_eval_resumes_without_rerunning(tmp_path):
    cfg = make_cfg(tmp_path, "tasks=mock", "eval.attempts=2", "policy=oracle")
    first = run(cfg)
    before = stored_keys(first.run_dir)
    second = run(cfg)
    assert stored_keys(first.run_dir) == before and len(before) == 6
    assert second.pass_at_1 == 1.0


def test_regrade_reproduces_every_verdict_and_catches_a_changed_grader(tmp_path, monkeypatch):
    oracle = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle"))
    null = run(make_cfg(tmp_path, "tasks=mock", "policy=null_agent"))
    for summary in (oracle, null):
        result = run(make_cfg(tmp_path, "stage=regrade", f"regrade.run_dir={summary.run_dir}"))
        assert result.checked == 3 and result.reproduced == 3 and not result.mismatches
    import tbx.stages.regrade as regrade

    monkeypatch.setattr(regrade, "grade_state", lambda *a, **k: type("G", (), {"passed": False})())
    changed = run(make_cfg(tmp_path, "stage=regrade", f"regrade.run_dir={oracle.run_dir}"))
    assert len(changed.mismatches) == 3


def test_replay_plays_a_stored_run(tmp_path):
    oracle = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle"))
    replay = run(make_cfg(tmp_path, "tasks=mock", "policy=replay", f"policy.path={oracle.run_dir}"))
    assert replay.pass_at_1 == 1.0
    steps = tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"task_id": "mock/nickname/1", "steps": [
        {"tool": "set_nickname", "arguments": {"account_id": 2, "nickname": "wrong"}}, {"say": "Done."}]}) + "\n")
    partial = run(make_cfg(tmp_path, "tasks=mock", "policy=replay", f"policy.path={steps}"))
    assert partial.counts["success"] == 0 and partial.counts["failure"] == 3


def test_launch_cli_policy_null_alias_and_summary(tmp_path):
    out = launch("stage=eval", "policy=null", "tasks=mock", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db",
                 f"summary_path={tmp_path}/null.json")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "null.json").read_text())["pass_at_1"] == 0.0
    assert "pass@1" in out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["eval.attempts=0"], "field 'eval.attempts': is 0"),
    (["policy=replay"], "policy.path"),
    (["tasks=files", "tasks.path=/nonexistent/tasks"], "tasks.path': does not exist"),
    (["backend=postgres"], "backend.url"),
])
def test_launch_bad_input_names_field_and_fix(tmp_path, args, message):
    out = launch("stage=eval", "tasks=mock", "policy=oracle", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db",
                 *args)
    assert out.returncode != 0
    assert message in out.stderr


def test_launch_typo_fails_at_compose_time(tmp_path):
    out = launch("eval.attemps=3", f"out_root={tmp_path}")
    assert out.returncode != 0 and "attemps" in out.stderr


def test_show_prints_config_and_exits(tmp_path):
    out = launch("stage=eval", "show=true", "tasks=mock", "policy=oracle", f"out_root={tmp_path}")
    assert out.returncode == 0 and "# run: eval-mock-oracle-" in out.stdout
    assert not (tmp_path / "eval-mock-oracle").exists()


@pytest.mark.parametrize("stage", ["serve_model", "pipeline", "validate"])
def test_show_names_no_run_for_a_stage_without_a_run_folder(tmp_path, stage):
    out = launch(f"stage={stage}", "show=true", "tasks=mock", f"out_root={tmp_path}")
    assert out.returncode == 0 and f"# run: none (stage={stage} writes no run folder of its own)" in out.stdout


def test_report_compares_stored_runs_and_refuses_incomplete_ones(tmp_path):
    base = run(make_cfg(tmp_path, "tasks=mock", "policy=null_agent", "eval.attempts=3"))
    coin = run(make_cfg(tmp_path, "tasks=mock", "policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin",
                        "eval.attempts=3"))
    oracle = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle", "eval.attempts=3"))
    assert oracle.pass_at_k == 1.0 and oracle.observed_all == 1.0 and base.pass_at_k == 0.0
    runs = f"runs=[{base.run_dir},{coin.run_dir},{oracle.run_dir}]"
    report = run(make_cfg(tmp_path, "stage=report", runs))
    text = Path(report.markdown).read_text()
    assert "Table 1" in text and "Table 2" in text and "Table 3" in text
    assert "| oracle | oracle | **100.00** |" in text
    assert len(report.figures) == 4 and all(Path(p).stat().st_size > 10_000 for p in report.figures)
    import sqlite3

    from tbx.errors import ConfigError

    with sqlite3.connect(Path(coin.run_dir) / "results.sqlite") as db:  # lose one attempt of one task
        db.execute("DELETE FROM attempts WHERE task_id = 'mock/nickname/1' AND attempt = 2")
    with pytest.raises(ConfigError, match="mock/nickname/1"):
        run(make_cfg(tmp_path, "stage=report", runs))
    allowed = run(make_cfg(tmp_path, "stage=report", runs, "report.allow_incomplete=true"))
    assert Path(allowed.markdown).is_file()


def test_a_report_of_a_run_killed_between_tasks_is_refused(tmp_path):
    """A kill at a task boundary leaves every stored task complete and the others without a try: the report
    compares with the task set the run was asked (run.json), so it refuses, and allow_incomplete counts them."""
    import sqlite3

    from tbx.errors import ConfigError

    oracle = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle", "eval.attempts=2"))
    assert len(json.loads((Path(oracle.run_dir) / "run.json").read_text())["tasks"]) == 3
    with sqlite3.connect(Path(oracle.run_dir) / "results.sqlite") as db:  # the kill landed before this task
        db.execute("DELETE FROM attempts WHERE task_id = 'mock/nickname/1'")
    runs = f"runs=[{oracle.run_dir}]"
    with pytest.raises(ConfigError, match=r"mock/nickname/1 \(0 of 2\)") as error:
        run(make_cfg(tmp_path, "stage=report", runs))
    assert error.value.field == "report.allow_incomplete"
    allowed = run(make_cfg(tmp_path, "stage=report", runs, "report.allow_incomplete=true"))
    # tasks, k, attempts, errors, missing · errored · abandoned of asked, incomplete
    assert "| 2 | 2 | 4 | none | 2 · 0 · 0 of 6 | 1 |" in Path(allowed.markdown).read_text()


def test_wandb_offline_run_holds_the_metrics_and_tables(tmp_path):
    from tests import wandb_reader

    summary = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle", "logger=wandb_offline"))
    rows = wandb_reader.history(summary.run_dir, wait_for="eval/pass_at_1")
    metrics = {k: v for row in rows for k, v in row.items()}
    assert metrics["eval/pass_at_1"] == 1 and metrics["eval/mock/pass_at_1"] == 1
    assert metrics["eval/attempts/judged"] == 3 and metrics["eval/attempts/missing"] == 0  # beside the metrics
    assert metrics["eval/outcome/success"] == 3 and metrics["eval/n_tasks"] == 3
    families = wandb_reader.table(summary.run_dir, "eval/families")
    assert families["columns"][0] == "family" and sorted(r[0] for r in families["data"]) == [
        "mock/nickname", "mock/transfer"]
