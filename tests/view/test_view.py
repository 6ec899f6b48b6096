"""The viewer's pages over real stored runs (tests/view/runs.py), through Starlette's test client: the
headline, filters, search and paging, an episode's row diff with the extra side effect, compare with
its flips, the token when bound elsewhere, and the static export whose links all resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tbx.view.app import viewer_app
from tbx.view.store import load_runs
from tests.view.runs import served_run, stored_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("view")
    base, trained = stored_runs(folder)
    loaded = load_runs([base, trained, served_run(folder / "served")], None)
    yield loaded
    for r in loaded:
        r.close()


@pytest.fixture(scope="module")
def client(runs) -> TestClient:
    return TestClient(viewer_app(runs, page_size=4))


def test_runs_page_has_the_headline_with_intervals(client) -> None:
    html = client.get("/").text
    assert "<h2>base <small>eval · agent base · k = 2" in html and "<h2>trained <small>" in html
    # trained: 4 of 6 attempts pass (the transfers), 2 of 3 tasks at 2/2; base fails all
    assert "<td>66.7 <span class=\"ci\">[" in html and "<td>0.0 <span class=\"ci\">[0.0, " in html
    assert 'href="/compare?base=0&amp;new=1"' in html


def test_attempts_filter_search_and_paging(client) -> None:
    first = client.get("/run/1/attempts").text
    assert "6 of 6 attempts · page 1 of 2" in first and first.count('class="episode-link"') == 4
    assert 'id="next" href="/run/1/attempts?page=2"' in first
    assert client.get("/run/1/attempts?page=2").text.count('class="episode-link"') == 2
    failures = client.get("/run/1/attempts?outcome=failure").text
    assert "2 of 6 attempts" in failures and failures.count("mock/nickname/1</a>") == 2
    assert "2 of 6 attempts" in client.get("/run/1/attempts?search=transfer/2").text
    assert "0 of 6 attempts" in client.get("/run/1/attempts?judge=failed").text  # no judge rule on mock
    assert "6 of 6 attempts" in client.get("/run/1/attempts?judge=none").text
    assert "0 of 6 attempts" in client.get("/run/1/attempts?family=transfer&outcome=failure").text


def test_episode_shows_the_row_diff_and_the_extra_side_effect(client) -> None:
    html = client.get("/run/1/episode", params={"task": "mock/nickname/1", "attempt": 1}).text
    assert "✗ no other change</b>: unexpected: update accounts" in html
    side_effect = html.split('<table class="rowdiff side-effect">')[1].split("</table>")[0]
    assert '<span class="extra-mark">extra side effect</span> update accounts {"id": "1"}' in side_effect
    assert "<td>nickname</td><td>∅</td><td>oops</td>" in side_effect
    # what was asked is there (expected from replaying the reference): account 2 renamed
    assert "✓ expected[0] update accounts</b>: row {&#39;id&#39;: &#39;2&#39;} has {&#39;nickname&#39;: &#39;savings&#39;}" in html
    assert "Goal (the simulated user's instructions):</b> Name account 2 &#39;savings&#39;." in html
    assert "tool call <b>set_nickname</b>" in html and "episode " in html and "weight version" in html
    assert client.get("/run/1/episode", params={"task": "nope", "attempt": 1}).status_code == 404
    assert client.get("/run/1/episode", params={"task": "mock/nickname/1", "attempt": 0}).status_code == 404


def test_an_expected_change_shows_expected_against_terminal(client) -> None:
    html = client.get("/run/0/episode", params={"task": "mock/transfer/5", "attempt": 2}).text
    assert "✗ expected[0] update accounts</b>: missing: row" in html
    # the null agent changed nothing: the row as it stands (terminal = before) beside what was expected
    missing = html.split("✗ expected[0] update accounts")[1].split("</table>")[0]
    assert '<caption>unchanged (terminal = before) accounts {"id": 1}</caption>' in missing
    assert '<tr class=" mismatch"><td>balance</td><td>100</td><td>100</td><td>95</td></tr>' in missing
    assert '<tr class=""><td>owner</td><td>Ada</td><td>Ada</td><td></td></tr>' in missing
    insert = html.split("✗ expected[2] insert transfers")[1].split("</table>")[0]
    assert "<caption>no new row in transfers</caption>" in insert
    assert '<tr class=" mismatch"><td>amount</td><td>∅</td><td>∅</td><td>5</td></tr>' in insert
    passed = client.get("/run/1/episode", params={"task": "mock/transfer/5", "attempt": 1}).text
    assert "expected: update accounts key {\"id\": 1} with <code>{\"balance\": 95}</code>" in passed
    assert '<tr class="changed"><td>balance</td><td>100</td><td>95</td><td>95</td></tr>' in passed


def test_compare_finds_the_flipped_tasks_and_links_both_episodes(client) -> None:
    html = client.get("/compare?base=0&new=1").text
    assert "2 of 3 shared tasks changed their success rate" in html
    assert '<tr class="task-row flipped up" data-task="mock/transfer/20">' in html
    assert "+66.7 <span class=\"ci\">[" in html  # paired pass@1: 4 of 6 more successes
    link = re.search(r'href="(/compare/episode\?base=0&amp;new=1&amp;task=mock%2Ftransfer%2F5&amp;attempt=1)"', html)
    pair = client.get(link.group(1).replace("&amp;", "&")).text
    assert pair.count('<section class="verdict">') == 2 and "side-1" in pair and "side-2" in pair
    assert "<small>attempt 1: base vs trained</small>" in pair


def test_compare_has_a_legend_and_a_row_of_attempts_per_run(client) -> None:
    html = client.get("/compare?base=0&new=1").text
    assert 'id="legend">Attempts: one row per run, one column per attempt (numbered from 1)' in html
    row = html.split('data-task="mock/transfer/5">')[1].split("</table>")[0]
    assert '<tr class="numbers"><th></th><th>1</th><th>2</th></tr>' in row
    base, trained = row.split('<tr class="run-row" data-run="base"><th>base</th>')[1].split('data-run="trained"')
    assert base.count('class="cell failure"') == 2 and trained.count('class="cell success"') == 2
    assert 'title="trained, attempt 2: success"' in trained


def test_attempts_are_numbered_from_1_and_causes_shown_whole(runs, client) -> None:
    html = client.get("/run/0/attempts", params={"search": "transfer/5"}).text
    assert [cell for cell in re.findall(r"</td><td>(\d)</td><td><span class=\"outcome", html)] == ["1", "2"]
    cause = runs[0].record("mock/transfer/5", 1).cause
    assert len(cause) > 200 and f'<td class="cause">{cause}</td>'.replace("'", "&#39;") in html


def test_a_served_agents_tokens_and_cost_are_not_known_and_abandoned_is_counted(client) -> None:
    page = client.get("/").text
    served = page.split('<section class="run" id="run-2">')[1]
    line = served.split('<tr class="all">')[1].split("</tr>")[0]
    assert '<td class="abandoned">1</td><td>0</td><td>n/a</td><td>n/a</td>' in line  # 1 abandoned, 0 errors
    assert "$0" not in served and "<th>abandoned</th>" in page
    base = page.split('<section class="run" id="run-0">')[1].split("</section>")[0]
    assert '<td class="abandoned">0</td><td>0</td><td>0</td><td>$0.0000</td>' in base  # the null agent: nothing spent
    attempts = client.get("/run/2/attempts").text
    assert attempts.count("<td>n/a</td><td>n/a</td>") == 2 and "$0" not in attempts
    episode = client.get("/run/2/episode", params={"task": "mock/transfer/5", "attempt": 1}).text
    assert "agent n/a (not seen by tbx)" in episode and '<td id="cost-value">n/a</td>' in episode


def test_an_unpriced_model_costs_n_a_where_it_spent_tokens(runs) -> None:
    from dataclasses import replace

    local = replace(runs[1], unpriced=("agent",))  # a model played with no price given (0 in and out)
    assert (local.cost(1_000, 0.0), local.cost(0, 0.0), runs[1].cost(0, 0.0)) == (None, 0.0, 0.0)
    assert runs[1].cost(1_000, 0.0) is None  # a run read from a database: a priced model never bills $0


def test_a_token_guards_the_viewer_when_one_is_set(runs) -> None:
    guarded = TestClient(viewer_app(runs, 4, token="s3cret"))
    assert guarded.get("/").status_code == 401
    assert guarded.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    opened = guarded.get("/run/0/attempts?token=s3cret&search=mock/transfer&page=2")
    assert opened.status_code == 200 and opened.url.path == "/run/0/attempts" and "token" not in str(opened.url)
    assert opened.url.query == b"search=mock%2Ftransfer&page=2" and "4 of 6 attempts" in opened.text
    assert guarded.get("/").status_code == 200  # the cookie now


def test_export_writes_pages_whose_links_resolve(runs, tmp_path: Path) -> None:
    from tbx.view.export import export_site

    written = export_site(runs, tmp_path / "site", page_size=4)
    names = {p.name for p in written}
    assert "index.html" in names and "compare-0-1.html" in names and "run1-attempts-2.html" in names
    for path in written:
        for target in re.findall(r'(?:href|src)="([^"]+)"', path.read_text()):
            assert "://" not in target and not target.startswith("/"), (path.name, target)
            assert (path.parent / target).is_file(), (path.name, target)
    assert len([n for n in names if n.startswith("run1-mock_")]) == 6
    assert "run1-mock_transfer_5-" in " ".join(names) and not any(n.endswith("-a0.html") for n in names)


def test_every_run_of_a_store_url(runs) -> None:
    stored = load_runs([], runs[1].source)  # the trained run's results.sqlite, as a URL
    assert [(r.name, r.k, r.run_dir) for r in stored] == [(runs[1].run_id, 2, None)]
    client = TestClient(viewer_app(stored, 4))
    assert "6 of 6 attempts" in client.get("/run/0/attempts").text
    html = client.get("/run/0/episode", params={"task": "mock/nickname/1", "attempt": 1}).text
    assert "No task file beside this run" in html and "extra side effect" in html


def test_stage_view_refuses_what_it_cannot_show(tmp_path: Path) -> None:
    from tests.helpers.stage import launch

    out = launch("stage=view", f"out_root={tmp_path}")
    assert out.returncode == 2 and "field 'runs': is empty" in out.stderr
    out = launch("stage=view", f"runs=[{tmp_path}]", f"out_root={tmp_path}")
    assert out.returncode == 2 and "is not a run folder" in out.stderr
    out = launch("stage=view", f"runs=[{tmp_path}]", "view.host=0.0.0.0", f"out_root={tmp_path}")
    assert out.returncode == 2 and "field 'view.token_env': is not set, but view.host=0.0.0.0" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_training_curves_beside_a_run_are_shown(runs, tmp_path: Path) -> None:
    from tbx.report.training_curves import training_curves_figure
    from tbx.view.export import export_site
    from tests.helpers.records import HISTORY

    path = training_curves_figure(HISTORY, runs[1].run_dir / "curves.png")  # as stage=train writes it
    try:
        client = TestClient(viewer_app(runs, 4))
        html = client.get("/").text
        assert '<img class="curves" src="/run/1/curves.png"' in html and "/run/0/curves.png" not in html
        assert client.get("/run/1/curves.png").content == path.read_bytes()
        assert client.get("/run/0/curves.png").status_code == 404
        export_site(runs, tmp_path, 4)
        assert (tmp_path / "run1-curves.png").read_bytes() == path.read_bytes()
    finally:
        path.unlink()


def test_ctrl_c_stops_the_viewer_with_one_line_and_no_resume_message(runs) -> None:
    import signal
    import subprocess
    import sys

    from tests.launch import ctrl_c_reaches_it
    from tests.serve.served import ROOT

    proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), "stage=view", f"runs=[{runs[0].run_dir}]",
                             "view.port=0", "logger=none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, preexec_fn=ctrl_c_reaches_it)
    try:
        assert "Ctrl-C stops it" in proc.stdout.readline()  # listening: the signal lands in the served loop
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err.strip()) == (0, "viewer stopped (Ctrl-C)")
