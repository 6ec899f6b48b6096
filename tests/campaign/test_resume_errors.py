"""Infrastructure failures never shrink a run silently: the same command played again re-plays the attempts
an earlier one left in error (`eval.resume_error_retries` rounds at most), and the eval summary, summary.json,
report.md and the viewer's runs page say how many attempts are judged, errored, abandoned and missing.

The failure is one the command line cannot see (so the run keeps its identity): `OutagePolicy` plays the
oracle, but while the file `+extra.outage_file` names exists, every turn of the tasks it lists (one id a line)
fails as a policy crash would (an endpoint that is down: `infra_error`); `CacheDeletingPolicy` deletes the
template cache under the running eval once, as a user cleaning up might (the case the issue met).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from starlette.testclient import TestClient

from tbx.campaign.attempts import try_limit
from tbx.policies.base import Agent, Policy, PolicySetup
from tbx.policies.reference import OraclePolicy
from tbx.records import AttemptTally, Outcome
from tbx.stats.metrics import attempt_tally
from tbx.store.results import read_records
from tbx.view.app import viewer_app
from tbx.view.store import load_runs
from tests.helpers.stage import make_cfg, run
from tests.store.records import stored

TASKS = ("mock/transfer/5", "mock/transfer/20", "mock/nickname/1")  # tasks=mock


class _Outage(Agent):
    def __init__(self, inner: Agent, down: bool):
        self.inner, self.down = inner, down

    async def act(self, messages, tools):  # the Agent signature
        if self.down:
            raise ConnectionError("the model endpoint is down (scripted outage)")
        return await self.inner.act(messages, tools)


class OutagePolicy(Policy):
    name = "outage"

    def __init__(self, outage_file: Path):
        self.oracle, self.outage_file = OraclePolicy(), outage_file

    @classmethod
    def from_config(cls, setup: PolicySetup) -> OutagePolicy:
        return cls(Path(setup.extra["outage_file"]))

    def agent(self, context):
        down = self.outage_file.is_file() and context.task.id in self.outage_file.read_text().split()
        return _Outage(self.oracle.agent(context), down)


class _DeleteOnce(Agent):
    def __init__(self, inner: Agent, templates: Path, armed: Path):
        self.inner, self.templates, self.armed = inner, templates, armed

    async def act(self, messages, tools):  # the Agent signature
        if self.armed.exists():
            self.armed.unlink()
            shutil.rmtree(self.templates)
        return await self.inner.act(messages, tools)


class CacheDeletingPolicy(Policy):
    name = "cache_deleting"

    def __init__(self, workdir: Path):
        self.oracle, self.workdir = OraclePolicy(), workdir

    @classmethod
    def from_config(cls, setup: PolicySetup) -> CacheDeletingPolicy:
        return cls(Path(setup.extra["workdir"]))

    def agent(self, context):
        return _DeleteOnce(self.oracle.agent(context), self.workdir / "templates", self.workdir / "armed")


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return ["tasks=mock", "policy._target_=tests.campaign.test_resume_errors.OutagePolicy", "policy.name=outage",
            f"+extra.outage_file={tmp_path / 'outage'}", "eval.attempts=2", "eval.max_error_retries=1",
            "eval.workers=1", *extra]


def tries_per_attempt(run_dir: str) -> Counter:
    """(task, attempt) -> tries stored."""
    return Counter((r.task_id, r.attempt) for r in read_records(run_dir))


def test_try_limit_gives_each_command_one_round_and_stops_at_the_bound():
    # max_error_retries=1: rounds of 2 tries; resume_error_retries=2: 3 rounds, 6 tries in all
    assert [try_limit(t, 1, 2) for t in range(8)] == [2, 2, 4, 4, 6, 6, 6, 6]
    assert [try_limit(t, 2, 0) for t in range(5)] == [3, 3, 3, 3, 3]  # 0: never played again, as before
    assert try_limit(2, 2, 1) == 3  # a killed command's round is finished, not restarted


def test_tally_counts_every_attempt_asked():
    records = [stored("a", 0, outcome=Outcome.SUCCESS), stored("a", 1, outcome=Outcome.INFRA_ERROR),
               stored("b", 0, outcome=Outcome.ABANDONED), stored("b", 5, outcome=Outcome.SUCCESS),  # not asked
               stored("z", 0, outcome=Outcome.SUCCESS)]  # not a task of the set
    tally = attempt_tally(records, ["a", "b", "c"], 2)
    assert tally == AttemptTally(asked=6, judged=2, errored=1, excluded=0, abandoned=1, missing=3)
    assert tally.line() == ("2 of 6 attempts judged (pass@1 is over these); 1 errored, 0 excluded, "
                            "1 abandoned (failures), 3 missing")


def test_a_run_left_in_error_is_played_again_by_the_same_command_and_gets_its_verdicts(tmp_path, capsys):
    (tmp_path / "outage").write_text("\n".join(TASKS))
    first = run(make_cfg(tmp_path, *overrides(tmp_path)))
    assert first.exit_code == 3 and first.pass_at_1 is None  # every attempt errored: no verdict
    assert first.tally == AttemptTally(asked=6, judged=0, errored=6, excluded=0, abandoned=0, missing=0)
    assert set(tries_per_attempt(first.run_dir).values()) == {2}  # one round: 1 + max_error_retries
    assert "0 of 6 attempts judged (pass@1 is over these); 6 errored" in capsys.readouterr().out
    (tmp_path / "outage").unlink()  # the outage is over; the same command again
    second = run(make_cfg(tmp_path, *overrides(tmp_path)))
    assert second.run_dir == first.run_dir and second.exit_code == 0
    assert second.pass_at_1 == 1.0 and second.tally.judged == 6 and second.tally.errored == 0
    assert set(tries_per_attempt(second.run_dir).values()) == {3}  # 2 errors, then the verdict
    out = capsys.readouterr()
    assert "note: playing again 6 attempt(s) whose tries all ended in errors: up to 2 more tries each" in out.err
    assert "6 of 6 attempts judged" in out.out


def test_the_replays_are_bounded_and_every_report_shows_what_is_left(tmp_path):
    (tmp_path / "outage").write_text("mock/nickname/1")  # one task of three stays down throughout
    for _ in range(3):  # the first command, its one allowed replay, then one more that plays nothing
        result = run(make_cfg(tmp_path, *overrides(tmp_path)))
    tries = tries_per_attempt(result.run_dir)
    assert {key: n for key, n in tries.items() if key[0] == "mock/nickname/1"} == {("mock/nickname/1", 0): 4,
                                                                                  ("mock/nickname/1", 1): 4}
    assert {n for key, n in tries.items() if key[0] != "mock/nickname/1"} == {1}  # verdicts are never replayed
    expected = AttemptTally(asked=6, judged=4, errored=2, excluded=0, abandoned=0, missing=0)
    assert result.tally == expected and result.pass_at_1 == 1.0
    zero = run(make_cfg(tmp_path, *overrides(tmp_path, "eval.resume_error_retries=0")))
    assert tries_per_attempt(zero.run_dir) == tries  # 0: an attempt left in error is final at once
    summary = (Path(result.run_dir) / "summary.json").read_text()
    assert '"tally": {\n    "asked": 6,\n    "judged": 4,\n    "errored": 2,' in summary

    report = run(make_cfg(tmp_path, "stage=report", f"runs=[{result.run_dir}]", "report.allow_incomplete=true",
                          "report.resamples=20"))
    text = Path(report.markdown).read_text()
    assert "| missing · errored · abandoned of asked |" in text and "| 0 · 2 · 0 of 6 |" in text

    runs = load_runs([result.run_dir], None)
    try:
        html = TestClient(viewer_app(runs, page_size=4)).get("/").text
    finally:
        runs[0].close()
    assert ('<p class="tally">4 of 6 attempts judged (pass@1 is over these); 2 errored, 0 excluded, '
            '0 abandoned (failures), 0 missing</p>') in html


def test_the_template_cache_deleted_under_a_running_eval_costs_nothing_once_the_command_is_run_again(tmp_path, capsys):
    workdir = tmp_path / "db"
    workdir.mkdir()
    (workdir / "armed").touch()  # the first turn of the first command deletes backend.workdir/templates
    words = ["tasks=mock", "policy._target_=tests.campaign.test_resume_errors.CacheDeletingPolicy",
             "policy.name=cache_deleting", f"+extra.workdir={workdir}", "eval.attempts=4", "eval.concurrency=1",
             "eval.workers=1"]
    first = run(make_cfg(tmp_path, *words))
    assert first.tally.errored > 0 and first.tally.judged + first.tally.errored == 12  # the clones failed after it
    assert f"{first.tally.judged} of 12 attempts judged" in capsys.readouterr().out
    second = run(make_cfg(tmp_path, *words))  # the same command: the cache is made again, the errored replayed
    assert second.run_dir == first.run_dir and second.pass_at_1 == 1.0
    assert second.tally == AttemptTally(asked=12, judged=12, errored=0, excluded=0, abandoned=0, missing=0)
    print(f"template cache deleted mid-eval: {first.tally.errored} of 12 attempts errored; after the same command "
          f"again: {second.tally.judged} of 12 judged")


def test_a_command_never_replays_its_own_error_tries(tmp_path):
    # an adaptive probe plays a campaign per round over growing attempt ranges: the attempts its round 1 left in
    # error are the next command's to play again, not round 2's (one round of 1 + max_error_retries tries each)
    (tmp_path / "outage").write_text("mock/nickname/1")
    probe = run(make_cfg(tmp_path, "stage=probe", *overrides(tmp_path, "probe.attempts=8")))
    tries = tries_per_attempt(probe.run_dir)
    assert {n for (task, _), n in tries.items() if task == "mock/nickname/1"} == {2}
    assert len([key for key in tries if key[0] == "mock/nickname/1"]) > 4  # rounds after the first ran
