"""Turn a conversation and its tool schemas into the text a local chat model continues.

Every model gets the same structure, whatever its chat template supports, so one prompt
format (and one parser, `tbx.llm.parsing`) serves evaluation and training:

1. **System message** = the episode's system text (the domain policy, `messages[0]` when it is a
   system message) + a short instruction on the hermes call format + the tool schemas as JSON
   lines inside `<tools></tools>`.
2. **Few-shot demonstrations** (`demonstrations_for`: built from the episode's own tool schemas)
   as real chat turns right after the system message (`placement="turns"`, the default), or as a
   plain `User:` / `Assistant:` transcript inside the system message (`placement="system"`).
3. The conversation: user turns as they are; assistant turns as their content followed by each
   call rendered by `render_tool_call`; tool results (role `tool`) as a *user* turn of
   `<tool_response>...</tool_response>` blocks, consecutive results merged into one turn
   (SmolLM2's template is ChatML without a tool role; this is what Qwen's template does too).
4. The chat template of the tokenizer renders these `{"role", "content"}` dicts with the
   generation prompt; without a template, plain ChatML is written.

Token ids are `tokenizer(text, add_special_tokens=False)`, so the ids the template's text maps to
are exactly the ids trained on later. Everything here is a pure, deterministic function of its
inputs: the same conversation gives the same text and ids on every machine.

Departure from the reference: it used each model's native tool template (vLLM). We render tools
ourselves because the embedded model's template has no tool support and small models only call
tools after seeing demonstrations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tbx.errors import ConfigError
from tbx.llm.parsing import render_assistant_text
from tbx.messages import Message, ToolCall, ToolSchema

Placement = Literal["system", "turns"]
ToolFormat = Literal["json", "compact"]
ChatMessage = dict[str, str]  # {"role": ..., "content": ...}

INSTRUCTION = (
    "You help the user by calling tools. To call a tool, write <tool_call>, then one JSON object "
    'with the keys "name" and "arguments", then </tool_call>. Tool results come back inside '
    "<tool_response></tool_response>. When you need nothing more from a tool, answer the user in plain text."
)
DEMONSTRATED_TOOLS = 2  # tools shown in worked examples (first ones in the list)
_EXAMPLE_VALUES = {"number": 10.0, "boolean": True, "array": [], "object": {}}


@dataclass(frozen=True)
class Demonstration:
    """One worked example: a request and the call it needs; optionally the tool's answer and the reply."""

    request: str
    call: ToolCall
    result: str = ""  # empty: the example ends at the call
    reply: str = ""


