"""The shared parser: every call format, malformed attempts, reasoning, and round trips."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tbx.llm.parsing import (
    ParsedTurn,
    parse_assistant_text,
    parse_openai_message,
    render_assistant_text,
    render_tool_call,
)
from tbx.messages import ToolCall

GET = {"name": "get_account", "arguments": {"account_id": 3}}


def calls(turn: ParsedTurn) -> list[tuple[str, dict, str]]:
    return [(call.name, call.arguments, call.id) for call in turn.tool_calls]


def test_hermes_tag_with_text_around_it():
    turn = parse_assistant_text(f'Let me look.\n<tool_call>\n{json.dumps(GET)}\n</tool_call>\nOne moment.')
    assert calls(turn) == [("get_account", {"account_id": 3}, "call_0")]
    assert turn.content == "Let me look.\n\nOne moment."
    assert turn.malformed == () and turn.reasoning == ""


def test_several_tags_get_ids_in_order():
    text = "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': {'i': i}})}</tool_call>"
                   for i, n in enumerate(["a", "b", "c"]))
    assert calls(parse_assistant_text(text)) == [("a", {"i": 0}, "call_0"), ("b", {"i": 1}, "call_1"),
                                                 ("c", {"i": 2}, "call_2")]


def test_one_tag_holding_a_list_or_several_objects():
    listed = parse_assistant_text('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b"}]</tool_call>')
    stacked = parse_assistant_text('<tool_call>{"name": "a", "arguments": {}}\n{"name": "b"}</tool_call>')
    assert calls(listed) == calls(stacked) == [("a", {}, "call_0"), ("b", {}, "call_1")]


def test_bare_json_fenced_json_and_openai_shape():
    bare = parse_assistant_text(json.dumps(GET))
    fenced = parse_assistant_text(f"```json\n{json.dumps(GET)}\n```")
    nested = parse_assistant_text(json.dumps({"type": "function", "function": GET}))
    in_tag = parse_assistant_text(f"<tool_call>```json\n{json.dumps(GET)}\n```</tool_call>")
    for turn in (bare, fenced, nested, in_tag):
        assert calls(turn) == [("get_account", {"account_id": 3}, "call_0")]
        assert turn.content == ""


def test_parameters_alias_string_arguments_given_id_and_no_arguments():
    turn = parse_assistant_text(
        '<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": [1, 2]}", "id": "abc"}</tool_call>'
        '<tool_call>{"name": "c"}</tool_call>'
        '<tool_call>{"name": "d", "arguments": ""}</tool_call>')
    # ids: given ones are kept, the others are numbered by position in the turn.
    assert calls(turn) == [("a", {"x": 1}, "call_0"), ("b", {"y": [1, 2]}, "abc"), ("c", {}, "call_2"),
                           ("d", {}, "call_3")]


def test_plain_json_answer_and_plain_text_stay_content():
    assert parse_assistant_text('{"total": 4}') == ParsedTurn('{"total": 4}', (), (), "")
    assert parse_assistant_text("  Your balance is $12.  ") == ParsedTurn("Your balance is $12.", (), (), "")
    assert parse_assistant_text("") == ParsedTurn("", (), (), "")


def test_malformed_attempts_are_kept_raw_and_never_raise():
    cases = {
        '<tool_call>{"name": "a", "arguments": {"x": 1</tool_call>': 1,  # truncated JSON, closed tag
        '<tool_call>{"name": "a", "arguments": {"x": 1': 1,  # cut off by the token limit
        '<tool_call>{"arguments": {"x": 1}}</tool_call>': 1,  # no name
        '<tool_call>{"name": "", "arguments": {}}</tool_call>': 1,  # empty name
        '<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>': 1,  # arguments not an object
        '<tool_call>{"name": "a", "arguments": "not json"}</tool_call>': 1,  # bad argument string
        '<tool_call>get_account(3)</tool_call>': 1,  # not JSON at all
        '<tool_call></tool_call>': 1,
        '<tool_call>[]</tool_call>': 1,
        '{"name": "a", "arguments": {"x": ': 1,  # bare, truncated
        '{"arguments": {"x": 1}}': 1,  # bare, no name
    }
    for text, count in cases.items():
        turn = parse_assistant_text(text)
        assert turn.tool_calls == () and len(turn.malformed) == count, text
        assert turn.malformed[0].strip() == text.strip()


def test_a_bad_block_does_not_swallow_the_next_good_one():
    turn = parse_assistant_text('<tool_call>{"name": "a", "arguments": {</tool_call>'
                                '<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert calls(turn) == [("b", {}, "call_0")]
    assert turn.malformed == ('<tool_call>{"name": "a", "arguments": {</tool_call>',)
    unclosed = parse_assistant_text('<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b"}')
    assert [c.name for c in unclosed.tool_calls] == ["a", "b"] and unclosed.malformed == ()


def test_list_with_one_bad_entry_keeps_the_good_one():
    turn = parse_assistant_text('<tool_call>[{"name": "a"}, {"nom": "b"}]</tool_call>')
    assert calls(turn) == [("a", {}, "call_0")] and turn.malformed == ('{"nom": "b"}',)


def test_reasoning_is_stripped_and_calls_inside_it_are_not_run():
    turn = parse_assistant_text('<think>maybe <tool_call>{"name": "x"}</tool_call></think>'
                                f'Checking.<tool_call>{json.dumps(GET)}</tool_call>')
    assert turn.reasoning == 'maybe <tool_call>{"name": "x"}</tool_call>'
    assert calls(turn) == [("get_account", {"account_id": 3}, "call_0")] and turn.content == "Checking."


def test_unclosed_and_template_opened_reasoning():
    assert parse_assistant_text("<think>still thinking") == ParsedTurn("", (), (), "still thinking")
    # A template that opens <think> in the prompt leaves only the closing tag in the output.
    opened = parse_assistant_text(f"plan it</think>\n<tool_call>{json.dumps(GET)}</tool_call>")
    assert opened.reasoning == "plan it" and len(opened.tool_calls) == 1 and opened.content == ""
    several = parse_assistant_text("<think>a</think>x<think>b</think>y")
    assert several == ParsedTurn("xy", (), (), "a\n\nb")


def test_tags_inside_argument_strings_do_not_cut_the_call():
    arguments = {"memo": "</tool_call> and <think> and <tool_call>"}
    text = render_tool_call(ToolCall("transfer", arguments))
    assert calls(parse_assistant_text(text)) == [("transfer", arguments, "call_0")]


def test_unicode_names_arguments_and_content():
    text = 'Voilà ✓ <tool_call>{"name": "réserver", "arguments": {"ville": "Zürich", "note": "日本語 🚀"}}</tool_call>'
    turn = parse_assistant_text(text)
    assert calls(turn) == [("réserver", {"ville": "Zürich", "note": "日本語 🚀"}, "call_0")]
    assert turn.content == "Voilà ✓"


def test_openai_message_native_calls_then_content_calls():
    message = {
        "role": "assistant",
        "content": f"<think>hmm</think>Sure.<tool_call>{json.dumps(GET)}</tool_call>",
        "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "a", "arguments": '{"q": 1}'}},
            {"type": "function", "function": {"name": "b", "arguments": "{bad json"}},
            {"type": "function", "function": {"name": "c", "arguments": {"already": "dict"}}},
        ],
    }
    turn = parse_openai_message(message)
    # native a (own id), native c (index 1), then the content call (index 2)
    assert calls(turn) == [("a", {"q": 1}, "call_x"), ("c", {"already": "dict"}, "call_1"),
                           ("get_account", {"account_id": 3}, "call_2")]
    assert len(turn.malformed) == 1 and "bad json" in turn.malformed[0]
    assert turn.content == "Sure." and turn.reasoning == "hmm"


def test_openai_message_without_calls_and_with_reasoning_field():
    turn = parse_openai_message({"content": None, "reasoning_content": "think first"})
    assert turn == ParsedTurn("", (), (), "think first")
    parts = parse_openai_message({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert parts.content == "ab"
    assert parse_openai_message({"tool_calls": [{"function": {"arguments": "{}"}}]}).malformed != ()


def test_render_assistant_text_reads_back():
    content = "I will check both."
    sent = [ToolCall("a", {"x": 1}, "call_0"), ToolCall("b", {}, "call_1")]
    turn = parse_assistant_text(render_assistant_text(content, sent))
    assert turn.tool_calls == tuple(sent) and turn.content == content


# --- properties -------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=20) \
    | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10)
# Tool names as MCP and OpenAI allow them (letters, digits, "_", "-", "."): hypothesis found that a
# "name" such as "</think>" cannot be told from the reasoning markup the parser strips.
tool_calls = st.builds(ToolCall, name=st.from_regex(r"[A-Za-z0-9_.\-]{1,20}", fullmatch=True),
                       arguments=st.dictionaries(st.text(max_size=10), json_values, max_size=4))
fragments = st.sampled_from(["<tool_call>", "</tool_call>", "<think>", "</think>", "{", "}", "[", "]", '"',
                             '"name"', '"arguments"', ":", ",", "```json\n", "```", "\n", " ", "x", "1"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.lists(fragments, max_size=40).map("".join))
def test_parsing_arbitrary_text_never_raises(text):
    turn = parse_assistant_text(text)
    assert isinstance(turn, ParsedTurn)
    assert all(isinstance(call.arguments, dict) and call.name for call in turn.tool_calls)
    parse_openai_message({"content": text, "tool_calls": [{"function": {"name": "f", "arguments": text}}]})


@settings(max_examples=200, deadline=None)
@given(st.lists(tool_calls, min_size=1, max_size=4), st.sampled_from(["", "Checking now.", "Ünïcode ✓"]))
def test_rendered_calls_parse_back_to_the_same_calls(sent, content):
    turn = parse_assistant_text(render_assistant_text(content, sent))
    expected = [(call.name, call.arguments, f"call_{index}") for index, call in enumerate(sent)]
    assert calls(turn) == expected
    assert turn.malformed == () and turn.content == content
