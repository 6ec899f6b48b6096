"""The shared-prefix attention (tbx/policies/shared_prefix.py) against attention written out
row by row: each row's queries over its prefix's keys and its own masked keys, one softmax.
Decode steps (one query a row) take explicit scores; prompt tokens (several) torch's fused kernel
and a merge by log-sum-exp, or explicit scores where this torch has no such kernel."""

import math
from types import SimpleNamespace

import pytest
import torch

from tbx.policies import shared_prefix
from tbx.policies.shared_prefix import Packed, SharedPrefix, attention

HEADS, KV_HEADS, DIM, OWN = 6, 2, 8, 6


def own_mask(padding: list[int], queries: int) -> torch.Tensor:
    """[rows, 1, queries, own] boolean: the queries are the last columns; causal, left padding."""
    columns = torch.arange(OWN)
    query_columns = columns[-queries:]
    rows = [(columns[None, :] <= query_columns[:, None]) & (columns[None, :] >= pad) for pad in padding]
    return torch.stack(rows)[:, None]


def written_out(query, key, value, mask, keys, values, spans):
    """Per row and head: softmax over [its prefix's columns, its visible own columns]."""
    rows, _, queries, _ = query.shape
    out = torch.zeros(rows, queries, HEADS, DIM)
    for row in range(rows):
        for head in range(HEADS):
            kv = head // (HEADS // KV_HEADS)
            for q in range(queries):
                scores = [key[row, kv] @ query[row, head, q]]
                scores[0] = scores[0].masked_fill(~mask[row, 0, q], float("-inf"))
                vals = [value[row, kv]]
                if spans[row] is not None:
                    start, end = spans[row]
                    scores.insert(0, keys[kv, start:end] @ query[row, head, q])
                    vals.insert(0, values[kv, start:end])
                scores = torch.cat(scores) / math.sqrt(DIM)
                if torch.isinf(scores).all():
                    continue  # a padding query that sees nothing: 0
                out[row, q, head] = torch.softmax(scores, 0) @ torch.cat(vals)
    return out


@pytest.mark.parametrize("layout", ["two prefixes and a row without one", "one prefix for every row"])
@pytest.mark.parametrize("queries", [1, 3, "3 without the fused kernel"])
def test_attention_equals_each_row_written_out(layout, queries, monkeypatch):
    if queries == "3 without the fused kernel":
        monkeypatch.setattr(shared_prefix, "_fused", lambda: None)
        queries = 3
    elif queries == 3:
        assert shared_prefix._fused() is not None  # this torch has it: the test takes that path
    torch.manual_seed(0)
    rows = 4
    query = torch.randn(rows, HEADS, queries, DIM)
    key, value = torch.randn(rows, KV_HEADS, OWN, DIM), torch.randn(rows, KV_HEADS, OWN, DIM)
    keys, values = torch.randn(KV_HEADS, 11, DIM), torch.randn(KV_HEADS, 11, DIM)
    # Row 3 is left-padded so that (with three queries) its first two see none of its own columns.
    mask = own_mask([0, 1, 2, OWN - 1], queries)
    if layout == "one prefix for every row":
        spans = [(0, 7)] * rows
        segments = [(0, 7, torch.arange(rows))]
    else:
        spans = [(0, 7), (7, 11), (0, 7), None]
        segments = [(0, 7, torch.tensor([2, 0])), (7, 11, torch.tensor([1]))]
    got, _ = attention(SimpleNamespace(layer_idx=0), query, key, value, mask,
                       tbx_prefix=SharedPrefix([keys], [values], segments))
    assert got.shape == (rows, queries, HEADS, DIM) and torch.isfinite(got).all()
    torch.testing.assert_close(got, written_out(query, key, value, mask, keys, values, spans), rtol=1e-5, atol=1e-5)


def one_query(query, keys, values, visible, prefix_keys=None, prefix_values=None):
    """One query [heads, d] written out: per head, softmax over [prefix columns, visible own columns]."""
    out = torch.zeros(HEADS, DIM)
    for head in range(HEADS):
        kv = head // (HEADS // KV_HEADS)
        scores, vals = [keys[kv, visible] @ query[head]], [values[kv, visible]]
        if prefix_keys is not None:
            scores.insert(0, prefix_keys[kv] @ query[head])
            vals.insert(0, prefix_values[kv])
        out[head] = torch.softmax(torch.cat(scores) / math.sqrt(DIM), 0) @ torch.cat(vals)
    return out


