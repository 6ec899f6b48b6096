"""Our conversation records (`tbx.messages.Message`) in the chat-completions wire format: what the OpenAI-compatible
policy, the LLM user and the verl bridge send (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tbx.messages import Message


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in chat-completions wire format (pure).

    Assistant tool calls carry JSON-string arguments; tool messages carry `tool_call_id`. Call ids
    are made unique over the conversation (the parser numbers calls per turn, so `call_0` recurs):
    a repeated id becomes `<id>_<n>` and the tool messages after it follow the new name. A call
    without an id gets one; a tool message without an id answers the oldest unanswered call of the
    same tool name (any, when it has no name). A tool message that answers no call (the episode's
    note about an unparseable call) would be rejected by strict servers, so it goes out as a user
    message tagged with its name.
    """
    wire: list[dict[str, Any]] = []
    used: set[str] = set()
    current: dict[str, str] = {}  # id as recorded -> id on the wire, for the latest call with that id
    unanswered: list[tuple[str, str]] = []  # (wire id, tool name), oldest first
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = []
            for call in message.tool_calls:
                wire_id = _unique_id(call.id or "call", used)
                current[call.id] = wire_id
                unanswered.append((wire_id, call.name))
                calls.append({"id": wire_id, "type": "function",
                              "function": {"name": call.name, "arguments": json.dumps(call.arguments)}})
            wire.append({"role": "assistant", "content": message.content or None, "tool_calls": calls})
        elif message.role == "tool":
            recorded = current.get(message.tool_call_id, message.tool_call_id) if message.tool_call_id else None
            wire_id = _claim_call(unanswered, recorded, message.name)
            if not wire_id:
                wire.append({"role": "user", "content": f"[{message.name or 'tool'}] {message.content}"})
                continue
            entry = {"role": "tool", "tool_call_id": wire_id, "content": message.content}
            if message.name:
                entry["name"] = message.name
            wire.append(entry)
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def _unique_id(call_id: str, used: set[str]) -> str:
    wire_id, n = call_id, 1
    while wire_id in used:
        wire_id, n = f"{call_id}_{n}", n + 1
    used.add(wire_id)
    return wire_id


def _claim_call(unanswered: list[tuple[str, str]], wire_id: str | None, name: str) -> str:
    """The wire id a tool message answers, removed from `unanswered` ("" when it answers none).

    With an id: that call. Without: the oldest unanswered call named `name` (any when no name).
    """
    for index, (candidate, call_name) in enumerate(unanswered):
        matches = candidate == wire_id if wire_id else (not name or call_name == name)
        if matches:
            del unanswered[index]
            return candidate
    return wire_id or ""
