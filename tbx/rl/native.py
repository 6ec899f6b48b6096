"""The native GRPO update: a transformers model, full-parameter or LoRA, on CPU or one GPU.

Each assistant turn of an episode becomes one training sequence: the prompt the model saw
(system policy, tools, demonstrations, the conversation so far, tool results and user replies)
followed by the tokens it generated. Only generated tokens carry loss (mask 1); prompt tokens
— everything the tools and the user wrote — get mask 0 and so no gradient. Every turn of an
episode carries the episode's group-centred advantage. Training runs one update per batch of
fresh episodes (on-policy), so the sampling log-probs equal the current ones before the step:
the ratio is 1 and the clip bites only with more than one update per batch.

Every turn's prompt starts with the same long prefix (system policy, tools, demonstrations:
~1,000 tokens for the easy training domains). `shared_prefix_logprobs` runs that prefix once
per micro-batch, with gradient, and the rows' own suffixes on its key/value cache; the function
the model computes, and so the gradient, is the same as running every full sequence, at a
fraction of the tokens (docs/benchmarks.md, "Measurements behind design choices"), and the
vocabulary-sized logits exist only for the suffixes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tbx.rl.correction import ImportanceStats, truncated_importance_weights
from tbx.rl.grpo import LossSettings, policy_loss


def cache_argument(model: Any) -> str:
    """The forward argument that takes a key/value cache: transformers renamed `past_key_values`
    to `cache` (5.2x); accept both (and peft wrappers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def cache_of(result: Any) -> Any:
    """The key/value cache a forward pass returned, under either name."""
    cache = getattr(result, "cache", None)
    return result.past_key_values if cache is None else cache


def left_padded(rests: Sequence[Sequence[int]], shared: int, pad_id: int) -> tuple[Any, Any, Any]:
    """Rows that continue a cached `shared`-token prefix, laid out `[prefix][padding][rest]`: the
    rests' ids padded on the left [b, S], the attention mask over prefix and rests [b, shared + S],
    and positions that count real tokens only [b, S] (so every row's last token is in the last column)."""
    width = max(len(rest) for rest in rests)
    ids = torch.full((len(rests), width), pad_id, dtype=torch.long)
    rest_mask = torch.zeros((len(rests), width), dtype=torch.long)
    for row, rest in enumerate(rests):
        ids[row, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
        rest_mask[row, width - len(rest):] = 1
    positions = shared + (rest_mask.cumsum(-1) - 1).clamp(min=0)
    mask = torch.cat([torch.ones((len(rests), shared), dtype=torch.long), rest_mask], dim=1)
    return ids, mask, positions


@dataclass(frozen=True)
class TurnSample:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]  # what the model generated this turn (stop token included)
    advantage: float  # the episode's group-centred advantage
    sampled_logprobs: tuple[float, ...] = ()  # the rollout engine's log-probs of completion_ids (diagnostic)


def batch_tensors(samples: Sequence[TurnSample], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ids [b, L], attention mask [b, L] and response mask [b, L-1] of targets."""
    length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)  # [batch, tokens]
    attention = torch.zeros((len(samples), length), dtype=torch.long)  # [batch, tokens]
    response = torch.zeros((len(samples), length - 1), dtype=torch.float32)  # [batch, tokens-1]
    for row, sample in enumerate(samples):
        sequence = list(sample.prompt_ids) + list(sample.completion_ids)
        ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        # target position t predicts token t+1: completion tokens sit at len(prompt)..end
        response[row, len(sample.prompt_ids) - 1 : len(sequence) - 1] = 1.0
    return ids, attention, response


def token_logprobs(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    """Log-prob of each next token under the model, at the sampling temperature. [b, L-1]"""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1, :]  # [batch, tokens-1, vocab]
    return target_logprobs(logits, ids[:, 1:], temperature)  # [batch, tokens-1]


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-prob of each target token [b, T] under logits [b, T, vocab] at the sampling temperature."""
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    return torch.gather(logp, 2, targets[:, :, None]).squeeze(-1)


def common_prefix_length(samples: Sequence[TurnSample]) -> int:
    """Leading prompt tokens all samples share, leaving each at least one prompt token after it
    (so every completion token is predicted from a suffix position)."""
    first = samples[0].prompt_ids
    length = min(len(s.prompt_ids) for s in samples) - 1
    for sample in samples[1:]:
        same = 0
        limit = min(length, len(sample.prompt_ids))
        while same < limit and sample.prompt_ids[same] == first[same]:
            same += 1
        length = same
    return max(length, 0)


def shared_prefix_logprobs(model: torch.nn.Module, samples: Sequence[TurnSample], pad_id: int,
                           temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs [b, C] of each row's last C tokens (C: the longest completion) and their response
    mask, running the shared prompt prefix once (with gradient) and the suffixes on its cache.

    Suffixes are padded on the left (`[prefix][padding][suffix]`, positions counting real tokens
    only), so every row's completion ends in the last column and only the last C + 1 positions
    need vocabulary-sized logits (`logits_to_keep`)."""
    prefix = common_prefix_length(samples)
    if prefix == 0:
        ids, attention, response = batch_tensors(samples, pad_id)
        return token_logprobs(model, ids, attention, temperature), response
    ids, mask, positions = left_padded([s.prompt_ids[prefix:] + s.completion_ids for s in samples], prefix,
                                       pad_id)  # [b, S], [b, prefix + S], [b, S]
    keep = max(len(s.completion_ids) for s in samples)
    response = torch.zeros((len(samples), keep), dtype=torch.float32)  # [b, C]
    for row, sample in enumerate(samples):
        response[row, keep - len(sample.completion_ids):] = 1.0
    cache = cache_of(model(input_ids=torch.tensor([samples[0].prompt_ids[:prefix]]), use_cache=True))
    if len(samples) > 1:
        cache.batch_repeat_interleave(len(samples))  # differentiable: the prefix's gradient sums over rows
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=keep + 1,
                   **{cache_argument(model): cache}).logits[:, :-1, :]  # [b, C, vocab]: predict the last C tokens
    return target_logprobs(logits, ids[:, -keep:], temperature), response


@dataclass(frozen=True)
class UpdateResult:
    loss: float
    grad_norm: float
    response_tokens: int
    sequences: int
    clip_fraction: float
    # mean |log p_trainer - log p_sampler| over the tokens whose sampler log-prob is known (nan: none):
    # how far the rollout engine's numbers are from the trainer's for the very same weights and tokens
    logprob_gap: float = float("nan")
    # trainer (before the step) against sampler over the same tokens: the TIS weights' statistics and the
    # mismatch KL (tbx/rl/correction.py); with grpo.is_threshold null the weights are computed, not applied
    importance: ImportanceStats = ImportanceStats()


def sampled_logprobs(response: torch.Tensor, samples: Sequence[TurnSample]) -> tuple[torch.Tensor, torch.Tensor]:
    """The rollout engine's log-probs laid out as the response tokens [b, T] (0 elsewhere), and where they
    are known [b, T] bool: the response positions of rows whose sampler log-probs cover every completion
    token. A row's response positions, in order, are its completion tokens."""
    sampled = torch.zeros(response.shape, dtype=torch.float32)
    known = torch.zeros(response.shape, dtype=torch.bool)
    for row, sample in enumerate(samples):
        if len(sample.sampled_logprobs) != len(sample.completion_ids):
            continue
        positions = response[row].nonzero().squeeze(-1)
        sampled[row, positions] = torch.tensor(sample.sampled_logprobs, dtype=torch.float32)
        known[row, positions] = True
    return sampled, known


def sampler_gap(logp: torch.Tensor, response: torch.Tensor, samples: Sequence[TurnSample]) -> tuple[float, int]:
    """Summed |trainer - sampler| log-prob over the response tokens [b, T] of rows with sampler log-probs,
    and how many tokens that is."""
    sampled, known = sampled_logprobs(response, samples)
    gap = torch.where(known, (logp.detach().float() - sampled).abs(), torch.zeros_like(sampled))
    return float(gap.sum()), int(known.sum())


def importance_weights(old_logp: torch.Tensor, response: torch.Tensor, samples: Sequence[TurnSample],
                       is_threshold: float | None) -> tuple[torch.Tensor | None, ImportanceStats]:
    """The TIS weight of each response token [b, T] (1 where the sampler's log-prob is unknown; None when
    `is_threshold` is None: no correction) and the trainer/sampler statistics, which are kept either way."""
    sampled, known = sampled_logprobs(response, samples)
    tis = truncated_importance_weights(old_logp.float(), sampled, known,
                                       math.inf if is_threshold is None else is_threshold)
    if is_threshold is None:
        return None, tis.stats
    return torch.where(known, tis.weights, torch.ones_like(tis.weights)).to(old_logp.dtype), tis.stats


def grpo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, samples: Sequence[TurnSample],  # noqa: PLR0913 (keyword-only settings of one update)
                settings: LossSettings, *, pad_id: int, micro_batch_size: int, temperature: float,
                max_grad_norm: float, share_prefix: bool = True, is_threshold: float | None = None,
                sort_by_prompt: bool = False) -> UpdateResult:
    """One optimizer step over all `samples`, accumulated in micro-batches.

    The loss of each micro-batch is aggregated against the whole batch's token and sequence
    counts, so the accumulated gradient equals the full batch's (token-mean over the batch).
    `share_prefix=False` runs every full sequence (needed with gradient checkpointing, which
    turns the key/value cache off). `is_threshold` multiplies each token's policy-gradient term by its
    truncated importance weight against the sampler's log-probs (None: no correction). `sort_by_prompt` cuts the
    micro-batches from the samples sorted by prompt rather than in the order they came: turns of one episode, task
    and domain then sit together, so each micro-batch shares a longer prefix, and none mixes two domains' prompts
    (a micro-batch with no common prefix runs full sequences, with vocabulary-sized logits at every position).
    The gradient is the same function either way; only the order of floating-point sums differs.
    """
    if not samples:
        raise ValueError("grpo_update needs at least one sample")
    if sort_by_prompt:
        samples = sorted(samples, key=lambda sample: sample.prompt_ids)
    total_tokens = sum(len(s.completion_ids) for s in samples)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_total, clipped, gap, gap_tokens, importance = 0.0, 0.0, 0.0, 0, ImportanceStats()
    for start in range(0, len(samples), micro_batch_size):
        micro = samples[start : start + micro_batch_size]
        if share_prefix:
            logp, response = shared_prefix_logprobs(model, micro, pad_id, temperature)  # [batch, tokens-1]
        else:
            ids, attention, response = batch_tensors(micro, pad_id)
            logp = token_logprobs(model, ids, attention, temperature)
        advantages = torch.tensor([s.advantage for s in micro], dtype=torch.float32)[:, None] * response
        weights, stats = importance_weights(logp.detach(), response, micro, is_threshold)
        importance = importance.combine(stats)
        out = policy_loss(logp, logp.detach(), advantages, response, settings, token_weights=weights,
                          total_tokens=total_tokens, total_sequences=len(samples))
        out.loss.backward()
        micro_gap, micro_tokens = sampler_gap(logp, response, micro)
        gap, gap_tokens = gap + micro_gap, gap_tokens + micro_tokens
        loss_total += out.metrics.loss
        clipped += out.metrics.clip_fraction * out.metrics.response_tokens
    trainable = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return UpdateResult(loss_total, grad_norm, total_tokens, len(samples), clipped / max(total_tokens, 1),
                        gap / gap_tokens if gap_tokens else float("nan"), importance)
