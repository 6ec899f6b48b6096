"""Batched, seeded decoding with a transformers causal LM, reusing the shared prompt prefix.

Our own small loop rather than `model.generate`, so that:
- each request samples from its own seeded `torch.Generator`: a turn's tokens do not depend on
  which other turns share its batch (up to float differences between batch shapes);
- greedy decoding (temperature 0) of a batch equals decoding each prompt alone: rows are
  padded, masked, and get position ids that count only their real tokens;
- the fixed prompt prefix (system message, tool schemas, demonstrations: ~550 tokens for the
  mock domain, 600-1,100 for the benchmark domains) is encoded once per domain and its keys and
  values reused; rows of one batch may continue different prefixes, and each prefix is read
  once per step rather than copied into every row (`tbx.policies.shared_prefix`);
- continuous batching: a row stops at an end-of-turn token or right after its first
  `</tool_call>` (one call per turn: small models otherwise go on to invent the tool's response)
  and is delivered at once; new requests join the running batch between steps, their prompts
  encoded inside the next decode step (one packed sequence: the running rows' next tokens, then
  the joining prompts), not in a forward of their own;
- an episode's next turn starts from the keys/values of its previous turn where its prompt
  continues it (the longest shared run of tokens), so only the new messages are encoded.
- the weight products go whichever way is faster on this machine for the step's row count
  (`linear`, weights first, or oneDNN on prepacked weights), timed once per process or read
  from a plan store (`tbx.policies.products`).

Each row's own cache holds `[padding][rest of the prompt][generated]`, so every row's last prompt
token sits in the last column; positions run on from the row's own prefix.
"""

from __future__ import annotations

import inspect
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbx.policies import products, shared_prefix
from tbx.policies.parsing import CALL_CLOSE
from tbx.policies.shared_prefix import SharedPrefix

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
_PREFIX_ENTRIES = 8  # prefix caches kept (one per domain/tool set in use; ~50 MB each for a benchmark domain)
_PREFILL_CHUNK = 256  # prompt columns per prefill pass behind shared prefixes
_CONVERSATION_BYTES = 1 << 30  # keys/values of finished turns kept for their episodes' next turns (SmolLM2: ~46 KB a token)
_MIN_REUSE = 8  # tokens a next turn must share with a kept turn (past its prefix) to start from it
_SPARE_COLUMNS = 256  # extra columns when a batch's cache buffer is reallocated
_NUCLEUS_FIRST = 1024  # tokens searched for a top-p nucleus before the whole vocabulary is sorted


