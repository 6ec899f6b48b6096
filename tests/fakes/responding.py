"""Scripted OpenAI-compatible servers that answer from the request itself, so concurrent episodes each get
their own conversation: an LLM agent that plays each task's reference (`agent_responder`), the LLM user
played like the scripted user (`user_reply`), and the overrides that point a run at them (`llm_overrides`)."""

from __future__ import annotations

import re
import threading

from tbx.episodes.seeds import episode_seed
from tbx.policies.reference import DONE
from tbx.users.base import STOP
from tests.fakes.openai_server import FakeOpenAIServer, Scripted, status_reply, text_reply, tool_call_reply


class _Requests(list):
    """The fake server's request log; it also keeps, per handler thread, the request being answered."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def append(self, item) -> None:  # a Recorded
        super().append(item)
        self.local.current = item


class RespondingServer(FakeOpenAIServer):
    """A FakeOpenAIServer whose answer is computed from each request's body (`respond(body)`),
    so concurrent episodes each get their own conversation. With `api_key`, a request without
    `Authorization: Bearer <api_key>` gets a 401 (`reject_first`: the first keyed request too, with
    a body that echoes the header, as some servers do)."""

    def __init__(self, respond, api_key: str | None = None, reject_first: bool = False):
        super().__init__()
        self.requests = _Requests()
        self.respond, self.api_key, self.reject_first = respond, api_key, reject_first

    def _next_reply(self) -> Scripted:
        request = self.requests.local.current
        if self.api_key:
            header = request.headers.get("authorization", "")
            if header != f"Bearer {self.api_key}":
                return status_reply(401, "missing or wrong API key")
            with self._lock:
                first, self.reject_first = self.reject_first, False
            if first:
                return status_reply(401, f"key rejected: {header}")
        return self.respond(request.body)


_FACT_LINE = re.compile(r"^- (\w+): (.*) \(share it only when the agent asks about: (.*)\)$", re.M)


def _words(name: str) -> str:
    """A fact's name as words, without the digits of names like card_last4 (the LLM user's audit
    would take `last4` for an invented identifier)."""
    return " ".join(word for word in name.split("_") if not any(c.isdigit() for c in word))


def user_reply(body: dict) -> Scripted:
    """The LLM user's part, played like the scripted user from the simulator's own prompt: a fact
    when its keyword is asked about, "I don't know" to other questions, and a stop otherwise."""
    facts = [(name, value, [k.strip().lower() for k in keywords.split(",")])
             for name, value, keywords in _FACT_LINE.findall(body["messages"][0]["content"])]
    agent_text = body["messages"][-1]["content"].lower()
    asked = [f"My {_words(name)} is {value}." for name, value, keywords in facts if any(k in agent_text for k in keywords)]
    if asked:
        return text_reply(" ".join(asked))
    return text_reply("I don't know." if "?" in agent_text else f"Thank you, that's all. {STOP}")


def agent_responder(tasks: list[dict]):
    """An LLM agent that plays each task's reference. The task is found by the request's sampling
    seed (the episode's seed, derived from the task id and the try; first attempts), the step by
    the number of assistant turns so far."""
    by_seed = {episode_seed(0, task["id"], 0, try_index): task for task in tasks for try_index in range(3)}

    def respond(body: dict) -> Scripted:
        task = by_seed[body["seed"]]
        done = sum(m["role"] == "assistant" for m in body["messages"])
        if done >= len(task["reference"]):
            return text_reply(DONE)
        step = task["reference"][done]
        if step.get("tool"):
            return tool_call_reply(step["tool"], step.get("arguments") or {}, call_id=f"call_{done}")
        return text_reply(step["say"])

    return respond


def llm_overrides(agent_url: str, user_url: str, agent_key_env: str | None = None,
                  user_key_env: str | None = None) -> list[str]:
    """The agent is `model=openai_endpoint` at `agent_url`, the user `user=llm` at `user_url`."""
    return ["policy=model", "model=openai_endpoint", f"model.endpoint.base_url={agent_url}",
            "model.endpoint.model=fake-agent", f"model.endpoint.api_key_env={agent_key_env or 'null'}", "user=llm",
            f"user.endpoint.base_url={user_url}", "user.endpoint.model=fake-user",
            f"user.endpoint.api_key_env={user_key_env or 'null'}"]
