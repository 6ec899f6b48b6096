"""Judge rules in the benchmark (issue 23, part 5): in every benchmark domain a family's verdict
includes a narrow natural-language rule (the agent told the user an amount). The evidence judge,
the default, passes the reference and fails a reference that leaves the statement out; a
configured judge decides instead of it; with no judge the episode is excluded, never passed."""

import asyncio
import dataclasses

import pytest

from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import prepare_task, resolve_tasks
from tbx.config import TasksConfig
from tbx.episodes import Outcome, run_episode
from tbx.grading.judge import EvidenceJudge, Judge, JudgeVerdict
from tbx.policies.reference import OraclePolicy
from tests.helpers.episodes import world_of
from tests.helpers.stage import make_cfg

BENCH = ("travel", "retail", "auto_insurance", "neobank", "consulting")
JUDGED = {"travel": {"cancel_refundable"}, "retail": {"return_items"}, "auto_insurance": {"cancel_policy"},
          "neobank": {"transfer_capped_by_limit"}, "consulting": {"invoice_credit"}}


class AlwaysFails(Judge):
    """A configured judge stands in for the evidence judge: every rule it is asked fails."""

    name = "always_fails"

    def __init__(self):
        self.asked = []

    async def decide(self, rule, transcript):
        self.asked.append(rule.id)
        return JudgeVerdict(rule.id, False, "configured judge says no")


@pytest.fixture(scope="module", params=BENCH)
def judged(request, tmp_path_factory):
    backend = SQLiteBackend(str(tmp_path_factory.mktemp(request.param)))
    tasks = resolve_tasks(TasksConfig(name=request.param, domains=[request.param]))
    yield request.param, backend, tasks
    backend.close()


def play(runtime, backend, judge, steps=None):
    task = runtime.task if steps is None else dataclasses.replace(runtime.task, reference=tuple(steps))
    runtime = dataclasses.replace(runtime, task=task)
    return asyncio.run(run_episode(world_of(backend, judge=judge), runtime, OraclePolicy(), 0, 0))


def without_statement(task):
    """The reference with every rule's evidence cut out of its messages ("$950" becomes "that
    amount"): the same turns, questions still questions, and the statement gone."""
    def cut(text):
        for phrase in (e for rule in task.checks.judge for e in rule.evidence):
            text = text.replace(phrase, "that amount")
        return text
    return [dataclasses.replace(s, say=cut(s.say)) if s.say else s for s in task.reference]


def test_the_judged_families_and_their_verdicts(judged):
    domain, backend, tasks = judged
    with_rules = [t for t in tasks if t.checks.judge]
    assert {t.family for t in with_rules} == JUDGED[domain]
    assert all(t.checks.judge for t in tasks if t.family in JUDGED[domain])  # every task of the family
    for task in with_rules:
        runtime = prepare_task(task, backend)
        passed = play(runtime, backend, EvidenceJudge())
        assert passed.outcome is Outcome.SUCCESS, (task.id, passed.cause)
        silent = play(runtime, backend, EvidenceJudge(), without_statement(task))
        judge_checks = [c for c in silent.grade.checks if c.name.startswith("judge ")]
        assert silent.outcome is Outcome.FAILURE, task.id
        assert judge_checks and not any(c.passed for c in judge_checks), task.id
        assert all(c.passed for c in silent.grade.checks if not c.name.startswith("judge ")), task.id
    first = prepare_task(with_rules[0], backend)
    assert play(first, backend, None).outcome is Outcome.EXCLUDED
    configured = AlwaysFails()
    assert play(first, backend, configured).outcome is Outcome.FAILURE
    assert configured.asked == [rule.id for rule in first.task.checks.judge]


def test_the_evidence_judge_is_the_default_and_none_turns_it_off(tmp_path):
    from tbx.campaign.components import build_judge

    assert isinstance(build_judge(make_cfg(tmp_path)), EvidenceJudge)
    assert build_judge(make_cfg(tmp_path, "judge=none")) is None
