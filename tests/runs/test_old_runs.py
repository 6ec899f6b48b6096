"""Run folders an earlier release wrote, read by today's code: tests/fixtures/runs_5519a9e holds two eval runs
exactly as commit 5519a9e wrote them (before stage results, stored tries and grades were typed records; its
README says how they were made). Every stored try parses and writes back byte for byte, a resumed run finds
nothing left to play and the summary it wrote, and the report, the viewer, regrade and select give the figures
that release gave (its report.md said pass@1 0.00 and 62.50, 5 successes, 8 and 9 judged attempts)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from tbx.campaign.run_folder import headline as eval_headline
from tbx.launch import run_stage
from tbx.records import StoredTry
from tbx.runs.identity import read_run_meta
from tbx.runs.results import EvalResult
from tbx.stats.metrics import attempt_tally, outcome_summary
from tbx.store import open_store
from tbx.store.results import read_records
from tbx.view.export import export_site
from tbx.view.links import ExportLinks
from tbx.view.pages import episode_page, headline
from tbx.view.store import load_runs
from tests.helpers.stage import make_cfg

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs_5519a9e"
JUDGED, PLAIN, NICKNAME = "fixture/mock/transfer-judged", "fixture/mock/transfer-20", "fixture/mock/nickname"
COIN = {(JUDGED, 0): "failure", (JUDGED, 1): "success", (JUDGED, 2): "user_sim_error", (PLAIN, 0): "success",
        (PLAIN, 1): "success", (PLAIN, 2): "failure", (NICKNAME, 0): "success", (NICKNAME, 1): "success",
        (NICKNAME, 2): "failure"}  # the final try of each attempt, as stored


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A copy of the old run folders: opening a store writes beside it, and the fixture stays as it was written."""
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURE, copy)
    return copy


def stored_blobs(run_dir: Path) -> list[str]:
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        return [blob for (blob,) in db.execute("SELECT record FROM attempts ORDER BY task_id, attempt, try_index")]


def test_every_stored_try_parses_and_writes_back_as_it_was_stored(runs):
    for name, count in (("eval-coin", 12), ("eval-null", 9)):
        blobs = stored_blobs(runs / name)
        assert len(blobs) == count
        for blob in blobs:
            assert json.dumps(StoredTry.parse(blob).to_dict(), ensure_ascii=False, default=str) == blob


def test_a_resumed_run_finds_nothing_to_play_and_sums_up_as_it_did(runs):
    run_dir = runs / "eval-coin"
    meta = read_run_meta(run_dir / "run.json")
    written = (run_dir / "summary.json").read_text()
    store = open_store(None, run_dir, meta["identity"], "eval")
    try:
        assert all(store.is_final(task, attempt, 2) for task in meta["tasks"] for attempt in range(3))
        finals = store.final_records()
        assert {(r.task_id, r.attempt): r.outcome.value for r in finals} == COIN
        assert [r.try_index for r in store.records if (r.task_id, r.attempt) == (JUDGED, 2)] == [0, 1, 2]
        summary = EvalResult.of(outcome_summary(finals), **eval_headline(finals, 3), k=3,
                                run_dir=json.loads(written)["run_dir"], policy="coin", tasks="files", attempts=3,
                                error_tries=store.error_tries(), cost_usd=sum(r.cost_usd for r in store.records),
                                tally=attempt_tally(finals, meta["tasks"], 3))
        today = summary.to_json()
        assert today.pop("tally") == {"asked": 9, "judged": 8, "errored": 1, "excluded": 0, "abandoned": 0,
                                      "missing": 0}  # a key summary.json has had since
        assert today.pop("pass_hat_k") == 0.0  # so has pass^k: no task succeeded in all its judged attempts
        assert json.dumps(today, indent=2) == written  # summary.json, byte for byte
        store.append(replace(finals[0], attempt=3), 0.0)  # a try stored today lands beside the old ones
    finally:
        store.close()
    tries = read_records(run_dir, meta["identity"])
    assert len(tries) == 13 and [(t.attempt, t.try_index, t.outcome) for t in tries if t.task_id == NICKNAME] == [
        (0, 0, "success"), (1, 0, "infra_error"), (1, 1, "success"), (2, 0, "failure"), (3, 0, "success")]


