"""Episodes end in the right typed outcome; errors are never failures; episodes are isolated.

Runs on every backend the `backend` fixture gives (SQLite, and PostgreSQL when it can start).
"""

import asyncio

import pytest

from tbx.backend import dump_state
from tbx.catalog import prepare_task
from tbx.episodes import Outcome, run_episode
from tbx.errors import AgentLeft, InfraError, UserSimError, VerifierError
from tbx.grading.judge import Judge, JudgeVerdict
from tbx.messages import AssistantTurn, ToolCall
from tbx.policies.base import Agent, Policy
from tbx.policies.reference import NullPolicy, OraclePolicy, turns_from_steps
from tbx.tasks import load_task
from tbx.tasks.mutations import mutate
from tbx.users.base import UserSession, UserSimulator
from tests.helpers.episodes import MOCK, ScriptPolicy, mock_task, world_of


def play(runtime, backend, policy, user=None, judge=None, attempt=0):
    return asyncio.run(run_episode(world_of(backend, user, judge), runtime, policy, attempt, 0))


def test_oracle_passes_null_fails(backend):
    runtime = prepare_task(mock_task(), backend)
    good = play(runtime, backend, OraclePolicy())
    assert good.outcome is Outcome.SUCCESS and good.reward == 1.0, good.cause
    bad = play(runtime, backend, NullPolicy())
    assert bad.outcome is Outcome.FAILURE and bad.reward == 0.0
    assert "missing" in bad.cause
    assert good.hashes["task"] == runtime.task.content_hash and len(good.hashes["tools"]) == 16


def test_mutations_fail_with_faulty_record_named(backend):
    task = mock_task()
    runtime = prepare_task(task, backend)
    tools = {spec.name: spec for spec in MOCK.tools}
    mutations = mutate(task.reference, tools, MOCK.distractors)
    assert {m.kind for m in mutations} == {"drop_write", "wrong_value", "extra_write"}
    for mutation in mutations:
        result = play(runtime, backend, ScriptPolicy(turns_from_steps(mutation.steps)))
        assert result.outcome is Outcome.FAILURE, mutation.description
        failed = result.grade.failed_checks
        assert failed, mutation.description
        if mutation.kind == "extra_write":
            assert any("update accounts {'id': '3'}" in c.detail for c in failed)
        else:
            assert any("accounts" in c.detail or "transfers" in c.detail for c in failed)


def test_bad_tool_arguments_are_readable_errors_not_crashes(backend):
    runtime = prepare_task(mock_task(), backend)
    calls = [ToolCall("transfer", {"from_account": "one", "to_account": 2, "amount": 5}, "a"),
             ToolCall("transfer", {"from_account": 3, "to_account": 2, "amount": 5}, "b"),
             ToolCall("get_account", {"account_id": "1; DROP TABLE accounts"}, "c"),
             ToolCall("no_such_tool", {}, "d")]
    turns = [AssistantTurn(tool_calls=(call,)) for call in calls] + [AssistantTurn(content="Sorry.")]
    result = play(runtime, backend, ScriptPolicy(turns))
    assert result.outcome is Outcome.FAILURE
    tool_messages = [m for m in result.transcript if m.role == "tool"]
    assert [m.is_error for m in tool_messages] == [True, True, True, True]
    assert "frozen" in tool_messages[1].content
    assert "Unknown tool" in tool_messages[3].content
    assert result.counts["tool_errors"] == 4
    assert result.final_delta == {}  # nothing was written


def test_two_concurrent_episodes_never_see_each_others_writes(backend):
    runtime = prepare_task(mock_task(), backend)
    seen = {}

    class Probe(Agent):
        def __init__(self, name, amount):
            self.name, self.amount, self.step = name, amount, 0

        async def act(self, messages, tools):
            self.step += 1
            if self.step == 1:
                return AssistantTurn(tool_calls=(ToolCall("transfer", {"from_account": 1, "to_account": 2,
                                                                        "amount": self.amount}, "t"),))
            if self.step == 2:
                await asyncio.sleep(0.05)  # let the other episode write in between
                return AssistantTurn(tool_calls=(ToolCall("get_account", {"account_id": 1}, "g"),))
            seen[self.name] = messages[-1].content
            return AssistantTurn(content="Done.")

    class Pair(Policy):
        def agent(self, context):
            return Probe(*(("a", 5) if context.attempt == 0 else ("b", 20)))

    async def both():
        return await asyncio.gather(*(run_episode(world_of(backend), runtime, Pair(), a, 0)
                                      for a in (0, 1)))

    first, second = asyncio.run(both())
    assert '"balance": 95' in seen["a"] and '"balance": 80' in seen["b"]
    assert first.outcome is Outcome.SUCCESS  # amount 5 is what mock/transfer/5 expects
    assert second.outcome is Outcome.FAILURE
    clone = backend.clone(runtime.template)
    try:
        assert dump_state(clone.engine, MOCK.metadata) == runtime.initial  # the template is untouched
    finally:
        backend.drop(clone)


class Raising(Policy):
    def __init__(self, error):
        self.error = error

    def agent(self, context):
        error = self.error

        class A(Agent):
            async def act(self, messages, tools):
                raise error

        return A()


