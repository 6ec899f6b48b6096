"""The report on three synthetic runs over 6 tasks x 4 attempts: null (never), mixed, oracle (always).

mixed, per task (S success, F failure, E infra error):
  retail/1 SSSS, retail/2 SFSE, travel/1 SFSF, travel/2 FFFF, bank/1 FFSF, bank/2 SSSS
  -> 13 successes of 23 judged attempts (pass@1 56.52%), 5 of 6 tasks solved at least once
  (pass@4 83.33%; retail/2 counts with its 3 judged attempts), 2 tasks at 4/4 (33.33%).
Cost per episode (tokens x USD per million): null agent 1M in * $0.1 + 0.1M out * $0.2 = $0.12;
oracle 2M * $3 + 0.5M * $15 = $13.50; mixed agent 1.5M * $1 + 0.3M * $2 = $2.10 plus user
0.5M * $0.5 + 0.05M * $1 = $0.30 -> $2.40. Over 24 episodes each: $2.88, $324.00, $57.60.
Per success: oracle 324 / 24 = $13.500, mixed 57.6 / 13 = $4.431; per reliable task: oracle
324 / 6 = $54.00, mixed 57.6 / 2 = $28.80; null: n/a (no success).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tbx.report import RunData, render_report
from tbx.report.figures import pick_changed_tasks
from tbx.report.tables import rank_marks
from tbx.stats.cost import Prices
from tbx.stats.metrics import IncompleteInventoryError
from tests.helpers.records import PRICES, make_records
from tests.store.records import stored

TASKS = ("retail/1", "retail/2", "travel/1", "travel/2", "bank/1", "bank/2")
MIXED = {"retail/1": "SSSS", "retail/2": "SFSE", "travel/1": "SFSF", "travel/2": "FFFF",
         "bank/1": "FFSF", "bank/2": "SSSS"}


def synthetic_runs() -> list[RunData]:
    null = make_records(dict.fromkeys(TASKS, "FFFF"), (1_000_000, 100_000))
    oracle = make_records(dict.fromkeys(TASKS, "SSSS"), (2_000_000, 500_000))
    mixed = make_records(MIXED, (1_500_000, 300_000), (500_000, 50_000))
    return [RunData("null", null, "tiny", PRICES, 4),
            RunData("mixed", mixed, "mid", PRICES, 4, user_model="sim", allow_incomplete=True),
            RunData("oracle", oracle, "big", PRICES, 4)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    return render_report(synthetic_runs(), tmp_path_factory.mktemp("report"), resamples=200)


def test_markdown_has_three_tables_with_marked_best(report) -> None:
    md = report.markdown_path.read_text()
    for title in ("Table 1. Before/after: null (base) vs mixed, oracle", "Table 2. Models side by side",
                  "Table 3. Cost and reliability"):
        assert title in md
    table2 = md.split("Table 2.")[1].split("Table 3.")[0]
    assert "| oracle | big | **100.00** | **100.00** | **100.00** | **24** | **6** | **6** |" in table2
    assert "| mixed | mid | _56.52_ | _83.33_ | _33.33_ | _13_ | _2_ | _5_ |" in table2
    assert "| null | tiny | 0.00 | 0.00 | 0.00 | 0 | 0 | 0 |" in table2
    table3 = md.split("Table 3.")[1].split("Uncertainty")[0]
    assert "| null | **$2.88** | n/a | n/a | 26,400,000 | 0 | 0 | 26,400,000 |" in table3
    # per success and per reliable task are known for two runs only (null: n/a): two values get no mark
    assert "| mixed | _$57.60_ | $4.431 | $28.80 |" in table3
    assert "| oracle | $324.00 | $13.500 | $54.00 |" in table3
    table1 = md.split("Table 1.")[1].split("Table 2.")[0]
    # the paired column: oracle beats null by 100 pp on every task, so every resample gives exactly +100
    assert "| pass@1 (%) | 0.00 | 56.52 | +56.52 pp | +56.52 [" in table1
    # ... though 24 of 24 against 0 of 24 cannot show +100 exactly: the Jeffreys intervals widen it
    assert "| 100.00 | +100.00 pp | +100.00 [+86.09, +100.00] |" in table1
    assert "| tasks at 4/4 | 0 | 2 | +2 |  | 6 | +6 |  |" in table1
    # pass^4 = observed 4/4 where every task has its 4 attempts; mixed's retail/2 has 3 judged (pass^4 at 3: 0)
    assert "| pass^4 (%) | 0.00 | 33.33 | +33.33 pp |  | 100.00 | +100.00 pp |  |" in table1
    assert "| errors and exclusions (not failures) | 0 | 1 | +1 |  | 0 | +0 |  |" in table1
    assert "5 tasks better, 0 worse" in table1  # travel/2 is FFFF in both
    assert "infra_error 1" in md  # the run list names the error
    for png in report.png_paths:
        assert f"]({png.name})" in md


def test_tables_as_plain_rows(report) -> None:
    table1, table2, table3 = report.tables
    assert table1.columns == ("metric", "null", "mixed", "change (mixed)", "paired change, 95% CI (mixed)",
                              "oracle", "change (oracle)", "paired change, 95% CI (oracle)")
    assert table1.rows[0][:4] == ("pass@1 (%)", 0.0, pytest.approx(100 * 13 / 23), pytest.approx(100 * 13 / 23))
    assert table1.rows[0][5:] == (100.0, 100.0, [100.0, pytest.approx(86.085892), 100.0])
    assert table2.rows[2][:3] == ("oracle", "big", 100.0)
    assert table2.marks[2][2] == "best" and table2.marks[1][2] == "second" and table2.marks[0][2] == ""
    mixed_cost = dict(zip(table3.columns, table3.rows[1], strict=True))
    assert mixed_cost["campaign cost (USD)"] == pytest.approx(57.6)
    assert mixed_cost["cost per reliable (4/4) task (USD)"] == pytest.approx(28.8)
    assert dict(zip(table3.columns, table3.rows[0], strict=True))["cost per success (USD)"] is None
    assert table2.to_dict()["rows"][0][0] == "null"


def test_pngs_exist_and_are_images(report) -> None:
    names = sorted(p.name for p in report.png_paths)
    assert names == ["attempt_grid.png", "domains_1_mixed.png", "domains_2_oracle.png", "pass_curves.png"]
    for path in report.png_paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_attempt_grid_picks_the_most_changed_tasks() -> None:
    from tbx.report.data import compute_stats

    rng = np.random.default_rng(0)
    stats = [compute_stats(run, rng, 50) for run in synthetic_runs()]
    # null -> mixed: bank/2 and retail/1 change by 1, retail/2 by 2/3, travel/1 by 1/2
    assert pick_changed_tasks(stats) == ["bank/2", "retail/1", "retail/2"]
    # one run: the tasks whose attempts disagree most (travel/1 2 of 4, retail/2 1 of 3, bank/1 1 of 4)
    assert pick_changed_tasks(stats[1:2]) == ["travel/1", "retail/2", "bank/1"]


def test_rank_marks_ties_and_missing() -> None:
    assert rank_marks([3, 5, 4, None, 1]) == ["", "best", "second", "", ""]
    assert rank_marks([3.0, 1.0, 2.0], higher_is_better=False) == ["", "best", "second"]
    assert rank_marks([3, 5, 5, None, 1]) == [""] * 5  # a tie is no one's best, and no second without a best
    assert rank_marks([5, 3, 3, 1]) == ["best", "", "", ""]
    assert rank_marks([0.0, None, 1.0]) == [""] * 3  # two known values: no marks


def test_render_report_refuses_bad_inputs(tmp_path: Path) -> None:
    null, mixed, oracle = synthetic_runs()
    strict_mixed = RunData("mixed", mixed.records, "mid", PRICES, 4, user_model="sim")
    with pytest.raises(IncompleteInventoryError, match=r"retail/2 \(3 of 4\)"):
        render_report([null, strict_mixed], tmp_path)
    with pytest.raises(ValueError, match="different k"):
        render_report([null, RunData("oracle", oracle.records, "big", PRICES, 3)], tmp_path)
    with pytest.raises(ValueError, match="unique"):
        render_report([null, null], tmp_path)


def test_billed_records_replace_the_bill_only(tmp_path: Path) -> None:
    null = synthetic_runs()[0]
    retried = make_records({"retail/1": "E"}, (10_000_000, 0))  # a retried error: 10M * $0.1 = $1
    billed = RunData("null", null.records, "tiny", PRICES, 4, billed_records=list(null.records) + retried)
    files = render_report([billed], tmp_path, resamples=50)
    costs = dict(zip(files.tables[2].columns, files.tables[2].rows[0], strict=True))
    assert costs["campaign cost (USD)"] == pytest.approx(2.88 + 1.0)
    assert ("errors and exclusions (not failures)", 0) in files.tables[0].rows  # metrics unchanged


def test_single_run_report(tmp_path: Path) -> None:
    files = render_report(synthetic_runs()[1:2], tmp_path, resamples=100)
    assert "no second run to compare" in files.markdown_path.read_text()
    assert sorted(p.name for p in files.png_paths) == ["attempt_grid.png", "pass_curves.png"]


def test_one_attempt_per_task_shows_pass_at_1_once(tmp_path: Path) -> None:
    runs = [RunData("base", make_records(dict.fromkeys(TASKS, "F"), (10, 1)), "tiny", PRICES, 1),
            RunData("tuned", make_records({**dict.fromkeys(TASKS, "F"), "bank/2": "S"}, (10, 1)), "tiny", PRICES, 1)]
    text = render_report(runs, tmp_path, resamples=50).markdown_path.read_text()
    table1 = text.split("**Table 1.")[1].split("**Table 2.")[0]
    assert table1.count("| pass@1 (%)") == 1 and "| observed 1/1 (%)" in table1
    assert text.split("**Table 2.")[1].split("\n\n")[1].count("pass@1 (%)") == 1


def test_unknown_tokens_and_cost_are_na_never_zero_or_best(tmp_path: Path) -> None:
    # served: an agent outside tbx (its tokens are never seen); local: a model with no price (0 in and out,
    # the default) that spent 1.1M tokens a try; priced: the null run's model at $0.12 a try ($2.88 in all).
    served = RunData("served", make_records(MIXED, (0, 0)), "my-agent", {"my-agent": Prices(0, 0)}, 4,
                     allow_incomplete=True, unseen_roles=("agent",))
    local = RunData("local", make_records(MIXED, (1_000_000, 100_000)), "local-m", {"local-m": Prices(0, 0)}, 4,
                    allow_incomplete=True)
    text = render_report([synthetic_runs()[0], served, local], tmp_path, resamples=50).markdown_path.read_text()
    table3 = text.split("Table 3.")[1].split("Uncertainty")[0]
    assert "| served | n/a | n/a | n/a | n/a | 0 | 0 | n/a |" in table3
    assert "| local | n/a | n/a | n/a | 26,400,000 | 0 | 0 | 26,400,000 |" in table3
    assert "| null | $2.88 | n/a | n/a |" in table3  # the only known cost: nothing to rank it against
    assert "$0.00" not in table3 and "**" not in table3.split("\n\n")[1]
    table1 = text.split("Table 1.")[1].split("Table 2.")[0]
    assert "| cost per reliable (4/4) task (USD) | n/a | n/a | n/a |  | n/a | n/a |  |" in table1


def test_two_runs_and_ties_get_no_emphasis_and_table1_has_cost_per_reliable_task(tmp_path: Path) -> None:
    null, mixed, oracle = synthetic_runs()
    text = render_report([mixed, oracle], tmp_path, resamples=50).markdown_path.read_text()
    tables = text.split("**Table 2.")[1].split("**Uncertainty")[0]
    rows = [line for line in tables.splitlines() if line.startswith(("| mixed", "| oracle"))]
    assert len(rows) == 4 and not any("**" in row or "_" in row for row in rows)
    # mixed $57.60 / 2 reliable tasks = $28.80; oracle $324.00 / 6 = $54.00: +$25.20
    table1 = text.split("Table 1.")[1].split("Table 2.")[0]
    assert "| cost per reliable (4/4) task (USD) | $28.80 | $54.00 | +$25.20 |  |" in table1
    tied = render_report([null, RunData("null2", null.records, "tiny", PRICES, 4), oracle], tmp_path / "tie",
                         resamples=50).markdown_path.read_text()
    assert "| null | tiny | 0.00 | 0.00 | 0.00 | 0 | 0 | 0 |" in tied  # null and null2 tie: neither is second
    assert "| oracle | big | **100.00** |" in tied


def test_abandoned_attempts_are_counted_in_the_run_list(tmp_path: Path) -> None:
    records = make_records({"retail/1": "SF", "retail/2": "FF"}, (10, 1))
    records[1] = stored("retail/1", 1, "abandoned", domain="retail", usage=records[1].usage)
    records[3] = stored("retail/2", 1, "abandoned", domain="retail", usage=records[3].usage)
    text = render_report([RunData("served", records, "tiny", PRICES, 2)], tmp_path, resamples=50).markdown_path
    assert "| missing · errored · abandoned of asked |" in text.read_text()
    assert "| served | tiny | 2 | 2 | 4 | none | 0 · 0 · 2 of 4 | 0 |" in text.read_text()