def example_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments for a JSON schema: its required properties (all if none are marked).

    Integers count up from 1 in property order, strings take their first enum value or "example".
    """
    properties = parameters.get("properties") or {}
    names = parameters.get("required") or list(properties)
    arguments: dict[str, Any] = {}
    for index, name in enumerate(names):
        schema = properties.get(name) or {}
        kind = schema.get("type")
        if schema.get("enum"):
            arguments[name] = schema["enum"][0]
        elif kind == "integer":
            arguments[name] = index + 1
        else:
            arguments[name] = _EXAMPLE_VALUES.get(kind, "example")
    return arguments


def demonstrations_for(tools: Sequence[ToolSchema], count: int = DEMONSTRATED_TOOLS) -> tuple[Demonstration, ...]:
    """Worked examples built from the episode's own tool schemas (never from the task).

    Examples of the *available* tools as chat turns, stopping at the call: a small model copies the
    format and the tool names it is shown, and examples that go on to a tool response make it write
    tool responses itself (figures: docs/benchmarks.md, "Measurements behind design choices").
    """
    demos = []
    for tool in tools[:count]:
        arguments = example_arguments(tool.parameters)
        first_sentence = tool.description.strip().split(". ")[0].rstrip(".") or f"Use {tool.name}"
        detail = ", ".join(f"{name} {json.dumps(value, ensure_ascii=False)}" for name, value in arguments.items())
        demos.append(Demonstration(f"{first_sentence}: {detail}." if detail else f"{first_sentence}.",
                                   ToolCall(tool.name, arguments)))
    return tuple(demos)


def render_tool_response(content: str, is_error: bool = False) -> str:
    """One tool result as the model sees it; an error result says so in its first word."""
    body = content if not is_error or content.lower().startswith("error") else f"Error: {content}"
    return f"<tool_response>\n{body}\n</tool_response>"


def _type_text(schema: dict[str, Any]) -> str:
    """A JSON-schema type as a short signature annotation: `integer`, `"a"|"b"`, `list[string]`."""
    if schema.get("enum"):
        return "|".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(_type_text(option) for option in schema["anyOf"])
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return f"list[{_type_text(schema['items'])}]"
    return str(schema.get("type", "any"))


def _summary(description: str) -> str:
    """A docstring without its `Args:` section (the signature names the arguments), on one line."""
    head = re.split(r"\n\s*(?:Args|Arguments|Parameters):\s*\n", description, maxsplit=1)[0]
    return " ".join(head.split())


def render_tool_compact(tool: ToolSchema) -> str:
    """One tool as a signature line and its summary: `name(arg: type, opt: type = default) - what it does`
    (`opt?: type`: optional without a default).

    About a fifth of the tokens of the JSON schema (travel's 14 tools: 2,573 -> ~550 SmolLM2 tokens),
    which is what lets a 135M model on CPU see a benchmark domain's policy and tools at all.
    """
    properties = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or ())
    arguments = []
    for name, schema in properties.items():
        optional = name not in required
        text = f"{name}{'?' if optional and 'default' not in schema else ''}: {_type_text(schema)}"
        if optional and "default" in schema:
            text += f" = {json.dumps(schema['default'], ensure_ascii=False)}"
        arguments.append(text)
    summary = _summary(tool.description)
    return f"{tool.name}({', '.join(arguments)})" + (f" - {summary}" if summary else "")


TOOL_FORMATS: tuple[ToolFormat, ...] = ("json", "compact")


def check_tool_format(value: str) -> ToolFormat:
    """`model.tool_format`, checked: a typo fails before any model loads."""
    if value not in TOOL_FORMATS:
        raise ConfigError("conf/model", "model.tool_format", f"is '{value}'", f"use one of {list(TOOL_FORMATS)}")
    return value  # type: ignore[return-value]


def render_tools(tools: Sequence[ToolSchema], style: ToolFormat = "json") -> str:
    """Tool schemas inside `<tools></tools>`: one JSON object per line (hermes style), or one
    signature line per tool (`compact`, for small models with short context)."""
    if style == "compact":
        lines = [render_tool_compact(tool) for tool in tools]
    else:
        lines = [json.dumps(tool.to_openai(), ensure_ascii=False, sort_keys=True) for tool in tools]
    return "<tools>\n" + "\n".join(lines) + "\n</tools>"


def demonstration_turns(demonstrations: Sequence[Demonstration]) -> list[ChatMessage]:
    """The demonstrations as chat turns (user, assistant call, tool response, assistant reply)."""
    turns: list[ChatMessage] = []
    for demo in demonstrations:
        turns += [
            {"role": "user", "content": demo.request},
            {"role": "assistant", "content": render_assistant_text("", [demo.call])},
        ]
        if demo.result:
            turns.append({"role": "user", "content": render_tool_response(demo.result)})
        if demo.reply:
            turns.append({"role": "assistant", "content": demo.reply})
    return turns


def render_demonstrations(demonstrations: Sequence[Demonstration]) -> str:
    """The demonstrations as a plain transcript for the system message."""
    label = {"user": "User", "assistant": "Assistant"}
    blocks = []
    for number, demo in enumerate(demonstrations, start=1):
        lines = [f"Example {number}:"]
        lines += [f"{label[turn['role']]}: {turn['content']}" for turn in demonstration_turns([demo])]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def system_text(policy: str, tools: Sequence[ToolSchema], demonstrations: Sequence[Demonstration] = (),
                placement: Placement = "turns", tool_format: ToolFormat = "json") -> str:
    """The system message: policy, call instruction, tool schemas, and demonstrations."""
    parts = [policy.strip()] if policy.strip() else []
    parts.append(INSTRUCTION)
    parts.append("Available tools:\n" + render_tools(tools, tool_format) if tools else "No tools are available.")
    if demonstrations and placement == "system":
        parts.append("Examples:\n\n" + render_demonstrations(demonstrations))
    return "\n\n".join(parts)


def conversation_turns(messages: Sequence[Message]) -> list[ChatMessage]:
    """Non-system messages as role/content dicts, tool results merged into user turns."""
    turns: list[ChatMessage] = []
    pending_results: list[str] = []
    for message in messages:
        if message.role == "tool":
            pending_results.append(render_tool_response(message.content, message.is_error))
            continue
        if pending_results:
            turns.append({"role": "user", "content": "\n".join(pending_results)})
            pending_results = []
        if message.role == "assistant":
            turns.append({"role": "assistant", "content": render_assistant_text(message.content,
                                                                                message.tool_calls)})
        elif message.role == "user":
            turns.append({"role": "user", "content": message.content})
        else:  # a system message past the first: keep it as a system turn
            turns.append({"role": "system", "content": message.content})
    if pending_results:
        turns.append({"role": "user", "content": "\n".join(pending_results)})
    return turns


def build_chat(messages: Sequence[Message], tools: Sequence[ToolSchema],
               demonstrations: Sequence[Demonstration] = (), placement: Placement = "turns",
               tool_format: ToolFormat = "json") -> list[ChatMessage]:
    """The whole prompt as role/content dicts, ready for a chat template."""
    policy = messages[0].content if messages and messages[0].role == "system" else ""
    rest = messages[1:] if messages and messages[0].role == "system" else messages
    chat = [{"role": "system", "content": system_text(policy, tools, demonstrations, placement, tool_format)}]
    if placement == "turns":
        chat += demonstration_turns(demonstrations)
    return chat + conversation_turns(rest)


def render_chatml(chat: Sequence[ChatMessage], generation_prompt: bool = True) -> str:
    """Plain ChatML, with the assistant generation prompt unless told not (for tokenizers without a template)."""
    text = "".join(f"<|im_start|>{turn['role']}\n{turn['content']}<|im_end|>\n" for turn in chat)
    return text + "<|im_start|>assistant\n" if generation_prompt else text


def render_prompt(tokenizer: Any, chat: Sequence[ChatMessage], template_kwargs: Mapping[str, Any] | None = None,
                  generation_prompt: bool = True) -> str:
    """The prompt text: the tokenizer's chat template (given `template_kwargs`, e.g. Qwen3's
    `enable_thinking`) with the generation prompt, else ChatML (which takes no arguments)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(chat), tokenize=False, add_generation_prompt=generation_prompt,
                                             **dict(template_kwargs or {}))
    return render_chatml(chat, generation_prompt)


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt (the template already wrote every special token)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def fit_prompt(tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSchema],
               demonstrations: Sequence[Demonstration], budget: int, *, tool_format: ToolFormat = "json",
               template_kwargs: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The prompt's token ids, at most `budget` of them.

    When the prompt is longer, the oldest turns after the opening user message are dropped (an
    assistant turn with its tool results); if that is not enough, the ids are cut from the left.
    """
    budget = max(1, budget)
    kept = list(messages)
    while True:
        chat = build_chat(kept, tools, demonstrations, tool_format=tool_format)
        ids = encode_prompt(tokenizer, render_prompt(tokenizer, chat, template_kwargs))
        first_user = next((i for i, m in enumerate(kept) if m.role == "user"), len(kept))
        if len(ids) <= budget or len(kept) - first_user <= 2:
            return tuple(ids[-budget:])
        del kept[first_user + 1]
        while first_user + 1 < len(kept) - 1 and kept[first_user + 1].role == "tool":
            del kept[first_user + 1]
