"""Batched, seeded decoding with a transformers causal LM, reusing the shared prompt prefix.

Our own small loop rather than `model.generate`, so that:
- each request samples from its own seeded `torch.Generator`: a turn's tokens do not depend on
  which other turns share its batch (up to float differences between batch shapes);
- greedy decoding (temperature 0) of a batch equals decoding each prompt alone: rows are
  padded, masked, and get position ids that count only their real tokens;
- the prompt prefix every request shares (system message, tool schemas, demonstrations: ~550
  tokens for the mock domain) is encoded once and its key/value cache reused — prefill of that
  prefix is most of the cost of a turn on CPU;
- finished rows leave the batch (their cache rows are dropped); a row stops at an end-of-turn
  token or right after its first `</tool_call>` (one call per turn: small models otherwise go on
  to invent the tool's response).

Row layout of the first forward pass: `[shared prefix][padding][rest of the prompt]`, so every
row's last prompt token sits in the last column and positions run on from the prefix.
"""

from __future__ import annotations

import copy
import inspect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tbx.policies.parsing import CALL_CLOSE

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
_PREFIX_ENTRIES = 8  # prefix caches kept (one per domain/tool set in use; ~90 MB each for a benchmark domain)


def _growing_layer_class() -> type:
    """A transformers cache layer that appends into preallocated room instead of `torch.cat`.

    transformers' DynamicLayer concatenates the whole cache every decoded token: with 16 rows
    behind a 2,000-token prompt that copies ~1.6 GB per token on CPU. This layer keeps a buffer
    with spare positions (doubling when full) and exposes the filled part as a view, so a step
    writes only the new token's keys and values. Built lazily: transformers is imported late.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def reserve(self, extra: int) -> None:
            """Make room for `extra` more positions (one copy now instead of one per token)."""
            if not self.is_initialized or self.keys.numel() == 0:
                return
            length = self.keys.shape[-2]
            shape = (*self.keys.shape[:-2], length + extra, self.keys.shape[-1])
            self._keys = self.keys.new_empty(shape)
            self._values = self.values.new_empty(shape)
            self._keys[..., :length, :] = self.keys
            self._values[..., :length, :] = self.values
            self.keys, self.values = self._keys[..., :length, :], self._values[..., :length, :]

        def update(self, key_states, value_states, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            if not self.is_initialized or self.keys.numel() == 0 or not hasattr(self, "_keys"):
                return super().update(key_states, value_states, *args, **kwargs)
            length, new = self.keys.shape[-2], key_states.shape[-2]
            if length + new > self._keys.shape[-2]:
                self.reserve(max(new, length))
            self._keys[..., length:length + new, :] = key_states
            self._values[..., length:length + new, :] = value_states
            self.keys = self._keys[..., :length + new, :]
            self.values = self._values[..., :length + new, :]
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:  # noqa: ANN001
            if hasattr(self, "_keys") and self.get_seq_length() > 0:
                length = self.keys.shape[-2]
                self._keys, self._values = self._keys[indices, ...], self._values[indices, ...]
                self.keys, self.values = self._keys[..., :length, :], self._values[..., :length, :]
            else:
                super().batch_select_indices(indices)

    return GrowingLayer


_GROWING: type | None = None


def left_padded(rests: Sequence[Sequence[int]], shared: int, pad_id: int) -> tuple[Any, Any, Any]:
    """Rows that continue a cached `shared`-token prefix, laid out `[prefix][padding][rest]`: the
    rests' ids padded on the left [b, S], the attention mask over prefix and rests [b, shared + S],
    and positions that count real tokens only [b, S] (so every row's last token is in the last column)."""
    import torch

    width = max(len(rest) for rest in rests)
    ids = torch.full((len(rests), width), pad_id, dtype=torch.long)
    rest_mask = torch.zeros((len(rests), width), dtype=torch.long)
    for row, rest in enumerate(rests):
        ids[row, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
        rest_mask[row, width - len(rest):] = 1
    positions = shared + (rest_mask.cumsum(-1) - 1).clamp(min=0)
    mask = torch.cat([torch.ones((len(rests), shared), dtype=torch.long), rest_mask], dim=1)
    return ids, mask, positions


def cache_argument(model: Any) -> str:
    """The forward argument that takes a key/value cache: transformers renamed `past_key_values`
    to `cache` (5.2x); accept both (and peft wrappers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def cache_of(result: Any) -> Any:
    """The key/value cache a forward pass returned, under either name."""
    cache = getattr(result, "cache", None)
    return result.past_key_values if cache is None else cache


def reserve_cache(cache: Any, extra: int) -> Any:
    """Turn `cache`'s dynamic layers into growing ones with room for `extra` positions (in place)."""
    global _GROWING
    if _GROWING is None:
        _GROWING = _growing_layer_class()
    for layer in getattr(cache, "layers", ()):
        if type(layer).__name__ == "DynamicLayer":
            layer.__class__ = _GROWING
            layer.reserve(extra)
    return cache


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    seed: int  # seeds this request's own sampler
    prefix_len: int = 0  # leading tokens shared with other requests (cached across batches)
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # generated tokens, the stop token included
    text: str  # decoded without special tokens, cut after the first `</tool_call>`
    prompt_tokens: int


class Decoder:
    """Decodes batches of requests with one model (called from one worker thread at a time).

    Sampling settings travel with each request, so policies with different settings can share
    one decoder and its prefix cache.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model, self.tokenizer = model, tokenizer
        vocab = tokenizer.get_vocab()
        self.stop_ids = frozenset({tokenizer.eos_token_id} | {vocab[t] for t in STOP_TOKENS if t in vocab})
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._cache_arg = cache_argument(model)
        self._prefixes: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.prefix_hits = 0  # batches that reused a cached prefix

    def clear_prefixes(self) -> None:
        """Forget cached prefixes (their keys/values are stale once the weights change)."""
        self._prefixes.clear()

    def generate_batch(self, requests: Sequence[GenerationRequest],
                       should_stop: Callable[[], bool] = lambda: False) -> list[Generation]:
        """Decode all requests together; rows leave the batch as they finish."""
        import torch

        shared = self._shared_prefix(requests)
        with torch.inference_mode():
            room = max(len(r.prompt_ids) - len(shared) for r in requests) + max(r.max_new_tokens for r in requests)
            cache = self._prefix_cache(shared, len(requests), room)
            ids, mask, positions = self._layout(requests, len(shared))
            result = self._forward(ids, mask, positions, cache)
            reserve_cache(self._cache_of(result), max(r.max_new_tokens for r in requests))  # no-op when reserved
            outputs = self._decode(requests, result, mask, positions[:, -1:] + 1, should_stop)
        return [self._generation(request, tokens) for request, tokens in zip(requests, outputs, strict=True)]

    def _shared_prefix(self, requests: Sequence[GenerationRequest]) -> tuple[int, ...]:
        """The declared prefix all requests share, leaving each at least one token to encode."""
        length = min(min(r.prefix_len, len(r.prompt_ids) - 1) for r in requests)
        prefix = requests[0].prompt_ids[:max(0, length)]
        return prefix if all(r.prompt_ids[:len(prefix)] == prefix for r in requests) else ()

    def _prefix_cache(self, prefix: tuple[int, ...], rows: int, room: int = 0) -> Any:
        """A fresh cache holding `prefix` for `rows` rows with `room` spare positions (None for an empty prefix)."""
        import torch

        if not prefix:
            return None
        if prefix in self._prefixes:
            self._prefixes.move_to_end(prefix)
            self.prefix_hits += 1
        else:
            ids = torch.tensor([prefix], dtype=torch.long)
            result = self._forward(ids, torch.ones_like(ids), torch.arange(len(prefix))[None, :], None)
            self._prefixes[prefix] = self._cache_of(result)
            if len(self._prefixes) > _PREFIX_ENTRIES:
                self._prefixes.popitem(last=False)
        cache = copy.deepcopy(self._prefixes[prefix])  # decoding extends it; keep the stored one intact
        if rows > 1:
            cache.batch_repeat_interleave(rows)
        return reserve_cache(cache, room)

    def _layout(self, requests: Sequence[GenerationRequest], shared: int) -> tuple[Any, Any, Any]:
        """Input ids of each row's unshared part (padded on the left), mask and positions."""
        return left_padded([r.prompt_ids[shared:] for r in requests], shared, self.pad_id)

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                          **{self._cache_arg: cache})

    def _cache_of(self, result: Any) -> Any:
        return cache_of(result)

    def _decode(self, requests: Sequence[GenerationRequest], result: Any, mask: Any, next_positions: Any,
                should_stop: Callable[[], bool]) -> list[list[int]]:
        import torch

        generators = [torch.Generator().manual_seed(r.seed) for r in requests]
        outputs: list[list[int]] = [[] for _ in requests]
        active = list(range(len(requests)))  # request index of each row still decoding
        while True:
            logits = result.logits[:, -1, :]
            tokens = [self._pick(logits[row], requests[index], generators[index]) for row, index in enumerate(active)]
            keep = []
            for row, (index, token) in enumerate(zip(active, tokens, strict=True)):
                outputs[index].append(token)
                if not self._finished(outputs[index], requests[index]):
                    keep.append(row)
            if not keep or should_stop():
                return outputs
            cache = self._cache_of(result)
            step = torch.tensor(tokens, dtype=torch.long)[:, None]
            if len(keep) < len(active):
                rows = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(rows)
                mask, next_positions, step = mask[rows], next_positions[rows], step[rows]
                active = [active[row] for row in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
            result = self._forward(step, mask, next_positions, cache)
            next_positions = next_positions + 1

    def _pick(self, logits: Any, request: GenerationRequest, generator: Any) -> int:
        """Greedy at temperature 0; else a top-p sample from this request's generator."""
        import torch

        if request.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / request.temperature, dim=-1)
        if request.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            sorted_probs[torch.cumsum(sorted_probs, dim=-1) - sorted_probs > request.top_p] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=generator))

    def _finished(self, tokens: list[int], request: GenerationRequest) -> bool:
        if tokens[-1] in self.stop_ids or len(tokens) >= request.max_new_tokens:
            return True
        return CALL_CLOSE in self.tokenizer.decode(tokens[-8:], skip_special_tokens=True)

    def _generation(self, request: GenerationRequest, tokens: list[int]) -> Generation:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if CALL_CLOSE in text:
            text = text[:text.index(CALL_CLOSE) + len(CALL_CLOSE)]
        return Generation(tuple(tokens), text, len(request.prompt_ids))