@pytest.mark.parametrize("fused", [True, False])
def test_packed_step_attention_equals_each_query_written_out(fused, monkeypatch):
    """A packed step: two decoding rows (one query each, in the last column) then two joining
    rows (three and two queries in their last columns, causal), all in one sequence; rows read
    two prefixes or none. The joining rows' prompts with torch's fused kernel and without."""
    if not fused:
        monkeypatch.setattr(shared_prefix, "_fused", lambda: None)
    torch.manual_seed(1)
    width, counts = 7, [3, 2]
    query = torch.randn(1, HEADS, 2 + sum(counts), DIM)
    key, value = torch.randn(4, KV_HEADS, width, DIM), torch.randn(4, KV_HEADS, width, DIM)
    keys, values = torch.randn(KV_HEADS, 11, DIM), torch.randn(KV_HEADS, 11, DIM)
    spans = [(0, 7), None, (7, 11), (0, 7)]  # per row (decoding 0-1, joining 2-3)
    own = torch.tensor([[0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]]).bool()
    columns = torch.arange(width)
    joins = []
    for row, count in zip((2, 3), counts, strict=True):
        seen = own[row][None, :] & (columns[None, :] <= (width - count + torch.arange(count))[:, None])
        start, end = spans[row]
        joins.append((count, seen[None, None], SharedPrefix([keys], [values], [(start, end, torch.tensor([0]))])))
    packed = Packed(2, own[:2, None, None, :], SharedPrefix([keys], [values], [(0, 7, torch.tensor([0]))]), joins)
    got, _ = attention(SimpleNamespace(layer_idx=0), query, key, value, None, tbx_packed=packed)
    assert got.shape == (1, 2 + sum(counts), HEADS, DIM)
    expected, position = [], 0
    for row, count in enumerate([1, 1, *counts]):
        for index in range(count):
            visible = own[row] & (columns <= width - count + index)
            span = spans[row]
            prefix = (keys[:, span[0]:span[1]], values[:, span[0]:span[1]]) if span else (None, None)
            expected.append(one_query(query[0, :, position], key[row], value[row], visible, *prefix))
            position += 1
    torch.testing.assert_close(got[0], torch.stack(expected), rtol=1e-5, atol=1e-5)
    # A joining row's mask may cover only its own (last) columns: those columns alone are read.
    cut = [(count, mask[..., width - int(own[row].sum()):], prefix)
           for row, (count, mask, prefix) in zip((2, 3), joins, strict=True)]
    assert [mask.shape[-1] for _, mask, _ in cut] == [5, 2]
    narrow, _ = attention(SimpleNamespace(layer_idx=0), query, key, value, None,
                          tbx_packed=Packed(2, packed.mask, packed.prefix, cut))
    torch.testing.assert_close(narrow, got, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("queries", [1, 3])
def test_attention_keeps_a_half_precision_models_dtype(dtype, queries):
    """model.dtype may be bfloat16: every path returns the model's dtype (the fused kernel's
    log-sum-exps are float32) and agrees with float32 to that dtype's precision."""
    torch.manual_seed(2)
    rows = 4
    query = torch.randn(rows, HEADS, queries, DIM)
    key, value = torch.randn(rows, KV_HEADS, OWN, DIM), torch.randn(rows, KV_HEADS, OWN, DIM)
    keys, values = torch.randn(KV_HEADS, 11, DIM), torch.randn(KV_HEADS, 11, DIM)
    mask = own_mask([0, 1, 2, 3], queries)
    segments = [(0, 7, torch.tensor([2, 0])), (7, 11, torch.tensor([1]))]
    expected, _ = attention(SimpleNamespace(layer_idx=0), query, key, value, mask,
                            tbx_prefix=SharedPrefix([keys], [values], segments))
    got, _ = attention(SimpleNamespace(layer_idx=0), query.to(dtype), key.to(dtype), value.to(dtype), mask,
                       tbx_prefix=SharedPrefix([keys.to(dtype)], [values.to(dtype)], segments))
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), expected, rtol=0.05, atol=0.05)
