"""The OpenAI-compatible client and policy against a real local HTTP server (tests/fakes)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from email.utils import formatdate

import pytest

from tbx.config import Config, EndpointConfig
from tbx.errors import ConfigError, InfraError
from tbx.llm.client import ChatClient, EndpointError
from tbx.llm.wire import to_openai_messages
from tbx.messages import Message, ToolCall, ToolSchema, Usage
from tbx.policies.base import EpisodeContext, PolicySetup
from tbx.policies.openai_compat import OpenAIPolicy
from tbx.vllm.server import free_port
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    Scripted,
    completion,
    delayed,
    hermes_reply,
    malformed_reply,
    status_reply,
    text_reply,
    tool_call_reply,
)

KEY_ENV, KEY = "TBX_TEST_LLM_KEY", "sk-test-secret-4f2a9c"
GET_ACCOUNT = ToolSchema("get_account", "Read one account.",
                         {"type": "object", "properties": {"account_id": {"type": "integer"}}, "required": ["account_id"]})
CONVERSATION = [Message("system", "You are a bank agent."), Message("user", "Send $5 from account 1 to 2.")]


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def endpoint(server: FakeOpenAIServer, **changes) -> EndpointConfig:
    fields = {"base_url": server.base_url, "model": "fake-model", "timeout_s": 2.0, "max_retries": 2,
              "temperature": 0.7, "max_tokens": 64}
    return EndpointConfig(**(fields | changes))


def client(server: FakeOpenAIServer, **changes) -> ChatClient:
    return ChatClient(endpoint(server, **changes), backoff_s=0.01)


def act(policy: OpenAIPolicy, messages=CONVERSATION, tools=(GET_ACCOUNT,)):
    async def run():
        try:
            return await policy.agent(EpisodeContext(task=None, attempt=0, seed=42)).act(messages, tools)
        finally:
            await policy.aclose()
    return asyncio.run(run())


def chat(chat_client: ChatClient, messages=None, **overrides):
    async def run():
        try:
            return await chat_client.chat(messages or [{"role": "user", "content": "hi"}], None, **overrides)
        finally:
            await chat_client.aclose()
    return asyncio.run(run())


def test_wire_format_pairs_calls_with_results():
    conversation = [
        Message("user", "hi"),
        Message("assistant", "", (ToolCall("get_account", {"account_id": 1}, "call_0"),)),
        Message("tool", '{"balance": 100}', tool_call_id="call_0", name="get_account"),
        # the parser numbers calls per turn, so call_0 comes again; the episode notes a malformed call
        Message("assistant", "Checking.", (ToolCall("transfer", {"amount": 5}, "call_0"), ToolCall("get_account", {}))),
        Message("tool", "Error: could not parse this tool call: <tool_call>{", name="parse_error", is_error=True),
        Message("tool", "ok", tool_call_id="call_0", name="transfer"),
        Message("tool", "{}", name="get_account"),
    ]
    assert to_openai_messages(conversation) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_account", "arguments": '{"account_id": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"balance": 100}', "name": "get_account"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_0_1", "type": "function", "function": {"name": "transfer", "arguments": '{"amount": 5}'}},
            {"id": "call", "type": "function", "function": {"name": "get_account", "arguments": "{}"}}]},
        {"role": "user", "content": "[parse_error] Error: could not parse this tool call: <tool_call>{"},
        {"role": "tool", "tool_call_id": "call_0_1", "content": "ok", "name": "transfer"},
        {"role": "tool", "tool_call_id": "call", "content": "{}", "name": "get_account"},
    ]


def test_policy_returns_native_tool_calls_and_usage(server):
    server.script(tool_call_reply("get_account", {"account_id": 1}, call_id="call_abc", usage=(120, 17)))
    turn = act(OpenAIPolicy(endpoint(server), model_name="fake"))
    assert turn.tool_calls == (ToolCall("get_account", {"account_id": 1}, "call_abc"),)
    assert turn.usage == Usage(120, 17) and turn.content == "" and turn.malformed == ()
    (request,) = server.chat_requests
    assert request.body["model"] == "fake-model" and request.body["seed"] == 42
    assert request.body["temperature"] == 0.7 and request.body["max_tokens"] == 64
    assert request.body["tools"] == [GET_ACCOUNT.to_openai()] and request.body["tool_choice"] == "auto"
    assert request.body["messages"] == [m.to_dict() for m in CONVERSATION]


def test_policy_reads_hermes_text_and_bad_arguments_with_the_shared_parser(server):
    bad_call = {"id": "c1", "type": "function", "function": {"name": "get_account", "arguments": "{not json"}}
    server.script(hermes_reply("get_account", {"account_id": 2}),
                  completion({"role": "assistant", "content": None, "tool_calls": [bad_call]}))
    policy = OpenAIPolicy(endpoint(server))
    turn = act(policy)
    assert turn.tool_calls == (ToolCall("get_account", {"account_id": 2}, "call_0"),) and turn.content == ""
    broken = act(policy)
    assert broken.tool_calls == () and len(broken.malformed) == 1 and "{not json" in broken.malformed[0]


def test_policy_text_reply_without_tools_sends_no_tools(server):
    server.script(text_reply("Which account?"))
    turn = act(OpenAIPolicy(endpoint(server)), tools=())
    assert turn.content == "Which account?" and turn.tool_calls == ()
    assert "tools" not in server.chat_requests[0].body


def test_from_config_uses_model_endpoint_name_and_prices(server):
    cfg = Config()
    cfg.model.name, cfg.model.kind = "qwen-served", "openai"
    cfg.model.endpoint = endpoint(server, price_input_per_mtok=0.4, price_output_per_mtok=1.6)
    policy = OpenAIPolicy.from_config(PolicySetup(cfg.policy, cfg.model))
    assert policy.model_name == "qwen-served" and policy.client.url == server.base_url + "/chat/completions"
    assert (policy.price_input_per_mtok, policy.price_output_per_mtok) == (0.4, 1.6)
    cfg.model.price_input_per_mtok, cfg.model.price_output_per_mtok = 2.0, 8.0  # the model's own prices win
    assert OpenAIPolicy.from_config(PolicySetup(cfg.policy, cfg.model)).price_output_per_mtok == 8.0


def test_chat_template_kwargs_are_sent_only_when_set(server):
    """`model.chat_template_kwargs` (e.g. Qwen3's enable_thinking) go with every request, for vLLM
    to pass to the chat template; without them the request carries no such field."""
    server.script(text_reply("a"), text_reply("b"))
    cfg = Config()
    cfg.model.endpoint = endpoint(server)
    act(OpenAIPolicy.from_config(PolicySetup(cfg.policy, cfg.model)))
    cfg.model.chat_template_kwargs = {"enable_thinking": False}
    act(OpenAIPolicy.from_config(PolicySetup(cfg.policy, cfg.model)))
    first, second = server.chat_requests
    assert "chat_template_kwargs" not in first.body and second.body["chat_template_kwargs"] == {"enable_thinking": False}


def test_retries_5xx_and_429_then_succeeds(server):
    server.script(status_reply(503), Scripted(status=429, headers={"Retry-After": "0"}), status_reply(500),
                  text_reply("finally"))
    result = chat(client(server, max_retries=3))
    assert result.message["content"] == "finally" and result.usage == Usage(11, 7)
    assert result.finish_reason == "stop" and len(server.chat_requests) == 4


def test_timeouts_raise_infra_error_after_bounded_retries(server):
    server.script(*[delayed(text_reply("late"), 2.0)] * 3)
    short = endpoint(server, timeout_s=0.2, max_retries=2)
    started = time.monotonic()
    with pytest.raises(InfraError, match=r"failed after 3 attempt\(s\): timed out after 0.2 s") as caught:
        act(OpenAIPolicy(short, client=ChatClient(short, backoff_s=0.01)))
    assert len(server.chat_requests) == 3 and caught.value.attempts == 3 and caught.value.status is None
    assert time.monotonic() - started < 1.5  # 3 x 0.2 s timeouts plus ~0.03 s backoff, not the 2 s delays


def arrival_times(*replies) -> tuple[FakeOpenAIServer, list[float]]:
    """A server that answers chat requests with `replies` (callables of nothing, so a reply can be made
    as its request arrives), noting when each request arrived."""
    queue, arrivals = deque(replies), []

    def answer(body):
        arrivals.append(time.monotonic())
        return queue.popleft()()
    return FakeOpenAIServer(answer=answer), arrivals


@pytest.mark.parametrize("form", ["seconds", "date"])
def test_retry_after_is_honoured_in_seconds_and_as_an_http_date(form):
    # backoff_s=0.01: without the header the retry would follow within ~10 ms. An HTTP date has whole
    # seconds, so "now + 2 s" lies between 1 and 2 s ahead.
    header = "0.6" if form == "seconds" else None
    fake, arrivals = arrival_times(
        lambda: Scripted(status=429, headers={"Retry-After": header or formatdate(time.time() + 2, usegmt=True)}),
        lambda: text_reply("ok"))
    with fake as server:
        assert chat(client(server, max_retries=1)).message["content"] == "ok"
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= (0.6 if header else 0.9), arrivals


def test_retry_after_is_capped_and_retries_give_up_with_the_last_status():
    fake, arrivals = arrival_times(*[lambda: Scripted(status=429, headers={"Retry-After": "3600"})] * 3)
    capped = ChatClient(endpoint(fake, max_retries=2), backoff_s=0.01, max_backoff_s=0.3)

    async def run():
        try:  # an uncapped wait would be an hour: fail after 10 s instead
            return await asyncio.wait_for(capped.chat([{"role": "user", "content": "hi"}]), 10)
        finally:
            await capped.aclose()
    with fake, pytest.raises(EndpointError, match=r"failed after 3 attempt\(s\): HTTP 429") as caught:
        asyncio.run(run())
    assert caught.value.status == 429 and caught.value.attempts == 3 and len(arrivals) == 3
    assert all(later - earlier >= 0.3 for earlier, later in zip(arrivals, arrivals[1:], strict=False))


def test_a_request_waiting_to_retry_holds_no_concurrency_slot():
    """concurrency=1 bounds the requests in flight: while A waits out its Retry-After, B is sent and answered."""
    order, a_seen = [], threading.Event()

    def answer(body):
        who = body["messages"][0]["content"]
        order.append(who)
        if order == ["a"]:
            a_seen.set()
            return Scripted(status=429, headers={"Retry-After": "2"})
        return text_reply(who)

    async def run(limited: ChatClient):
        try:
            first = asyncio.create_task(limited.chat([{"role": "user", "content": "a"}]))
            assert await asyncio.to_thread(a_seen.wait, 10)
            second = await asyncio.wait_for(limited.chat([{"role": "user", "content": "b"}]), 1.5)
            return (await first).message["content"], second.message["content"]
        finally:
            await limited.aclose()
    with FakeOpenAIServer(answer=answer) as server:
        assert asyncio.run(run(client(server, concurrency=1))) == ("a", "b")
    assert order == ["a", "b", "a"]


def test_persistent_5xx_raises_infra_error_with_status(server):
    server.script(*[status_reply(502, "bad gateway")] * 3)
    with pytest.raises(EndpointError, match="HTTP 502") as caught:
        chat(client(server, max_retries=2))
    assert isinstance(caught.value, InfraError) and caught.value.status == 502
    assert len(server.chat_requests) == 3


def test_4xx_is_not_retried(server):
    server.script(status_reply(400, "unknown field"), text_reply("never sent"))
    with pytest.raises(InfraError, match=r"HTTP 400 \(not retried\): .*unknown field"):
        chat(client(server, max_retries=3))
    assert len(server.chat_requests) == 1


def test_malformed_body_is_retried_then_reported(server):
    server.script(malformed_reply(), text_reply("ok"))
    assert chat(client(server)).message["content"] == "ok" and len(server.chat_requests) == 2
    server.script(*[malformed_reply()] * 3)
    with pytest.raises(InfraError, match="unreadable response body"):
        chat(client(server))


def test_connection_refused_is_an_infra_error():
    dead = EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", timeout_s=1.0, max_retries=1)
    with pytest.raises(InfraError, match=r"failed after 2 attempt\(s\): connection error"):
        chat(ChatClient(dead, backoff_s=0.01))


def test_api_key_is_sent_as_bearer_but_never_shown(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    server.script(text_reply("hi"), status_reply(401, f"invalid key {KEY}"))
    policy = OpenAIPolicy(endpoint(server, api_key_env=KEY_ENV))
    act(policy)
    assert server.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"
    with pytest.raises(InfraError) as caught:
        act(policy)
    text = str(caught.value) + repr(caught.value) + repr(policy.client) + repr(policy.endpoint)
    assert "HTTP 401" in text and "invalid key ***" in text and KEY not in text


def test_a_reply_that_repeats_the_key_comes_back_masked(server, monkeypatch):
    # a hostile provider: the key in the text, the reasoning, and a tool call's arguments (a JSON string, where
    # a key holding a quote reads escaped)
    key = 'sk-"quoted"-4f2a'
    monkeypatch.setenv(KEY_ENV, key)
    call = {"id": "c1", "type": "function", "function": {"name": "get_account", "arguments":
                                                          '{"account_id": 1, "memo": "sk-\\"quoted\\"-4f2a"}'}}
    server.script(completion({"role": "assistant", "content": f"the key is {key}", "reasoning_content": key,
                              "tool_calls": [call]}))
    result = chat(client(server, api_key_env=KEY_ENV))
    assert result.message["content"] == "the key is ***" and result.message["reasoning_content"] == "***"
    assert result.message["tool_calls"][0]["function"]["arguments"] == '{"account_id": 1, "memo": "***"}'


def test_missing_api_key_variable_fails_at_build_time(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=f"export {KEY_ENV}="):
        ChatClient(endpoint(server, api_key_env=KEY_ENV))


def test_concurrency_limit_holds(server):
    server.script(*[delayed(text_reply("x"), 0.15)] * 5)
    limited = client(server, concurrency=2)

    async def run():
        try:
            return await asyncio.gather(*(limited.chat([{"role": "user", "content": str(i)}]) for i in range(5)))
        finally:
            await limited.aclose()
    assert len(asyncio.run(run())) == 5
    assert server.max_in_flight == 2
