"""Attention over cached prompt prefixes that every row of a batch reads once, not one copy per row.

Every turn starts with a long fixed part (system message, tool schemas, demonstrations: 600-1,100
SmolLM2 tokens). Copying its keys and values into every row of a batch makes a decode step read
`rows x prefix` positions: 16 rows behind a 1,100-token prefix cost 5x one row on 2 cores. Here
the prefixes of a batch (one per domain/tool set in it) sit once in a `SharedPrefix`; each row's
own cache holds only the rest of its prompt and what it generated. A row's scores come in two
parts under one softmax:

- prefix part: per prefix, the queries of the rows that continue it against its keys and values
  in one matmul per key/value head (those rows folded into the query rows);
- own part: each row's queries against its own cache, with the usual causal and padding mask.

Decode steps (one query a row) take that one softmax over explicit scores: normalising the two
parts apart and merging them by their log-sum-exp, as cascade attention does, measured 4-6% slower
with two prefixes and 8-16 rows, and no faster with torch's fused kernel for each part. Prompt
tokens (several queries a row, as many scores as tokens times the prefix) do take the fused kernel
for each part and the merge (`_merged`): 1.8-2.8x faster per layer for 50-250 tokens.

Registered with transformers' attention interface under `NAME`; the decoder switches a model to
it only while decoding and passes the prefixes as the `tbx_prefix` forward argument. Without that
argument it is transformers' SDPA attention, unchanged. `supported(model)` checks on a short
random prompt that a model's forward honours it (models whose attention does not go through the
interface, or with sliding windows, decode without a prefix cache instead).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

NAME = "tbx_shared_prefix"


@dataclass
class SharedPrefix:
    """The prefixes a batch reads: per layer keys and values [kv_heads, total, head_dim] of the
    distinct prefixes laid end to end, and for each prefix its span and the rows that read it."""

    keys: Sequence[Any]
    values: Sequence[Any]
    segments: Sequence[tuple[int, int, Any]]  # (start, end, row indices [n] as a tensor)
    _unread: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)  # see `unread`

    def unread(self, rows: int) -> Any:
        """The indices of the rows of a `rows`-row batch that read no prefix (None: every row reads
        one). Asked by every layer of a step: worked out once."""
        if rows not in self._unread:
            import torch

            read = torch.zeros(rows, dtype=torch.bool)
            for _, _, members in self.segments:
                read[members] = True
            self._unread[rows] = None if bool(read.all()) else (~read).nonzero().squeeze(1)
        return self._unread[rows]

    def select(self, rows: Any) -> SharedPrefix:
        """The same prefixes for a subset of rows, renumbered (`rows`: the kept rows' old indices, in their new order)."""
        import torch

        renumber = torch.full((int(rows.max()) + 1 if len(rows) else 1,), -1, dtype=torch.long)
        renumber[rows] = torch.arange(len(rows))
        segments = []
        for start, end, members in self.segments:
            members = members[members < len(renumber)]
            kept = renumber[members]
            kept = kept[kept >= 0]
            if len(kept):
                segments.append((start, end, kept))
        return SharedPrefix(self.keys, self.values, segments)


@dataclass
class Packed:
    """A decode step that also encodes joining rows (`tbx.policies.decoding`): the forward's one
    sequence holds each decoding row's next token, then each joining row's prompt tokens, so the
    joining rows ride on the step's weight products instead of a forward of their own.

    The cache hands attention every row's own keys/values [rows + joining, kv_heads, width, d],
    right-aligned: a decoding row's query sits in the last column, a joining row's `n` queries in
    the last `n` columns."""

    rows: int  # rows with one query (decoding rows, then joining rows with one token): the first `rows` tokens
    mask: Any  # theirs [rows, 1, 1, width], boolean
    prefix: SharedPrefix | None  # the prefixes they read
    # Per joining row: its tokens n, mask [1, 1, n, c] over the window's last c columns (c <= width:
    # its own columns; the others, padding for it, are not read), prefix.
    joins: Sequence[tuple[int, Any, SharedPrefix | None]]


def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
              dropout: float = 0.0, tbx_prefix: SharedPrefix | None = None, tbx_packed: Packed | None = None,
              **kwargs: Any) -> tuple[Any, None]:
    """query [b, heads, q, d]; key/value [b, kv_heads, s, d] (the rows' own caches, new tokens
    included); attention_mask a boolean [b, 1, q, s] (True: attend). Returns [b, q, heads, d].

    Each row's queries get one softmax over its prefix's scores and its own scores. With
    `tbx_packed`, b is 1 and q the packed sequence (the model's own mask is not used).
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if tbx_packed is not None:
        return _packed(module, query, key, value, scaling, tbx_packed)
    if tbx_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    rows, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    width = heads // kv_heads * length  # queries per key/value head and row (head h reads kv head h // group)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(dim)
    grouped = query.reshape(rows, kv_heads, width, dim)
    if length > 1 and _fused() is not None:  # prompt tokens
        return _merged(grouped, key, value, attention_mask, scale, tbx_prefix, module.layer_idx, heads)
    segments = tbx_prefix.segments
    if len(segments) == 1 and len(segments[0][2]) == rows:  # every row reads the one prefix: fewer, larger ops
        return _one_prefix(grouped, key, value, attention_mask, scale, tbx_prefix, module.layer_idx, heads)

    # Own scores of every row, masked; then per prefix, its rows' prefix scores (the batch folded
    # into the query rows) and own scores under one softmax.
    own_scores = _own_scores(grouped, key, attention_mask).mul_(scale)  # [b, kvh, width, s]
    own_weights = torch.empty_like(own_scores)  # every row's is written: below, or per prefix
    unread = tbx_prefix.unread(rows)
    if unread is not None:  # rows that read no prefix: a padding query that sees no column gets 0, not NaN
        own_weights.index_copy_(0, unread, own_scores.index_select(0, unread).softmax(-1).nan_to_num_(0.0))
    prefix_out = torch.zeros_like(grouped)  # [b, kvh, width, d]
    prefix_keys, prefix_values = tbx_prefix.keys[module.layer_idx], tbx_prefix.values[module.layer_idx]
    for start, end, members in tbx_prefix.segments:
        count, span = len(members), end - start
        folded = grouped.index_select(0, members).transpose(0, 1).reshape(kv_heads, count * width, dim)
        scores = torch.bmm(folded, prefix_keys[:, start:end].transpose(1, 2)).mul_(scale)  # [kvh, n*width, span]
        weights = torch.cat([scores.view(kv_heads, count, width, span).transpose(0, 1),
                             own_scores.index_select(0, members)], dim=-1).softmax(-1)  # [n, kvh, width, span+s]
        out = torch.bmm(weights[..., :span].transpose(0, 1).reshape(kv_heads, count * width, span),
                        prefix_values[:, start:end])  # [kvh, n*width, d]
        prefix_out.index_copy_(0, members, out.view(kv_heads, count, width, dim).transpose(0, 1))
        own_weights.index_copy_(0, members, weights[..., span:])
    output = torch.matmul(own_weights, value).add_(prefix_out)
    return output.reshape(rows, heads, length, dim).transpose(1, 2).contiguous(), None


def _packed(module: Any, query: Any, key: Any, value: Any, scaling: float | None, packed: Packed) -> tuple[Any, None]:
    """`attention` for a packed step: the decoding rows together, then each joining row alone."""
    import torch

    rows = packed.rows
    decoding = query[0, :, :rows].transpose(0, 1).unsqueeze(2)  # [rows, heads, 1, d]
    outputs = [attention(module, decoding, key[:rows], value[:rows], packed.mask, scaling,
                         tbx_prefix=packed.prefix)[0].transpose(0, 1)]  # [1, rows, heads, d]
    start = rows
    for index, (count, mask, prefix) in enumerate(packed.joins):
        row, first = rows + index, key.shape[2] - mask.shape[-1]
        outputs.append(attention(module, query[:, :, start:start + count], key[row:row + 1, :, first:],
                                 value[row:row + 1, :, first:], mask, scaling, tbx_prefix=prefix)[0])  # [1, count, heads, d]
        start += count
    return torch.cat(outputs, dim=1), None


@functools.cache
def _fused() -> Any:
    """torch's fused CPU attention that also returns each query's log-sum-exp of scores (the
    kernel behind `scaled_dot_product_attention` on CPU; None where this torch lacks it)."""
    import torch

    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _merged(grouped: Any, key: Any, value: Any, attention_mask: Any, scale: float, prefix: SharedPrefix,
            layer: int, heads: int) -> tuple[Any, None]:
    """`attention` for several queries a row (prompt tokens, which attend to a row's prefix and
    own columns alike): each part by the fused kernel, which also returns each query's
    log-sum-exp, and the parts merged by it (cascade attention). For prompts the scores are as
    many as the tokens times the prefix: one softmax over explicit scores (as for decode steps)
    measured 1.8-2.8x slower per layer for 50-250 tokens behind an 800-token prefix, 2 cores.

    A query that sees none of its own columns (left padding) gets a zero own part from the
    kernel, and here no weight in the merge (as in one softmax)."""
    import torch

    rows, kv_heads, width, dim = grouped.shape
    fused = _fused()
    def per_grouped_query(per_query: Any) -> Any:  # [b, 1, q, ...] -> [b, 1, g * q, ...]: row g * q + l is query l's
        group, rest = width // per_query.shape[2], per_query.shape[3:]
        return per_query.unsqueeze(2).expand(rows, 1, group, *per_query.shape[2:]).reshape(rows, 1, width, *rest)

    bias = None
    if attention_mask is not None:  # [b, 1, q, s] -> additive
        bias = per_grouped_query(torch.zeros(attention_mask.shape, dtype=grouped.dtype).masked_fill_(
            ~attention_mask, float("-inf")))
    output, lse = fused(grouped, key, value, attn_mask=bias, scale=scale)  # [b, kvh, width, d], [b, kvh, width]
    if attention_mask is not None:
        seen = attention_mask.any(-1)  # [b, 1, q]
        if not bool(seen.all()):
            lse = lse.masked_fill(~per_grouped_query(seen), float("-inf"))
    keys, values = prefix.keys[layer], prefix.values[layer]
    for start, end, members in prefix.segments:
        count = len(members)
        folded = grouped.index_select(0, members).transpose(0, 1).reshape(1, kv_heads, count * width, dim)
        prefix_out, prefix_lse = fused(folded, keys[None, :, start:end], values[None, :, start:end], scale=scale)
        prefix_out = prefix_out.reshape(kv_heads, count, width, dim).transpose(0, 1)
        prefix_lse = prefix_lse.reshape(kv_heads, count, width).transpose(0, 1)
        own_lse = lse.index_select(0, members)
        top = torch.maximum(prefix_lse, own_lse)
        prefix_weight, own_weight = (prefix_lse - top).exp_(), (own_lse - top).exp_()
        total = prefix_weight + own_weight  # log-sum-exps are float32 whatever the model's dtype
        merged = prefix_out.mul(prefix_weight.div_(total).unsqueeze(-1).to(grouped.dtype)).add_(
            output.index_select(0, members).mul_(own_weight.div_(total).unsqueeze(-1).to(grouped.dtype)))
        output.index_copy_(0, members, merged)
    return output.reshape(rows, heads, width * kv_heads // heads, dim).transpose(1, 2).contiguous(), None


def _own_scores(grouped: Any, key: Any, attention_mask: Any) -> Any:
    """Each row's grouped queries [b, kvh, width, d] against its own keys: [b, kvh, width, s],
    -inf where the mask [b, 1, q, s] says not to attend (unscaled)."""
    import torch

    scores = torch.matmul(grouped, key.transpose(-1, -2))
    if attention_mask is not None:
        scores.view(*grouped.shape[:2], -1, attention_mask.shape[2], scores.shape[-1]).masked_fill_(
            ~attention_mask[:, :, None], float("-inf"))
    return scores


def _one_prefix(grouped: Any, key: Any, value: Any, attention_mask: Any, scale: float, prefix: SharedPrefix,
                layer: int, heads: int) -> tuple[Any, None]:
    """`attention` when all rows read the same prefix: one softmax over prefix and own scores."""
    import torch

    rows, kv_heads, width, dim = grouped.shape
    start, end, _ = prefix.segments[0]
    prefix_keys, prefix_values = prefix.keys[layer][:, start:end], prefix.values[layer][:, start:end]
    length = end - start
    folded = grouped.transpose(0, 1).reshape(kv_heads, rows * width, dim)
    prefix_scores = torch.bmm(folded, prefix_keys.transpose(1, 2)).view(kv_heads, rows, width, length)
    own_scores = _own_scores(grouped, key, attention_mask)  # [b, kvh, width, s]
    weights = torch.cat([prefix_scores.transpose(0, 1), own_scores], dim=-1).mul_(scale).softmax(-1)
    from_prefix = torch.bmm(weights[..., :length].transpose(0, 1).reshape(kv_heads, rows * width, length),
                            prefix_values).view(kv_heads, rows, width, dim).transpose(0, 1)
    output = torch.matmul(weights[..., length:], value).add_(from_prefix)
    query_length = width // (heads // kv_heads)
    return output.reshape(rows, heads, query_length, dim).transpose(1, 2).contiguous(), None


def _mask(*args: Any, **kwargs: Any) -> Any:
    """transformers' boolean SDPA mask, always materialised (never None for "plain causal")."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


