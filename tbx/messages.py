"""Conversation records shared by policies, users, tools and episodes.

One representation of a turn serves every path (local model, OpenAI-compatible server, oracle,
replay, the verl bridge), so evaluation and training see tool names and arguments the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A call the agent asked for; `id` pairs it with the tool message that answers it."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ToolCall:
        return ToolCall(name=data["name"], arguments=dict(data.get("arguments") or {}), id=data.get("id", ""))


@dataclass(frozen=True)
class Usage:
    """Token counts of one model call (or a sum of them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def to_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


@dataclass(frozen=True)
class Message:
    """One turn of the conversation as the agent sees it.

    `tool_call_id` links a `tool` message to the call it answers; `is_error` marks a tool
    result that reports an error to the agent.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id:
            data["tool_call_id"] = self.tool_call_id
        if self.name:
            data["name"] = self.name
        if self.is_error:
            data["is_error"] = True
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Message:
        return Message(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id", ""),
            name=data.get("name", ""),
            is_error=bool(data.get("is_error", False)),
        )


@dataclass(frozen=True)
class AssistantTurn:
    """What a policy returns for one step: text and/or tool calls, with its token usage.

    `malformed` lists tool-call attempts the parser could not read; the episode shows each to
    the agent as an error and counts it.
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    malformed: tuple[str, ...] = ()

    def as_message(self) -> Message:
        return Message(role="assistant", content=self.content, tool_calls=self.tool_calls)


@dataclass(frozen=True)
class ToolSchema:
    """A tool as the agent sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }
