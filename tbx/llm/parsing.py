"""The one reader of assistant output: reasoning, text and tool calls.

Every path that turns model output into an `AssistantTurn` goes through here — the local
transformers policy, the OpenAI-compatible endpoint and the verl bridge — so evaluation and
training read reasoning, tool names and arguments the same way.

Formats read from text:
- hermes tags, one or several: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; a tag
  may hold several JSON objects or a JSON list, and may wrap its JSON in a ```json fence;
- a bare JSON call as the whole message (optionally in a ```json fence), or a list of them;
- in any call object: `"parameters"` for `"arguments"`, arguments as a JSON *string*, the
  OpenAI shape `{"function": {"name": ..., "arguments": ...}}`, and an optional `"id"`.

Reasoning (`<think>...</think>`, an unclosed `<think>` running to the end, or a lone `</think>`
closing reasoning a chat template opened in the prompt) is removed from the content and returned
separately; a tool call written inside reasoning is not executed. The scan is JSON-aware, so a
`</tool_call>` or `<think>` inside an argument string does not cut the call.

Anything that looks like an attempted call but cannot be read goes to `malformed` as raw text;
parsing never raises. Calls without an id get `call_<index>` (position in the turn), so a turn
parses to the same record every time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tbx.messages import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_TAG = re.compile(re.escape(THINK_OPEN) + "|" + re.escape(CALL_OPEN))
_FENCE_OPEN = re.compile(r"```[A-Za-z]*[ \t]*\n?")
_WHOLE_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n(.*)\n?```\Z", re.DOTALL)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant output, read: visible text, calls, unreadable call attempts, reasoning."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    malformed: tuple[str, ...]
    reasoning: str


def render_tool_call(call: ToolCall) -> str:
    """The hermes text of one call, exactly as prompts and demonstrations show it.

    `parse_assistant_text` reads it back to the same name and arguments. The id is not written
    (hermes has none); the parser assigns `call_<index>`.
    """
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def render_assistant_text(content: str, tool_calls: Sequence[ToolCall]) -> str:
    """An assistant message as model text: its content, then each call on its own lines."""
    parts = [content.strip()] if content.strip() else []
    parts.extend(render_tool_call(call) for call in tool_calls)
    return "\n".join(parts)


def parse_assistant_text(text: str) -> ParsedTurn:
    """Read raw model text into content, tool calls, malformed attempts and reasoning."""
    reader = _read_text(text)
    return ParsedTurn(reader.text, _with_ids(reader.calls), tuple(reader.malformed), reader.thoughts)


def parse_openai_message(message: dict[str, Any]) -> ParsedTurn:
    """Read an OpenAI chat-completions `message`: native `tool_calls` plus its text content.

    The content goes through `parse_assistant_text`, so reasoning is stripped the same way and
    hermes tags written into content still count. Native calls come first. A server's separate
    `reasoning_content` / `reasoning` field is kept as reasoning.
    """
    reader = _read_text(_content_text(message.get("content")))
    calls: list[ToolCall] = []
    malformed: list[str] = []
    for entry in message.get("tool_calls") or ():
        call = _native_call(entry)
        if call is None:
            malformed.append(_dump(entry))
        else:
            calls.append(call)
    reasoning = [str(message.get(key) or "").strip() for key in ("reasoning_content", "reasoning")]
    reasoning.append(reader.thoughts)
    return ParsedTurn(reader.text, _with_ids(calls + reader.calls), tuple(malformed + reader.malformed),
                      "\n\n".join(part for part in reasoning if part))


def _read_text(text: str) -> _Reader:
    reader = _Reader()
    reader.scan(text)
    reader.text = "".join(reader.content).strip()
    if not reader.calls and not reader.malformed:
        reader.text = reader.read_bare_json(reader.text)
    reader.thoughts = "\n\n".join(part.strip() for part in reader.reasoning if part.strip())
    return reader


class _Reader:
    """A left-to-right scan of one output, collecting its parts."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        self.malformed: list[str] = []
        self.text = ""  # the content once scanned
        self.thoughts = ""  # the reasoning once scanned

    def scan(self, text: str) -> None:
        position = 0
        close = text.find(THINK_CLOSE)
        if close >= 0 and THINK_OPEN not in text[:close]:
            # The template opened the reasoning in the prompt; the output only closes it.
            self.reasoning.append(text[:close])
            position = close + len(THINK_CLOSE)
        while True:
            match = _TAG.search(text, position)
            if match is None:
                self.content.append(text[position:])
                return
            self.content.append(text[position:match.start()])
            if match.group() == THINK_OPEN:
                end = text.find(THINK_CLOSE, match.end())
                if end < 0:  # unclosed (cut off while thinking): the rest is reasoning
                    self.reasoning.append(text[match.end():])
                    return
                self.reasoning.append(text[match.end():end])
                position = end + len(THINK_CLOSE)
            else:
                position = self._read_block(text, match.start(), match.end())

    def _read_block(self, text: str, tag_start: int, start: int) -> int:
        """Read the JSON of one `<tool_call>` block; return where scanning resumes."""
        values, position = _decode_values(text, start)
        after = _skip_space(text, position)
        next_close, next_open = text.find(CALL_CLOSE, after), text.find(CALL_OPEN, after)
        closed_here = next_close >= 0 and (next_open < 0 or next_close < next_open)
        if text.startswith(CALL_CLOSE, after):
            end = after + len(CALL_CLOSE)
        elif values and not closed_here:
            # Complete JSON but no closing tag (a stop string ate it, or text follows): accept.
            end = after
        else:  # unreadable JSON, or junk inside the block
            end = next_close + len(CALL_CLOSE) if closed_here else (next_open if next_open >= 0 else len(text))
            self.malformed.append(text[tag_start:end].strip())
            return end
        raw = text[tag_start:end].strip()
        if not values:
            self.malformed.append(raw)
        for value in values:
            self._add_value(value, raw)
        return end

    def _add_value(self, value: Any, raw: str) -> None:
        items = value if isinstance(value, list) else [value]
        if not items:
            self.malformed.append(raw)
        for item in items:
            call = _call_from_object(item)
            if call is None:
                self.malformed.append(raw if len(items) == 1 else _dump(item))
            else:
                self.calls.append(call)

    def read_bare_json(self, content: str) -> str:
        """Treat a message that is nothing but a JSON call (or list of calls) as calls.

        Returns the content that remains: empty when calls or a malformed attempt were found.
        """
        fenced = _WHOLE_FENCE.match(content)
        body = (fenced.group(1) if fenced else content).strip()
        if not body.startswith(("{", "[")):
            return content
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            if '"name"' in body and ('"arguments"' in body or '"parameters"' in body):
                self.malformed.append(content)
                return ""
            return content
        items = value if isinstance(value, list) else [value]
        if not items or not all(_looks_like_call(item) for item in items):
            return content
        self._add_value(value, content)
        return ""