@functools.cache
def register() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, _mask)
    return NAME


@contextlib.contextmanager
def switched(model: Any) -> Iterator[None]:
    """Run `model` with this attention inside the block (its own setting is restored after)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = register()
    try:
        yield
    finally:
        config._attn_implementation = before


def prefix_tensors(cache: Any) -> tuple[list[Any], list[Any]]:
    """Per layer keys and values [kv_heads, length, head_dim] of a one-row cache."""
    layers = cache.layers
    return [layer.keys[0].contiguous() for layer in layers], [layer.values[0].contiguous() for layer in layers]


def uses_sliding_windows(config: Any) -> bool:
    layer_types = getattr(config, "layer_types", None) or ()
    return any("sliding" in str(kind) for kind in layer_types) or bool(
        getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
        and not layer_types)


def supported(model: Any) -> bool:
    """Whether `model` gives the same next-token logits with a shared prefix as on whole prompts
    (two rows of different lengths behind two different prefixes, then one decode step)."""
    import torch

    if uses_sliding_windows(getattr(model, "config", None)):
        return False
    vocab = min(int(getattr(model.config, "vocab_size", 1000)), 1000)
    generator = torch.Generator().manual_seed(0)
    prefixes = [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in (7, 5)]
    rests = [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in (4, 2)]
    try:
        with torch.inference_mode():
            expected = []
            for prefix, rest in zip(prefixes, rests, strict=True):
                ids = torch.tensor([prefix + rest])
                expected.append(model(input_ids=ids, use_cache=False).logits[0, -1])
            caches = [model(input_ids=torch.tensor([p]), use_cache=True) for p in prefixes]
            caches = [getattr(c, "cache", None) or c.past_key_values for c in caches]
            parts = [prefix_tensors(c) for c in caches]
            keys = [torch.cat([p[0][i] for p in parts], dim=1) for i in range(len(parts[0][0]))]
            values = [torch.cat([p[1][i] for p in parts], dim=1) for i in range(len(parts[0][1]))]
            segments = [(0, 7, torch.tensor([0])), (7, 12, torch.tensor([1]))]
            ids = torch.tensor([rests[0], [0, 0] + rests[1]])
            mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
            positions = torch.tensor([[7, 8, 9, 10], [5, 5, 5, 6]])
            with switched(model):
                got = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                            tbx_prefix=SharedPrefix(keys, values, segments)).logits[:, -1]
    except Exception:  # noqa: BLE001 - any failure means: not supported, decode without the prefix cache
        return False
    return all(torch.allclose(got[row].float(), expected[row].float(), atol=1e-3, rtol=1e-3) for row in range(2))