def test_policy_endpoint_failure_is_infra_error_not_failure(backend):
    runtime = prepare_task(mock_task(), backend)
    for error in (InfraError("endpoint returned 503"), RuntimeError("bug in policy")):
        result = play(runtime, backend, Raising(error))
        assert result.outcome is Outcome.INFRA_ERROR and result.reward is None
        assert result.final_delta is None


def test_tool_crash_is_infra_error(backend, monkeypatch):
    runtime = prepare_task(mock_task(), backend)
    import tbx.domains.mock.tools as mock_tools

    monkeypatch.setattr(mock_tools, "_account", lambda db, account_id: 1 / 0)
    result = play(runtime, backend, OraclePolicy())
    assert result.outcome is Outcome.INFRA_ERROR
    assert "ZeroDivisionError" in result.cause


def test_user_simulator_failure_is_user_sim_error(backend):
    runtime = prepare_task(mock_task(), backend)

    class BrokenUser(UserSimulator):
        def session(self, scenario, seed):
            class S(UserSession):
                def opening(self):
                    return scenario.opening_message

                async def reply(self, conversation):
                    raise UserSimError("revealed owner_name before it was asked")

            return S()

    result = play(runtime, backend, OraclePolicy(), user=BrokenUser())
    assert result.outcome is Outcome.USER_SIM_ERROR and result.reward is None
    assert "revealed" in result.cause


class FixedJudge(Judge):
    def __init__(self, passed=None):
        self.passed = passed

    async def decide(self, rule, transcript):
        if self.passed is None:
            raise VerifierError("judge returned no JSON")
        return JudgeVerdict(rule.id, self.passed, "checked")


def test_judge_rules_excluded_without_judge_and_verifier_error_when_it_fails(backend):
    data = dict(MOCK.generate_tasks(0)[0])
    data["checks"] = dict(data["checks"], judge=[{"id": "told", "rule": "The agent confirmed the transfer."}])
    runtime = prepare_task(load_task(data, "judge-test", MOCK.policy), backend)
    assert play(runtime, backend, OraclePolicy()).outcome is Outcome.EXCLUDED
    assert play(runtime, backend, OraclePolicy(), judge=FixedJudge(True)).outcome is Outcome.SUCCESS
    assert play(runtime, backend, OraclePolicy(), judge=FixedJudge(False)).outcome is Outcome.FAILURE
    failed = play(runtime, backend, OraclePolicy(), judge=FixedJudge(None))
    assert failed.outcome is Outcome.VERIFIER_ERROR and failed.reward is None


def test_the_episode_records_why_the_user_ended_it(backend):
    runtime = prepare_task(mock_task(), backend)
    done = play(runtime, backend, OraclePolicy())  # the reference ends on "Done: the transfer is complete."
    assert (done.ended_by, done.extra["user_end"]) == ("user_stop", "completed")
    refused = play(runtime, backend, ScriptPolicy([AssistantTurn(content="Sorry, I cannot do transfers.")]))
    assert (refused.ended_by, refused.extra["user_end"]) == ("user_stop", "cannot_help")
    stalling = ScriptPolicy([AssistantTurn(content="Let me check that for you.")] * 8)
    gave_up = play(runtime, backend, stalling)
    assert (gave_up.ended_by, gave_up.extra["user_end"], gave_up.counts["turns"]) == ("user_stop", "patience", 4)
    assert gave_up.outcome is Outcome.FAILURE


def test_turn_limit_ends_the_episode_and_state_still_decides(backend):
    runtime = prepare_task(mock_task(turn_limit=2), backend)
    result = play(runtime, backend, OraclePolicy())
    assert result.ended_by == "turn_limit" and result.counts["turns"] == 2
    assert result.outcome is Outcome.FAILURE  # the transfer was never made


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_mock_task_oracle_and_null(backend, index):
    runtime = prepare_task(mock_task(index), backend)
    assert play(runtime, backend, OraclePolicy()).outcome is Outcome.SUCCESS
    assert play(runtime, backend, NullPolicy()).outcome is Outcome.FAILURE


class LeavesAfter(Policy):
    """Plays the reference's first `steps` turns, then leaves (a served agent whose client closed)."""

    name = "leaves"

    def __init__(self, steps):
        self.steps = steps

    def agent(self, context):
        turns = turns_from_steps(context.task.reference)[: self.steps]

        class Leaving(Agent):
            async def act(self, messages, tools):
                if not turns:
                    raise AgentLeft("the session closed")
                return turns.pop(0)

        return Leaving()


def test_an_agent_that_leaves_is_abandoned_a_zero_with_the_state_graded(backend):
    runtime = prepare_task(mock_task(), backend)
    assert runtime.task.reference[-1].say  # the reference ends by telling the user it is done
    done = play(runtime, backend, LeavesAfter(len(runtime.task.reference) - 1))  # all the work, then gone
    assert done.outcome is Outcome.ABANDONED and done.reward == 0.0 and done.ended_by == "agent_left"
    assert done.grade.passed is True  # the state it left would have passed; the verdict is that it left
    assert "left before the user ended" in done.cause
    early = play(runtime, backend, LeavesAfter(0))
    assert early.outcome is Outcome.ABANDONED and early.grade.passed is False and early.counts["turns"] == 1