def _decode_values(text: str, start: int) -> tuple[list[Any], int]:
    """JSON values from `start` (whitespace, a ```json fence and commas between allowed)."""
    values: list[Any] = []
    position = _skip_space(text, start)
    fence = _FENCE_OPEN.match(text, position)
    if fence:
        position = _skip_space(text, fence.end())
    while position < len(text) and text[position] in "{[":
        try:
            value, position = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            return [], position
        values.append(value)
        position = _skip_space(text, position)
        if text.startswith(",", position):
            position = _skip_space(text, position + 1)
    if fence and text.startswith("```", position):
        position += 3
    return values, position


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _looks_like_call(item: Any) -> bool:
    """A JSON object shaped like an attempted call (so a plain JSON answer stays content)."""
    if not isinstance(item, dict):
        return False
    if isinstance(item.get("function"), dict):
        return True
    return "arguments" in item or "parameters" in item


def _call_from_object(item: Any) -> ToolCall | None:
    """A call from one JSON object, or None when it is not a readable call."""
    if not isinstance(item, dict):
        return None
    call_id = item.get("id") if isinstance(item.get("id"), str) else ""
    if isinstance(item.get("function"), dict) and "name" not in item:
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = item["arguments"] if "arguments" in item else item.get("parameters", {})
    arguments = _arguments(arguments)
    if arguments is None:
        return None
    return ToolCall(name.strip(), arguments, call_id)


def _arguments(value: Any) -> dict[str, Any] | None:
    """Arguments as a dict: an object, a JSON string of one, or nothing (no arguments)."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _native_call(entry: Any) -> ToolCall | None:
    """One entry of an OpenAI `message.tool_calls` list."""
    if not isinstance(entry, dict) or not isinstance(entry.get("function"), dict):
        return None
    function = entry["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = _arguments(function.get("arguments"))
    if arguments is None:
        return None
    call_id = entry.get("id") if isinstance(entry.get("id"), str) else ""
    return ToolCall(name.strip(), arguments, call_id)


def _content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _with_ids(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(call if call.id else ToolCall(call.name, call.arguments, f"call_{index}")
                 for index, call in enumerate(calls))


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
