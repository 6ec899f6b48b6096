"""Errors are the harness's, failures are the agent's: every way the agent's own turn can end an episode
(a context overflow, a refused request, a content filter, a turn past its time limit) ends the
conversation and the state is graded; refusals the harness causes stay errors. The agent talks to a
real HTTP server (tests/fakes/openai_server.py) through the real client and policy."""

import asyncio
import json
import time
from dataclasses import replace

import pytest

from tbx.backend import make_backend
from tbx.catalog import prepare_task
from tbx.config import EndpointConfig
from tbx.episodes import Outcome, run_episode
from tbx.messages import AssistantTurn
from tbx.policies.base import Agent, Policy
from tbx.policies.openai_compat import OpenAIPolicy
from tbx.policies.reference import ScriptAgent
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    Scripted,
    completion,
    status_reply,
    text_reply,
    tool_call_reply,
)
from tests.helpers.episodes import LIMITS, mock_task, world_of

VLLM_OVERFLOW = ("This model's maximum context length is 2048 tokens. However, you requested 2113 tokens (1601 in "
                 "the messages, 512 in the completion). Please reduce the length of the messages or completion.")
OPENAI_OVERFLOW = json.dumps({"error": {"code": "context_length_exceeded", "message": "too long"}})
AZURE_FILTER = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."


@pytest.fixture
def runtime(tmp_path):
    backend = make_backend("sqlite", None, str(tmp_path))
    yield backend, prepare_task(mock_task(), backend)  # send $5 from account 1 to account 2
    backend.close()


def play(runtime, policy: Policy, turn_timeout_s: float | None = None):
    backend, task = runtime

    async def episode():
        try:
            return await run_episode(world_of(backend, limits=replace(LIMITS, turn_timeout_s=turn_timeout_s)), task,
                                     policy, 0, 0)
        finally:
            await policy.aclose()
    return asyncio.run(episode())


def served(server: FakeOpenAIServer, *replies: Scripted) -> OpenAIPolicy:
    server.script(*replies)
    return OpenAIPolicy(EndpointConfig(base_url=server.base_url, model="fake-model", timeout_s=5, max_retries=1))


def raw(status: int, body: str) -> Scripted:
    return Scripted(status=status, raw=body.encode())


TRANSFER = tool_call_reply("transfer", {"from_account": 1, "to_account": 2, "amount": 5, "memo": "requested"})
ASK = text_reply("Can you confirm the owner name on the account?")


@pytest.mark.parametrize(("refusal", "reason"), [
    (status_reply(400, VLLM_OVERFLOW), "context_overflow"),  # vLLM
    (raw(400, OPENAI_OVERFLOW), "context_overflow"),  # OpenAI
    (status_reply(413, "payload too large"), "context_overflow"),
    (status_reply(400, AZURE_FILTER), "content_filter"),
    (completion({"role": "assistant", "content": ""}, finish_reason="content_filter"), "content_filter"),
    (status_reply(400, "tool_calls[0].function.arguments: invalid JSON"), "request_refused"),
    (status_reply(422, "messages[4]: unprocessable"), "request_refused"),
])
def test_an_end_the_agents_request_caused_is_a_graded_failure_not_an_error(runtime, refusal, reason):
    with FakeOpenAIServer() as server:
        result = play(runtime, served(server, ASK, refusal))
    assert result.outcome is Outcome.FAILURE and result.reward == 0.0, result.cause
    assert result.ended_by == reason and result.grade is not None and result.counts["turns"] == 2
    assert result.cause.startswith(("HTTP", "the provider's filter")) and "missing" in result.cause


def test_the_state_decides_even_when_the_context_overflows(runtime):
    """The agent finished the work, then its conversation outgrew the window: the terminal state passes."""
    with FakeOpenAIServer() as server:
        result = play(runtime, served(server, ASK, TRANSFER, status_reply(400, VLLM_OVERFLOW)))
    assert (result.outcome, result.ended_by) == (Outcome.SUCCESS, "context_overflow"), result.cause


@pytest.mark.parametrize(("refusal", "first"), [
    (status_reply(401, "bad key"), False), (status_reply(403, "forbidden"), False),
    (status_reply(404, "no such model"), False), (status_reply(429, "slow down"), False),
    (status_reply(503, "overloaded"), False),
    (status_reply(400, "unknown field chat_template_kwargs"), True),  # the harness's own first request
])
def test_refusals_of_the_endpoint_or_of_the_harness_request_stay_errors(runtime, refusal, first):
    with FakeOpenAIServer(default=refusal) as server:
        result = play(runtime, served(server, *([] if first else [ASK])))
    assert result.outcome is Outcome.INFRA_ERROR and result.reward is None and result.ended_by == "error"
    assert result.counts["turns"] == (1 if first else 2), result.cause
    if first:
        assert "refused the harness's first request" in result.cause


class _SlowAfterFirstTurn(Agent):
    def __init__(self, delay_s: float):
        self.script, self.delay_s, self.turns = ScriptAgent([AssistantTurn(content="Which account?")]), delay_s, 0

    async def act(self, messages, tools):  # the Agent signature
        self.turns += 1
        if self.turns > 1:
            await asyncio.sleep(self.delay_s)
        return await self.script.act(messages, tools)


class SlowPolicy(Policy):
    def agent(self, context):
        return _SlowAfterFirstTurn(30.0)


def test_a_turn_past_its_time_limit_ends_the_conversation_as_the_agents(runtime):
    began = time.perf_counter()
    result = play(runtime, SlowPolicy(), turn_timeout_s=0.3)
    assert time.perf_counter() - began < 10  # the 30 s turn was cut
    assert (result.outcome, result.ended_by) == (Outcome.FAILURE, "turn_timeout"), result.cause
    assert result.cause.startswith("the agent's turn took longer than 0.3 s")


def test_an_eval_whose_every_conversation_overflows_scores_zero_not_undefined(tmp_path):
    from tests.helpers.stage import make_cfg, run

    """A window too small even for a task's opening is the model's limit: every episode is a failure, and
    pass@1 is 0 (as an error it would be excluded, and the model scored on nothing)."""
    with FakeOpenAIServer(default=status_reply(400, VLLM_OVERFLOW)) as server:
        summary = run(make_cfg(tmp_path, "tasks=mock", "policy=model", "model=openai_endpoint",
                               f"model.endpoint.base_url={server.base_url}", "model.endpoint.model=fake-model",
                               "model.endpoint.api_key_env=null", "eval.concurrency=1"))
    assert summary.pass_at_1 == 0.0 and summary.counts["failure"] == 3 and summary.errors == 0