def _growing_layer_class() -> type:
    """A transformers cache layer for a running batch: a buffer with spare rows and columns, of
    which the batch's keys/values are a window (rows `[0, rows)`, columns `[start, end)`).

    transformers' DynamicLayer concatenates the whole cache every decoded token (16 rows behind a
    2,000-token prompt: ~1.6 GB copied per token on CPU), and dropping or adding a row copies
    every row. Here a step writes only the new column; a leaving row is overwritten by the last
    row (one row copied; `compact`); columns no row uses any more are dropped by moving the
    window's start (`trim`); joining rows are copied into spare rows, right-aligned (`join`).
    When the columns after the window run out, the window slides back to the buffer's first
    columns (left free by `trim`); the buffer is reallocated (the window copied once) only when
    it runs out of rows, or of columns in all. Positions outside a row's real tokens hold zeros
    or stale keys/values, always finite, and the attention mask hides them. Built lazily: transformers is imported late.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def reserve(self, extra: int) -> None:
            """Make room for `extra` more positions (one copy now instead of one per token)."""
            if not self.is_initialized or self.keys.numel() == 0:
                return
            self._resize(self.keys.shape[0], self.keys.shape[-2] + extra)

        def _window(self) -> None:
            rows, start, end = self._rows, self._start, self._end
            self.keys, self.values = self._keys[:rows, ..., start:end, :], self._values[:rows, ..., start:end, :]

        def _resize(self, rows: int, columns: int, window: tuple | None = None, offset: int = 0) -> None:  # noqa: ANN001
            """A fresh zeroed buffer of `rows` x `columns` holding the window (or `window`: keys,
            values) from column `offset` on."""
            keys, values = window if window is not None else (self.keys, self.values)
            shape = (rows, *keys.shape[1:-2], columns, keys.shape[-1])
            self._keys, self._values = keys.new_zeros(shape), values.new_zeros(shape)
            count, width = keys.shape[0], keys.shape[-2]
            self._keys[:count, ..., offset:offset + width, :] = keys
            self._values[:count, ..., offset:offset + width, :] = values
            self._rows, self._start, self._end = count, offset, offset + width
            self._window()

        def _room(self, rows: int, offset: int, needed: int, columns: int) -> None:
            """Room for `rows` rows, with the window moved to start at column `offset` and `needed`
            columns from there on (window, then room). The window slides within the buffer when the
            buffer has them; otherwise a fresh buffer of `columns` columns (from `offset`) takes it.

            Sliding writes no new memory: a fresh zeroed buffer for a 16-row batch behind ~250 own
            columns is ~18 MB a layer, and its page faults made each reallocation 0.3-0.9 s over
            SmolLM2's 30 layers on 2 cores (6.4 s of a 163 s benchmark level). The columns the window
            leaves keep their old keys/values: finite, and masked like any padding. A slide must
            leave `_SPARE_COLUMNS // 2` columns spare, so that it is not repeated step after step."""
            if rows > self._keys.shape[0] or offset + needed + _SPARE_COLUMNS // 2 > self._keys.shape[-2]:
                self._resize(rows, offset + columns, offset=offset)
                return
            start, end, count = self._start, self._end, self._rows
            if offset != start:
                width = end - start
                for buffer in (self._keys, self._values):
                    window = buffer[:count, ..., start:end, :]
                    if abs(offset - start) < width:  # overlapping: read the window before writing it
                        window = window.clone()
                    buffer[:count, ..., offset:offset + width, :] = window
                self._start, self._end = offset, offset + width
                self._window()

        _opened: tuple[int, Sequence[int]] | None = None  # (decoding rows, joining rows' token counts): see open_rows

        def update(self, key_states, value_states, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            if not self.is_initialized or self.keys.numel() == 0 or not hasattr(self, "_keys"):
                return super().update(key_states, value_states, *args, **kwargs)
            if self._opened is not None:  # a packed step [1, kvh, rows + joining tokens, d]
                (rows, counts), self._opened, end = self._opened, None, self._end
                self._keys[:rows, ..., end, :] = key_states[0, :, :rows].transpose(0, 1)
                self._values[:rows, ..., end, :] = value_states[0, :, :rows].transpose(0, 1)
                start = rows
                for row, count in enumerate(counts, start=rows):
                    self._keys[row, ..., end + 1 - count:end + 1, :] = key_states[0, :, start:start + count]
                    self._values[row, ..., end + 1 - count:end + 1, :] = value_states[0, :, start:start + count]
                    start += count
                self._end += 1
                self._window()
                return self.keys, self.values
            new = key_states.shape[-2]
            if self._end + new > self._keys.shape[-2]:
                width = self._end - self._start
                self._room(self._keys.shape[0], 0, width + new, width + max(new, width))  # keeps the spare rows
            self._keys[:self._rows, ..., self._end:self._end + new, :] = key_states
            self._values[:self._rows, ..., self._end:self._end + new, :] = value_states
            self._end += new
            self._window()
            return self.keys, self.values

        def compact(self, moves: Sequence[tuple[int, int]], rows: int) -> None:
            """Copy row `source` over row `target` for each move, then keep the first `rows`."""
            start, end = self._start, self._end
            for target, source in moves:
                self._keys[target, ..., start:end, :] = self._keys[source, ..., start:end, :]
                self._values[target, ..., start:end, :] = self._values[source, ..., start:end, :]
            self._rows = rows
            self._window()

        def open_rows(self, earlier: Sequence[tuple[Any, Any] | None], counts: Sequence[int], pad: int,
                      room: int) -> None:
            """Add rows that join through the next update (a packed step): row j holds its
            `earlier` keys/values (those of its previous turn, or none) right before the last
            `counts[j]` columns the update writes. `pad`: columns added on the left (a joining row
            longer than the window); `room`: positions to leave after the update."""
            joining = len(counts)
            if (self._start < pad or self._rows + joining > self._keys.shape[0]
                    or self._end + 1 + room > self._keys.shape[-2]):
                width = self._end - self._start
                self._room(max(self._rows + joining, self._keys.shape[0]), pad, width + 1 + room,
                           width + 1 + room + _SPARE_COLUMNS)
            end = self._end + 1  # the window's end after the update
            for row, found, count in zip(itertools.count(self._rows), earlier, counts, strict=False):
                if found is not None:  # other columns: stale or zero, always finite, masked
                    width = found[0].shape[1]
                    self._keys[row, ..., end - count - width:end - count, :] = found[0]
                    self._values[row, ..., end - count - width:end - count, :] = found[1]
            self._opened = (self._rows, tuple(counts))
            self._rows += joining
            self._start -= pad
            self._window()

        def trim(self, columns: int) -> None:
            """Drop the window's first `columns` positions (padding in every row)."""
            self._start += columns
            self._window()

        def join(self, other, pad_self: int, room: int) -> None:  # noqa: ANN001
            """Add `other`'s rows after this layer's, right-aligned (the wider side sets the width;
            `pad_self`: how much wider `other` is than this window), with `room` spare positions after."""
            count, width = other.keys.shape[0], other.keys.shape[-2]
            if (self._start < pad_self or self._rows + count > self._keys.shape[0]
                    or self._end + room > self._keys.shape[-2]):
                own = self._end - self._start
                self._room(max(self._rows + count, self._keys.shape[0]), pad_self, own + room,
                           own + room + _SPARE_COLUMNS)
            rows, end = self._rows, self._end
            self._keys[rows:rows + count, ..., end - width:end, :] = other.keys
            self._values[rows:rows + count, ..., end - width:end, :] = other.values
            self._rows, self._start = rows + count, self._start - pad_self
            self._window()

        def batch_select_indices(self, indices) -> None:  # noqa: ANN001
            if hasattr(self, "_keys") and self.get_seq_length() > 0:
                self._resize(len(indices), self._keys.shape[-2], (self.keys[indices], self.values[indices]))
            else:
                super().batch_select_indices(indices)

    return GrowingLayer


