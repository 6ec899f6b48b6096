"""tbx's LLM user plays τ²'s scenarios as τ²'s own `UserSimulator` does: the same system prompt, the same
messages sent to the model (the agent's greeting answered first, roles flipped, tool traffic hidden), and
the same stops. τ²'s simulator is imported with its LLM call replaced by a recorder (litellm is one of the
extras tbx does not install); both sides answer from the same canned replies."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest

from tbx.llm.client import ChatResult
from tbx.messages import Message, ToolCall, Usage
from tbx.tau2.tasks import tau2_record, tau2_tasks
from tbx.tau2.user import GREETING
from tbx.users.llm import LLMUserSession

REPLIES = ["Hi, I'd like some help with my booking.", "My user id is in my notes.", "Thanks! ###TRANSFER###"]


@pytest.fixture
def tau2_user_simulator(monkeypatch):
    if "tau2.utils.llm_utils" not in sys.modules:
        stub = types.ModuleType("tau2.utils.llm_utils")
        stub.generate = None
        monkeypatch.setitem(sys.modules, "tau2.utils.llm_utils", stub)
    import tau2.user.user_simulator as simulator

    return simulator


class _Recorder:
    """tbx's side of the endpoint: records each request's messages, answers the next canned reply."""

    def __init__(self):
        self.requests, self.replies = [], iter(REPLIES)

    async def chat(self, messages, tools=None, **overrides):
        self.requests.append([dict(m) for m in messages])
        return ChatResult({"role": "assistant", "content": next(self.replies)}, Usage(), "stop")


def _tau2_side(simulator, monkeypatch, record, agent_texts):
    from tau2.data_model.message import AssistantMessage

    sent, replies = [], iter(REPLIES)

    def generate(model, messages, tools=None, **kwargs):
        sent.append([{"role": m.role, "content": m.content} for m in messages])
        return AssistantMessage(role="assistant", content=next(replies))

    monkeypatch.setattr(simulator, "generate", generate)
    user = simulator.UserSimulator(instructions=str(record.user_scenario), llm="recorded")
    state = user.get_init_state()
    said = []
    for text in [GREETING, *agent_texts]:
        message, state = user.generate_next_message(AssistantMessage(role="assistant", content=text), state)
        said.append((message.content, simulator.UserSimulator.is_stop(message)))
    return sent, said


@pytest.mark.parametrize("source", ["tau2_airline", "tau2_retail"])
def test_prompt_messages_and_stops_match_tau2s_user_simulator(source, tau2_user_simulator, monkeypatch):
    agent_texts = ["Sure. What is your user id?", "Done. Anything else?"]
    for task in tau2_tasks(source, "test")[:3]:
        sent, tau2_said = _tau2_side(tau2_user_simulator, monkeypatch, tau2_record(task.id), agent_texts)
        recorder = _Recorder()
        session = LLMUserSession(recorder, task.user, 0)

        async def talk(session=session, task=task):
            opening = await session.start()
            conversation = [Message("system", task.policy), *opening.messages]
            said = [(opening.messages[-1].content, False)]
            for text in agent_texts:  # the agent also calls a tool, which the user must not see
                conversation += [Message("assistant", "", tool_calls=(ToolCall("calculate", {"expression": "1+1"}, "x"),)),
                                 Message("tool", "2.0", tool_call_id="x", name="calculate"),
                                 Message("assistant", text)]
                turn = await session.reply(conversation)
                conversation.append(Message("user", turn.text))
                said.append((turn.text, turn.done))
            return said

        said = asyncio.run(talk())
        assert recorder.requests == sent  # the same system prompt and messages, request by request
        assert [done for _, done in said] == [stop for _, stop in tau2_said] == [False, False, True]
        assert said[-1][0] == "Thanks!" and "###" not in " ".join(text for text, _ in said)