def test_the_report_gives_the_figures_it_gave(runs, tmp_path):
    report = run_stage(make_cfg(tmp_path, "stage=report", f"runs=[{runs / 'eval-null'},{runs / 'eval-coin'}]",
                                "report.allow_incomplete=true"))
    before_after = {row[0]: row[1:4] for row in report.tables[0].rows}
    assert before_after["pass@1 (%)"] == (0.0, 62.5, 62.5)  # 5 successes of 8 verdicts
    assert before_after["pass@3 (%)"] == (0.0, 100.0, 100.0)
    assert before_after["successful attempts"] == (0, 5, 5) and before_after["judged attempts"] == (9, 8, -1)
    assert before_after["errors and exclusions (not failures)"] == (0, 1, 1)
    assert report.tables[1].rows == (("null", "null", 0.0, 0.0, 0.0, 0, 0, 0), ("coin", "coin", 62.5, 100.0, 0.0, 5, 0, 3))
    assert "| coin | coin | 3 | 3 | 8 | user_sim_error 1 | 0 · 1 · 0 of 9 | 1 |" in Path(report.markdown).read_text()


def test_the_viewer_shows_what_was_stored(runs, tmp_path):
    null, coin = load_runs([str(runs / "eval-null"), str(runs / "eval-coin")], None)
    try:
        assert {(r.task_id, r.attempt): r.outcome for r in coin.rows()} == COIN
        assert headline(coin)["lines"][0]["rates"]["pass_at_1"].estimate == 0.625
        assert headline(null)["lines"][0]["rates"]["pass_at_1"].estimate == 0.0
        decisions = coin.judge_decisions()
        assert [decisions[(JUDGED, a)] for a in range(3)] == ["failed", "passed", "none"]
        passed = episode_page(coin, ExportLinks(), JUDGED, 1)
        assert "the agent said [&#39;transfer is complete&#39;]" in passed and "rule told_done" in passed
        errored = episode_page(coin, ExportLinks(), JUDGED, 2)
        assert "3 of 3" in errored and "earlier: verifier_error" in errored
        assert len(export_site([null, coin], tmp_path / "site", 50)) == 31  # as 5519a9e exported them
    finally:
        for run in (null, coin):
            run.close()


def test_regrade_reproduces_every_stored_verdict(runs, tmp_path):
    for name, verdicts in (("eval-coin", 8), ("eval-null", 9)):
        result = run_stage(make_cfg(tmp_path, "stage=regrade", f"regrade.run_dir={runs / name}"))
        assert (result.checked, result.reproduced, result.mismatches) == (verdicts, verdicts, ())
        assert json.loads((runs / name / "regrade.json").read_text())["reproduced"] == verdicts


def test_select_freezes_the_pool_it_froze(runs, tmp_path):
    selected = run_stage(make_cfg(tmp_path, "stage=select", f"select.probe_run={runs / 'eval-coin'}",
                                  f"run_dir={tmp_path / 'select'}"))
    manifest = json.loads(Path(selected.manifest).read_text())
    assert manifest["band_counts"] == {"rarely": 0, "hard": 0, "medium": 1, "often": 2, "almost always": 0}
    assert [(t["id"], t["k"], t["n"], t["errors"], t["band"], t["mean"]) for t in manifest["tasks"]] == [
        (NICKNAME, 2, 3, 0, "often", 0.625), (PLAIN, 2, 3, 0, "often", 0.625), (JUDGED, 1, 2, 1, "medium", 0.5)]
    assert selected.kept == 3