def compaction(count: int, leaving: Iterable[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """How a batch of `count` rows closes the gaps of the `leaving` ones: each gap takes the
    current last row. Returns the new order (old row indices) and the (target, source) copies."""
    order, moves = list(range(count)), []
    for index in sorted(leaving, reverse=True):
        last = len(order) - 1
        if index != last:
            moves.append((index, last))
            order[index] = order[last]
        order.pop()
    return order, moves


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


def forward_parameters(model: Any) -> Any:
    """The names the model's forward accepts (of the wrapped model, for peft wrappers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inspect.signature(base.forward).parameters


def cache_argument(model: Any) -> str:
    """The forward argument that takes a key/value cache: transformers renamed `past_key_values`
    to `cache` (5.2x); accept both (and peft wrappers)."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


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


def _unused_columns(mask: Any) -> int:
    """How many leading columns of a batch's attention mask [rows, width] are padding in every
    row. A running batch drops them when rows leave or join: else its width would grow by a
    column every step for as long as the stream runs (the oldest row's start, long gone)."""
    return int(mask.argmax(dim=1).min())  # each row's first real column (every row has one)


def _reusable(tokens: Sequence[int], prompt: Sequence[int], split: int) -> int:
    """How many of `prompt`'s tokens past its prefix (its first `split`) `tokens` also begins
    with, leaving at least the prompt's last token to encode."""
    return min(_common_length(tokens, prompt), len(prompt) - 1) - split


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (slice comparisons, halving: fast in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def pick(logits: Any, requests: Sequence[GenerationRequest], generators: Sequence[Any]) -> list[int]:
    """Each row's next token from its logits [rows, vocab]: greedy at temperature 0; else a
    (top-p) sample drawn with the row's own generator. All rows at once: one softmax and one
    cumulative sum over the batch, then one uniform draw per row inverted through its row's
    distribution (`torch.multinomial` per row over a 49k vocabulary cost ~2 ms a row: 16 rows
    took ~30 ms of a ~180 ms decode step).

    Only the work the rows need: the argmax only for greedy rows, the division only for a
    temperature other than 1 (dividing by 1 changes nothing), the cumulative sum in place. Each of
    those passes over a fresh [16, 49k] tensor cost ~0.7-1.4 ms here (7.3 ms a 16-row pick before,
    ~5% of a decode step); the tokens drawn are the same."""
    import torch

    sampled = [index for index, request in enumerate(requests) if request.temperature > 0]
    greedy = len(sampled) < len(requests)
    picked = logits.argmax(-1).tolist() if greedy else [0] * len(requests)
    if not sampled:
        return picked
    chosen = logits if not greedy else logits[torch.tensor(sampled)]
    chosen = chosen.float()
    if any(requests[index].temperature != 1.0 for index in sampled):
        chosen = chosen / torch.tensor([[requests[index].temperature] for index in sampled])
    probs = torch.softmax(chosen, dim=-1)
    for place, index in enumerate(sampled):
        if requests[index].top_p < 1.0:
            probs[place] = nucleus(probs[place], requests[index].top_p)
    cumulative = probs.cumsum_(-1)
    draws = torch.cat([torch.rand(1, generator=generators[index]) for index in sampled])
    tokens = torch.searchsorted(cumulative, (draws * cumulative[:, -1])[:, None], right=True)
    for index, token in zip(sampled, tokens.clamp_(max=logits.shape[-1] - 1)[:, 0].tolist(), strict=True):
        picked[index] = token
    return picked


def nucleus(probs: Any, top_p: float) -> Any:
    """`probs` [vocab] cut to its nucleus: the most likely tokens, in order, until the mass before
    a token reaches `top_p` (the rest set to 0, not renormalised). Looks among the top 1,024
    first and sorts the whole vocabulary only when the nucleus is wider."""
    import torch

    count = min(_NUCLEUS_FIRST, probs.numel())
    while True:
        top, order = torch.topk(probs, count)  # descending
        keep = top.cumsum(0) - top <= top_p
        if not bool(keep[-1]) or count == probs.numel():
            break
        count = min(count * 8, probs.numel())
    return torch.zeros_like(probs).index_put_((order[keep],), top[keep])


def _joined(parts: Sequence[Any]) -> Any:
    """Tensors [kv_heads, length, head_dim] end to end along the length."""
    import torch

    return torch.cat(list(parts), dim=1) if len(parts) > 1 else parts[0]


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


@dataclass
class _Row:
    """One request decoding: who to deliver to, its sampler and the tokens so far."""

    handle: Any
    request: GenerationRequest
    generator: Any
    prefix: tuple[int, ...]  # the request's cached leading part (empty: none)
    tokens: list[int]


@dataclass
class _Batch:
    """The rows decoding together: their own caches (one length, padded on the left), attention
    mask, next positions, the logits of their next token, and the prefixes they read."""

    rows: list[_Row]
    cache: Any
    mask: Any
    positions: Any
    logits: Any
    prefixes: SharedPrefix | None


@dataclass
class _Entering:
    """Requests about to join a batch: their rows, prefix lengths, the previous turns' keys and
    values they start from (per row: per layer keys, values; or None) and how many tokens those
    cover, and the token ids left to encode."""

    rows: list[_Row]
    splits: list[int]
    earlier: list[tuple[list[Any], list[Any]] | None]
    reused: list[int]
    rests: list[tuple[int, ...]]

    def found_at(self, layer: int) -> list[tuple[Any, Any] | None]:
        """Each row's previous-turn keys and values at `layer` (None: it has none)."""
        return [None if found is None else (found[0][layer], found[1][layer]) for found in self.earlier]


def _rows_prefix(prefixes: SharedPrefix | None, rows: Sequence[int]) -> SharedPrefix | None:
    """The prefixes `rows` of a batch read, renumbered from 0 (None: they read none)."""
    import torch

    if prefixes is None:
        return None
    chosen = prefixes.select(torch.tensor(list(rows), dtype=torch.long))
    return chosen if chosen.segments else None


class Decoder:
    """Decodes requests with one model (called from one worker thread at a time).

    Continuous batching: rows leave as they finish (delivered at once) and new requests join the
    running batch between steps. Sampling settings travel with each request, so policies with
    different settings can share one decoder and its prefix cache. Rows of one batch may continue
    different prefixes (several domains at once): each prefix is read once per step
    (`tbx.policies.shared_prefix`).
    """

    def __init__(self, model: Any, tokenizer: Any, plan_store: Path | None = None, pack_weights: bool = True):
        """`plan_store`: a JSON file that keeps the weight products' plan (`tbx.policies.products`)
        for every process on the machine; without it the plan is timed once per process.
        `pack_weights`: whether the plan may use oneDNN on packed copies of the weights."""
        self.model, self.tokenizer = model, tokenizer
        self._plan_store, self._pack_weights = plan_store, pack_weights
        vocab = tokenizer.get_vocab()
        self.stop_ids = frozenset({tokenizer.eos_token_id} | {vocab[t] for t in STOP_TOKENS if t in vocab})
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._cache_arg = cache_argument(model)
        self._keep_last = "logits_to_keep" in forward_parameters(model)
        self._prefixes: OrderedDict[tuple[int, ...], tuple[list[Any], list[Any]]] = OrderedDict()
        # Every cached prefix end to end: (prefix -> its columns, per layer keys, values).
        self._layout: tuple[dict[tuple[int, ...], tuple[int, int]], list[Any], list[Any]] | None = None
        self._shares: bool | None = None  # whether the model honours shared prefixes (checked on first use)
        # Finished turns: token ids that have keys/values (prompt and generated, the last token
        # excluded) -> (prefix length, per layer keys and values [kv_heads, own length, head_dim]).
        self._conversations: OrderedDict[tuple[int, ...], tuple[int, list[Any], list[Any]]] = OrderedDict()
        self.reused_tokens = 0  # prompt tokens taken from an earlier turn's keys/values instead
        self._waiting: list[tuple[Any, GenerationRequest]] = []  # held back a step (`_entering`)
        self._products: products.Products | None = None  # the weight products' plan (timed when first needed)

    @property
    def shares_prefixes(self) -> bool:
        """Whether rows read cached prefixes (else every prompt is encoded whole)."""
        if self._shares is None:
            self._shares = shared_prefix.supported(self.model)
        return self._shares

    def clear_prefixes(self) -> None:
        """Forget cached prefixes (their keys/values are stale once the weights change)."""
        self._prefixes.clear()
        self._layout = None
        self._conversations.clear()

    def generate_batch(self, requests: Sequence[GenerationRequest],
                       should_stop: Callable[[], bool] = lambda: False) -> list[Generation]:
        """Decode `requests` together and return their generations in order."""
        results: list[Generation | None] = [None] * len(requests)
        self.decode(list(enumerate(requests)), results.__setitem__, should_stop=should_stop)
        return results  # type: ignore[return-value]

    def decode(self, items: Sequence[tuple[Any, GenerationRequest]], deliver: Callable[[Any, Generation], None],
               more: Callable[[int], Sequence[tuple[Any, GenerationRequest]]] = lambda rows: (),
               should_stop: Callable[[], bool] = lambda: False) -> None:
        """Decode `(handle, request)` items; `deliver(handle, generation)` as each row finishes.

        Between steps, `more(rows decoding now)` may hand over further items, which join the
        running batch. Returns when no row is left (or `should_stop()`: every row still decoding
        is delivered as it stands).
        """
        import torch

        with torch.inference_mode():
            self._waiting = []
            batch = self._admit(None, items) if items else None
            while batch is not None:
                kept = []
                for index, (row, token) in enumerate(zip(batch.rows, self._pick(batch), strict=True)):
                    row.tokens.append(token)
                    if self._finished(row.tokens, row.request):
                        self._remember(batch, index)
                        deliver(row.handle, self._generation(row.request, row.tokens))
                    else:
                        kept.append(index)
                if should_stop():
                    for index in kept:
                        row = batch.rows[index]
                        deliver(row.handle, self._generation(row.request, row.tokens))
                    for handle, request in self._waiting:  # held back, not begun: nothing generated
                        deliver(handle, self._generation(request, []))
                    self._waiting = []
                    return
                if not kept:
                    joining = self._joining(more, 0)
                    batch = self._admit(None, joining) if joining else None
                else:
                    batch = self._step(batch, kept, self._joining(more, len(kept)) if self._joinable(batch) else ())

    def _joining(self, more: Callable[[int], Sequence[tuple[Any, GenerationRequest]]],
                 rows: int) -> list[tuple[Any, GenerationRequest]]:
        """The requests held back a step (`_entering`) first, then those `more` hands over (the
        held-back ones count as rows decoding)."""
        waiting, self._waiting = self._waiting, []
        return waiting + list(more(rows + len(waiting)))

    def _step(self, batch: _Batch, kept: list[int],
              joining: Sequence[tuple[Any, GenerationRequest]] = ()) -> _Batch | None:
        """The kept rows one token further (their next logits computed), and `joining` requests
        added: encoded in the same forward where they can be (`_packed_step`), else after it."""
        import torch

        if not kept:
            return None
        if len(kept) < len(batch.rows):
            if self._joinable(batch):  # the last rows fill the leavers' places; unused columns go
                order, moves = compaction(len(batch.rows), set(range(len(batch.rows))) - set(kept))
                rows = torch.tensor(order, dtype=torch.long)
                trim = _unused_columns(batch.mask[rows])
                for layer in batch.cache.layers:
                    layer.compact(moves, len(order))
                    layer.trim(trim)
            else:
                order, trim = kept, 0
                rows = torch.tensor(kept, dtype=torch.long)
                batch.cache.batch_select_indices(rows)
            batch = _Batch([batch.rows[index] for index in order], batch.cache, batch.mask[rows, trim:],
                           batch.positions[rows], None,
                           batch.prefixes.select(rows) if batch.prefixes is not None else None)
        step = torch.tensor([row.tokens[-1] for row in batch.rows], dtype=torch.long)[:, None]
        entering = self._entering(joining, batch) if joining else None
        if entering is not None and self._packable(entering):
            return self._packed_step(batch, step, entering)
        batch.mask = torch.cat([batch.mask, torch.ones((len(batch.rows), 1), dtype=torch.long)], dim=1)
        batch.logits = self._forward(step, batch.mask, batch.positions, batch.cache, batch.prefixes).logits[:, -1]
        batch.positions = batch.positions + 1
        return self._admit(batch, joining, entering) if entering is not None else batch

    def _packable(self, entering: _Entering) -> bool:
        """Whether joining rows can be encoded inside a decode step: the model takes shared
        prefixes (its attention goes through ours) and no rest is longer than a prefill chunk
        (which bounds the attention scores' memory, as in `_prefill`)."""
        return self.shares_prefixes and max(len(rest) for rest in entering.rests) <= _PREFILL_CHUNK

    def _packed_step(self, batch: _Batch, step: Any, entering: _Entering) -> _Batch:
        """One forward over one packed sequence: each decoding row's next token, then each joining
        row's prompt tokens (after its prefix and what it reuses of its previous turn).

        A forward reads every weight however few its tokens: a joining turn's prompt (~45 tokens on
        average in the benchmark) encoded on its own cost a whole forward (~75 ms for one token,
        ~220 ms for 19); inside a 16-row step, its tokens ride on the step's weight products.

        Joining rows with one token to encode (a repeated opening, a next turn that continues its
        previous one to its last token) go first and attend together with the decoding rows, one
        query each like theirs; apart, each cost an attention call of its own in every layer."""
        import torch

        order = sorted(range(len(entering.rests)), key=lambda j: len(entering.rests[j]) != 1)  # stable
        entering = _Entering(*([part[j] for j in order] for part in (entering.rows, entering.splits, entering.earlier,
                                                                       entering.reused, entering.rests)))
        rows, rests, reused = len(batch.rows), entering.rests, entering.reused
        single = sum(1 for rest in rests if len(rest) == 1)  # they attend with the decoding rows
        lengths = [count + len(rest) for count, rest in zip(reused, rests, strict=True)]
        pad = max(0, max(lengths) - batch.mask.shape[1] - 1)  # a joining row longer than the window
        width = batch.mask.shape[1] + 1 + pad
        room = max(row.request.max_new_tokens for row in entering.rows)
        every = batch.rows + entering.rows
        prefixes = self._shared([row.prefix for row in every])  # encodes a prefix new to the layout
        for index, layer in enumerate(batch.cache.layers):
            layer.open_rows(entering.found_at(index), [len(rest) for rest in rests], pad, room)
        own = torch.zeros((len(rests), width), dtype=torch.long)
        for row, length in enumerate(lengths):
            own[row, width - length:] = 1
        mask = torch.cat([torch.nn.functional.pad(batch.mask, (pad, 1), value=0), own])
        mask[:rows, -1] = 1
        columns = torch.arange(width)
        joins = []
        for row, rest in enumerate(rests[single:], start=rows + single):  # causal within the row's own columns
            queries = width - len(rest) + torch.arange(len(rest))
            seen = mask[row].bool()[None, :] & (columns[None, :] <= queries[:, None])
            own_columns = lengths[row - rows]  # its attention reads these only, not the batch's width
            joins.append((len(rest), seen[None, None, :, width - own_columns:], _rows_prefix(prefixes, [row])))
        packed = shared_prefix.Packed(rows + single, mask[:rows + single].bool()[:, None, None, :],
                                      _rows_prefix(prefixes, range(rows + single)), joins)
        ids = torch.cat([step[:, 0], *(torch.tensor(rest, dtype=torch.long) for rest in rests)])[None, :]
        starts = [split + count for split, count in zip(entering.splits, reused, strict=True)]
        positions = torch.cat([batch.positions[:, 0], *(start + torch.arange(len(rest))
                                                        for start, rest in zip(starts, rests, strict=True))])
        last = torch.tensor(list(itertools.accumulate((len(rest) for rest in rests), initial=rows))[1:]) - 1
        keep = torch.cat([torch.arange(rows), last])
        logits = self._forward(ids, None, positions[None, :], batch.cache, None, keep=keep, packed=packed).logits[0]
        self.reused_tokens += sum(reused)
        next_positions = torch.cat([batch.positions + 1,
                                    torch.tensor([[start + len(rest)] for start, rest in zip(starts, rests, strict=True)])])
        return _Batch(every, batch.cache, mask, next_positions, logits if self._keep_last else logits[keep], prefixes)

    @staticmethod
    def _joinable(batch: _Batch) -> bool:
        """Whether new rows can join `batch` (every cache layer is a growing one)."""
        return all(hasattr(layer, "join") for layer in getattr(batch.cache, "layers", (None,)))

    def _entering(self, items: Sequence[tuple[Any, GenerationRequest]], batch: _Batch | None = None) -> _Entering:
        """New requests as rows: each reads its cached prefix and starts from the longest run of
        its prompt that already has keys/values: a finished turn it continues (its episode's
        previous turn, or another episode's identical opening) or a row of the running `batch`
        (another attempt at the same task, begun a few steps earlier); the rest is to be encoded.

        A request whose prompt shares at least `_MIN_REUSE` more tokens with one entering beside it
        than it can reuse now (the attempts of one task, or a GRPO group, starting together) is
        held back a step (`_waiting`): then that one's prompt has keys/values and it starts from
        them instead of encoding the same tokens again. Only where rows can join a running batch."""
        import torch

        requests = [request for _, request in items]
        splits = [min(r.prefix_len, len(r.prompt_ids) - 1) if self.shares_prefixes else 0 for r in requests]
        earlier = [self._recall(r.prompt_ids, n, batch) for r, n in zip(requests, splits, strict=True)]
        reused = [0 if found is None else found[0][0].shape[1] for found in earlier]
        joinable = self.shares_prefixes and (batch is None or self._joinable(batch))
        held = self._repeats(requests, splits, reused) if joinable else set()
        self._waiting.extend(item for index, item in enumerate(items) if index in held)
        now = [index for index in range(len(items)) if index not in held]
        rows = [_Row(items[i][0], requests[i], torch.Generator().manual_seed(requests[i].seed),
                     requests[i].prompt_ids[:splits[i]], []) for i in now]
        rests = [requests[i].prompt_ids[splits[i] + reused[i]:] for i in now]
        return _Entering(rows, [splits[i] for i in now], [earlier[i] for i in now], [reused[i] for i in now], rests)

    @staticmethod
    def _repeats(requests: Sequence[GenerationRequest], splits: Sequence[int], reused: Sequence[int]) -> set[int]:
        """The requests to hold back: each shares at least `_MIN_REUSE` more prompt tokens past its
        prefix with an earlier one that is not held back than it reuses now."""
        held: set[int] = set()
        for index, request in enumerate(requests):
            prompt = request.prompt_ids
            for leader in range(index):
                if leader in held or splits[leader] != splits[index]:
                    continue
                shared = _reusable(requests[leader].prompt_ids, prompt, splits[index])
                if shared - reused[index] >= _MIN_REUSE:
                    held.add(index)
                    break
        return held

    def _admit(self, batch: _Batch | None, items: Sequence[tuple[Any, GenerationRequest]],
               entering: _Entering | None = None) -> _Batch:
        """Encode new requests (`_entering`) in a forward of their own and add them to `batch`."""
        import torch
        from transformers import DynamicCache

        entering = entering or self._entering(items, batch)
        rows, splits, earlier, reused, rests = (entering.rows, entering.splits, entering.earlier, entering.reused,
                                                entering.rests)
        room = max(row.request.max_new_tokens for row in rows)
        prefixes = self._shared([row.prefix for row in rows])
        ids, mask, positions = left_padded(rests, 0, self.pad_id)
        positions = positions + torch.tensor([n + c for n, c in zip(splits, reused, strict=True)])[:, None]
        cache, width = None, max(reused)
        if width:  # rows that continue an earlier turn start from its keys/values, right-aligned
            found_keys = next(found for found in earlier if found is not None)[0]  # per layer [kv_heads, n, head_dim]
            shape = (len(rows), found_keys[0].shape[0], width, found_keys[0].shape[2])
            layers = [(layer.new_zeros(shape), layer.new_zeros(shape)) for layer in found_keys]
            head = torch.zeros((len(rows), width), dtype=torch.long)
            for row, (found, count) in enumerate(zip(earlier, reused, strict=True)):
                if found is not None:
                    head[row, width - count:] = 1
                    for (keys, values), found_keys, found_values in zip(layers, *found, strict=True):
                        keys[row, :, width - count:], values[row, :, width - count:] = found_keys, found_values
            mask = torch.cat([head, mask], dim=1)
            cache = reserve_cache(DynamicCache(ddp_cache_data=layers), ids.shape[1] + room)
        self.reused_tokens += sum(reused)
        logits, cache = self._prefill(ids, mask, positions, prefixes, room, cache)
        new = _Batch(rows, cache, mask, positions[:, -1:] + 1, logits, prefixes)
        if batch is None:
            return new
        trim = _unused_columns(batch.mask)
        old_width, new_width = batch.mask.shape[1] - trim, new.mask.shape[1]
        pad_old, pad_new = max(0, new_width - old_width), max(0, old_width - new_width)
        for layer, other in zip(batch.cache.layers, new.cache.layers, strict=True):
            layer.trim(trim)
            layer.join(other, pad_old, room)
        rows = batch.rows + new.rows
        mask = torch.cat([torch.nn.functional.pad(batch.mask[:, trim:], (pad_old, 0)),
                          torch.nn.functional.pad(new.mask, (pad_new, 0))])
        return _Batch(rows, batch.cache, mask, torch.cat([batch.positions, new.positions]),
                      torch.cat([batch.logits, new.logits]), self._shared([row.prefix for row in rows]))

    def _remember(self, batch: _Batch, index: int) -> None:
        """Keep a finished row's own keys/values: its episode's next turn usually continues it."""
        row = batch.rows[index]
        tokens = row.request.prompt_ids + tuple(row.tokens[:-1])  # the last token was never fed
        if not self._joinable(batch) or len(tokens) - len(row.prefix) < _MIN_REUSE:
            return
        columns = batch.mask[index].nonzero().squeeze(1)  # the row's real positions, in order
        if len(columns) != len(tokens) - len(row.prefix):
            return
        keys = [layer.keys[index].index_select(1, columns) for layer in batch.cache.layers]
        values = [layer.values[index].index_select(1, columns) for layer in batch.cache.layers]
        self._conversations[tokens] = (len(row.prefix), keys, values)
        self._conversations.move_to_end(tokens)
        size = lambda entry: sum(t.numel() * t.element_size() for t in entry[1] + entry[2])  # noqa: E731
        held = sum(size(entry) for entry in self._conversations.values())
        while held > _CONVERSATION_BYTES and len(self._conversations) > 1:
            held -= size(self._conversations.popitem(last=False)[1])

    def _recall(self, prompt: tuple[int, ...], split: int,
                batch: _Batch | None = None) -> tuple[list[Any], list[Any]] | None:
        """Keys and values of the longest run of `prompt` past its prefix that a kept turn or a row
        of the running `batch` holds, cut to the shared length and leaving at least the prompt's
        last token to encode (None: less than `_MIN_REUSE` tokens anywhere). A running row's are
        copied out of the batch's cache, which moves on."""
        best, best_length = None, 0
        for tokens, (prefix_len, _, _) in self._conversations.items():
            if prefix_len == split:
                length = _reusable(tokens, prompt, split)
                if length >= _MIN_REUSE and length > best_length:
                    best, best_length = tokens, length
        running = None
        if batch is not None and self._joinable(batch):
            for index, row in enumerate(batch.rows):
                if len(row.prefix) == split:
                    tokens = row.request.prompt_ids + tuple(row.tokens[:-1])  # the last token is not fed yet
                    length = _reusable(tokens, prompt, split)
                    if length >= _MIN_REUSE and length > best_length:
                        own = batch.mask[index].nonzero().squeeze(1)  # the row's real positions, in order
                        if len(own) == len(tokens) - split:
                            running, best_length = own[:length], length
                            source = index
        if running is not None:
            return ([layer.keys[source].index_select(1, running) for layer in batch.cache.layers],
                    [layer.values[source].index_select(1, running) for layer in batch.cache.layers])
        if best is None:
            return None
        self._conversations.move_to_end(best)
        _, keys, values = self._conversations[best]
        return [k[:, :best_length] for k in keys], [v[:, :best_length] for v in values]

    def _shared(self, prefixes: Sequence[tuple[int, ...]]) -> SharedPrefix | None:
        """The rows' prefixes in the layout of every cached prefix end to end, each row pointed
        to its own (None: no row has one). The layout is rebuilt only when a prefix is new to it,
        not whenever the mix of prefixes in a batch changes."""
        import torch

        distinct = tuple(dict.fromkeys(prefix for prefix in prefixes if prefix))
        if not distinct:
            return None
        if self._layout is None or any(prefix not in self._layout[0] for prefix in distinct):
            parts = {prefix: self._prefix(prefix) for prefix in distinct}  # encodes the new ones
            for prefix, tensors in self._prefixes.items():
                parts.setdefault(prefix, tensors)
            starts = itertools.accumulate((len(prefix) for prefix in parts), initial=0)
            spans = {prefix: (start, start + len(prefix)) for prefix, start in zip(parts, starts, strict=False)}
            keys = [_joined(layer) for layer in zip(*(p[0] for p in parts.values()), strict=True)]
            values = [_joined(layer) for layer in zip(*(p[1] for p in parts.values()), strict=True)]
            for prefix in self._prefixes:  # the store keeps views of the layout: one copy in memory
                begin, stop = spans[prefix]
                self._prefixes[prefix] = ([k[:, begin:stop] for k in keys], [v[:, begin:stop] for v in values])
            self._layout = (spans, keys, values)
        spans, keys, values = self._layout
        for prefix in distinct:  # recently used: kept longest
            if prefix in self._prefixes:
                self._prefixes.move_to_end(prefix)
        segments = [(*spans[prefix],
                     torch.tensor([row for row, own in enumerate(prefixes) if own == prefix], dtype=torch.long))
                    for prefix in distinct]
        return SharedPrefix(keys, values, segments)

    def _prefix(self, prefix: tuple[int, ...]) -> tuple[list[Any], list[Any]]:
        """Per layer keys and values of `prefix`, encoded once and kept (least recently used out)."""
        import torch

        if prefix in self._prefixes:
            self._prefixes.move_to_end(prefix)
            return self._prefixes[prefix]
        ids = torch.tensor([prefix], dtype=torch.long)
        result = self._forward(ids, torch.ones_like(ids), torch.arange(len(prefix))[None, :], None, None,
                               last_only=True)  # its keys/values are what is kept; no logits for every position
        self._prefixes[prefix] = shared_prefix.prefix_tensors(self._cache_of(result))
        if len(self._prefixes) > _PREFIX_ENTRIES:
            self._prefixes.popitem(last=False)
        return self._prefixes[prefix]

    def _prefill(self, ids: Any, mask: Any, positions: Any, prefixes: SharedPrefix | None, new_tokens: int,
                 cache: Any = None) -> tuple[Any, Any]:
        """Encode the rows' own parts after what `cache` holds (in chunks of `_PREFILL_CHUNK`
        columns behind shared prefixes, which bounds the attention scores' memory): the last
        column's logits, and the cache with room to decode into. `mask` covers cache and ids."""
        width, held = ids.shape[1], mask.shape[1] - ids.shape[1]
        chunk = width if prefixes is None else _PREFILL_CHUNK
        for start in range(0, width, chunk):
            end = min(width, start + chunk)
            result = self._forward(ids[:, start:end], mask[:, :held + end], positions[:, start:end], cache, prefixes,
                                   last_only=True)
            if cache is None:
                cache = reserve_cache(self._cache_of(result), width - end + new_tokens)
        return result.logits[:, -1], cache

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any, prefixes: SharedPrefix | None,
                 last_only: bool = False, keep: Any = None, packed: shared_prefix.Packed | None = None) -> Any:
        """`keep`: the positions whose logits are wanted (where the model can be told; else all)."""
        arguments = dict(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        arguments[self._cache_arg] = cache
        if (last_only or keep is not None) and self._keep_last:
            arguments["logits_to_keep"] = 1 if keep is None else keep  # not the whole prompt's logits
        if self._products is None:
            self._products = products.Products.of(self.model, self._plan_store, self._pack_weights)
        with self._products.active(ids.numel()):
            if prefixes is None and packed is None:
                return self.model(**arguments)
            with shared_prefix.switched(self.model):
                if packed is not None:
                    return self.model(**arguments, tbx_packed=packed)
                return self.model(**arguments, tbx_prefix=prefixes)

    def _cache_of(self, result: Any) -> Any:
        return cache_of(result)

    def _pick(self, batch: _Batch) -> list[int]:
        return pick(batch.logits, [row.request for row in batch.rows], [row.generator for row in batch.rows])

    def _finished(self, tokens: list[int], request: GenerationRequest) -> bool:
        if tokens[-1] in self.stop_ids or len(tokens) >= request.max_new_tokens:
            return True
        return CALL_CLOSE in self.tokenizer.decode(tokens[-8:], skip_special_tokens=True)

    def _generation(self, request: GenerationRequest, tokens: list[int]) -> Generation:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if CALL_CLOSE in text:
            text = text[:text.index(CALL_CLOSE) + len(CALL_CLOSE)]
        return Generation(tuple(tokens), text, len(request.prompt_ids))
