"""Prompt building (tbx/policies/prompting.py): demonstrations, chat layout, compact tools, templates,
fitting a conversation into the context window. No model: a one-token-a-character tokenizer."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tbx.errors import ConfigError
from tbx.llm.parsing import parse_assistant_text
from tbx.messages import Message, ToolCall, ToolSchema
from tbx.policies.prompting import (
    build_chat,
    check_tool_format,
    demonstrations_for,
    example_arguments,
    fit_prompt,
    render_chatml,
    render_prompt,
    render_tool_compact,
)
from tests.helpers.prompts import POLICY, TOOLS


def conversation(request: str) -> list[Message]:
    return [Message("system", POLICY), Message("user", request)]


# --- prompt building (no model) -----------------------------------------------------------------

def test_demonstrations_come_from_the_tools_schemas():
    assert example_arguments(TOOLS[1].parameters) == {"from_account": 1, "to_account": 2, "amount": 10.0}
    assert example_arguments(TOOLS[2].parameters) == {"account_id": 1, "nickname": "example"}  # none required
    assert example_arguments({"properties": {"k": {"type": "string", "enum": ["b", "a"]}}}) == {"k": "b"}
    demos = demonstrations_for(TOOLS)
    assert [d.call.name for d in demos] == ["get_account", "transfer"]
    assert demos[0].request == "Look up an account by its id: account_id 1."


def test_chat_layout_system_demos_conversation_and_merged_tool_results():
    call = ToolCall("get_account", {"account_id": 3}, "call_0")
    messages = [Message("system", POLICY), Message("user", "Balance of 3?"),
                Message("assistant", "Checking.", tool_calls=(call,)),
                Message("tool", '{"balance": 5}', tool_call_id="call_0", name="get_account"),
                Message("tool", "account 9 not found", tool_call_id="call_1", is_error=True),
                Message("user", "Thanks")]
    chat = build_chat(messages, TOOLS, demonstrations_for(TOOLS))
    assert [turn["role"] for turn in chat] == ["system", "user", "assistant", "user", "assistant",
                                               "user", "assistant", "user", "user"]
    system = chat[0]["content"]
    assert system.startswith(POLICY) and "<tools>" in system
    assert [json.loads(line)["function"]["name"] for line in system.split("<tools>\n")[1].split("\n</tools>")[0]
            .splitlines()] == ["get_account", "transfer", "set_nickname"]
    assert chat[2]["content"] == '<tool_call>\n{"name": "get_account", "arguments": {"account_id": 1}}\n</tool_call>'
    assert chat[6]["content"] == ('Checking.\n<tool_call>\n{"name": "get_account", "arguments": '
                                  '{"account_id": 3}}\n</tool_call>')
    assert chat[7]["content"] == ('<tool_response>\n{"balance": 5}\n</tool_response>\n'
                                  '<tool_response>\nError: account 9 not found\n</tool_response>')
    # What the prompt shows of an assistant turn parses back to that turn.
    assert parse_assistant_text(chat[6]["content"]).tool_calls == (call,)
    assert build_chat(messages, TOOLS) == build_chat(messages, TOOLS)  # deterministic
    in_system = build_chat(messages, TOOLS, demonstrations_for(TOOLS), placement="system")
    assert len(in_system) == 5 and "Example 1:\nUser: Look up an account" in in_system[0]["content"]


def test_compact_tools_are_signature_lines_with_the_docstring_summary():
    schema = ToolSchema("verify", "Check a caller.\n\nGive the id.\n\nArgs:\n    employee_id: The id.\n",
                        {"properties": {"employee_id": {"type": "integer", "title": "Employee Id"},
                                        "kind": {"type": "string", "enum": ["a", "b"]},
                                        "note": {"type": "string", "default": ""},
                                        "ids": {"type": "array", "items": {"type": "integer"}},
                                        "when": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
                         "required": ["employee_id", "kind", "ids"]})
    assert render_tool_compact(schema) == ('verify(employee_id: integer, kind: "a"|"b", note: string = "", '
                                           'ids: list[integer], when: string | null = null) - Check a caller. '
                                           'Give the id.')
    system = build_chat([Message("system", POLICY), Message("user", "hi")], TOOLS, tool_format="compact")[0]
    lines = system["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert lines[1] == "transfer(from_account: integer, to_account: integer, amount: number, memo?: string) - Move " \
                       "money between two accounts. Frozen accounts cannot send money."
    assert len(system["content"]) < len(build_chat([Message("system", POLICY)], TOOLS)[0]["content"])
    with pytest.raises(ConfigError, match="model.tool_format"):
        check_tool_format("yaml")


def test_chatml_fallback_without_a_chat_template():
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    expected = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert render_chatml(chat) == expected
    assert render_prompt(SimpleNamespace(chat_template=None), chat) == expected
    assert render_prompt(SimpleNamespace(chat_template=None), chat, generation_prompt=False) == expected.removesuffix(
        "<|im_start|>assistant\n")


def template_tokenizer():
    """A real transformers tokenizer (one token a character) whose chat template reads Qwen3's
    `enable_thinking`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(code): code for code in range(32, 127)} | {"\n": 10, "[UNK]": 0}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tokenizer.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and "
                               "not enable_thinking %}<think></think>{% endif %}{% endif %}")
    return tokenizer


def test_chat_template_kwargs_reach_the_template():
    """`model.chat_template_kwargs` are passed to the chat template by the prompt renderer, the
    vLLM policy's prompt ids (`fit_prompt`) and the verl agent loop's renderer."""
    tokenizer = template_tokenizer()
    chat = [{"role": "user", "content": "hi"}]
    assert render_prompt(tokenizer, chat) == "<user>hi\n<assistant>"
    assert render_prompt(tokenizer, chat, {"enable_thinking": False}) == "<user>hi\n<assistant><think></think>"
    assert render_prompt(tokenizer, chat, {"enable_thinking": False}, generation_prompt=False) == "<user>hi\n"
    messages = [Message("system", "Be brief."), Message("user", "hi")]
    ids = fit_prompt(tokenizer, messages, [], (), 1000, template_kwargs={"enable_thinking": False})
    assert tokenizer.decode(ids).replace(" ", "").endswith("<assistant><think></think>")
    from tbx.verl_bridge.token_agent import PromptRenderer  # the verl agent loop's prompts, both styles

    for style in ("tbx", "native"):
        text = PromptRenderer(tokenizer, style, False, template_kwargs={"enable_thinking": False}).text(messages, [])
        assert text.endswith("<assistant><think></think>"), style


def test_long_conversations_are_fitted_into_the_budget():
    """The oldest turns after the opening request go first (a call with its results), then the ids are
    cut from the left; the system message and the opening survive while turns can go."""
    tokenizer = template_tokenizer()
    messages = conversation("Start")
    for turn in range(12):
        messages += [Message("assistant", "", (ToolCall("get_account", {"account_id": turn}),)),
                     Message("tool", json.dumps({"id": turn, "notes": "x " * 20})), Message("user", f"next {turn}")]
    whole = fit_prompt(tokenizer, messages, TOOLS, (), 100_000)
    ids = fit_prompt(tokenizer, messages, TOOLS, (), len(whole) - 300)
    text = tokenizer.decode(ids).replace(" ", "")
    assert len(ids) <= len(whole) - 300 and "<system>#Mockbankpolicy" in text
    assert "Start" in text and "next11" in text and "next0" not in text
    assert len(fit_prompt(tokenizer, messages[:2], TOOLS, (), 50)) == 50  # nothing left to drop: cut from the left
