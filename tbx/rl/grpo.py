"""GRPO math: group-centred advantages, the clipped policy-gradient loss, loss aggregation, KL.

Pure torch functions over tensors; no I/O, no model, no randomness. The training loop (native
trainer or the verl bridge) computes log-probabilities and calls these.

Reference: verl 0.9.1 `verl.trainer.ppo.core_algos` (`compute_grpo_outcome_advantage`,
`compute_policy_loss_vanilla`, `agg_loss`, `kl_penalty`) and how `verl.workers.utils.losses.
ppo_loss` combines them (pg_loss - entropy_coeff * entropy + kl_coef * kl). The numbers agree with
verl to float precision (tests/rl/test_verl_parity.py). Where we depart, on purpose:
- A group of one episode gets advantage 0 (verl: reward / (1 + epsilon), i.e. mean 0 and std 1):
  one episode has nothing to be compared with, so it carries no relative signal.
- A batch with no response token at all aggregates to a loss of 0 (verl divides by zero: NaN).
- Rewards arrive as one scalar per episode (terminal-state verdict), not as a token-level tensor.
- Inputs outside the response mask are zeroed before any arithmetic, so NaN/inf in padding
  reaches neither the loss nor the gradient (verl only guards the final sum).
Like verl, the group std is the unbiased (n - 1) sample std, log-ratios are clamped to [-20, 20]
before `exp`, the k3 estimator is clamped to [-10, 10], and dual-clip (clip_ratio_c, default 3.0)
bounds the loss of negative-advantage tokens whose ratio has exploded.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, get_args

import torch

from tbx.config import LossAggMode
from tbx.errors import ConfigError

KlEstimator = Literal["low_var_kl", "kl"]
LOSS_AGG_MODES: tuple[str, ...] = tuple(mode.value for mode in LossAggMode)  # the config's `grpo.loss_agg_mode`
KL_ESTIMATORS: tuple[str, ...] = get_args(KlEstimator)
LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: beyond it the ratio is meaningless and overflows in bf16
K3_CLAMP = 10.0  # verl clamps the k3 estimate to [-10, 10] for stability


@dataclass(frozen=True)
class LossSettings:
    """How the policy loss is formed (verl actor keys in brackets)."""

    clip_ratio_low: float = 0.2  # ratio floor 1 - low for positive advantages [clip_ratio_low]
    clip_ratio_high: float = 0.2  # ratio ceiling 1 + high [clip_ratio_high]
    clip_ratio_c: float | None = 3.0  # dual-clip bound for negative advantages; None = off [clip_ratio_c]
    loss_agg_mode: LossAggMode | str = LossAggMode["token-mean"]  # [loss_agg_mode]
    kl_coef: float = 0.0  # weight of the KL-to-reference term; 0 = no reference needed [kl_loss_coef]
    kl_estimator: KlEstimator = "low_var_kl"  # [kl_loss_type]
    entropy_coeff: float = 0.0  # entropy bonus weight [entropy_coeff]

    def __post_init__(self) -> None:
        source = "GRPO loss settings"
        if not 0.0 <= self.clip_ratio_low < 1.0:
            raise ConfigError(source, "clip_ratio_low",
                              f"is {self.clip_ratio_low}; the floor 1 - low must be > 0",
                              "use a value in [0, 1) (typical 0.2)")
        if self.clip_ratio_high < 0.0:
            raise ConfigError(source, "clip_ratio_high", f"is {self.clip_ratio_high}",
                              "use a value >= 0 (typical 0.2; DAPO's clip-higher uses 0.28)")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ConfigError(source, "clip_ratio_c", f"is {self.clip_ratio_c}; dual-clip needs a bound > 1",
                              "use 3.0 (verl's default) or null to turn dual-clip off")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ConfigError(source, "loss_agg_mode", f"'{self.loss_agg_mode}' is unknown",
                              f"use one of {list(LOSS_AGG_MODES)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ConfigError(source, "kl_estimator", f"'{self.kl_estimator}' is unknown",
                              f"use one of {list(KL_ESTIMATORS)}")
        for name in ("kl_coef", "entropy_coeff"):
            if getattr(self, name) < 0.0:
                raise ConfigError(source, name, f"is {getattr(self, name)}", "use a value >= 0")


@dataclass(frozen=True)
class LossMetrics:
    """Plain floats for logging; None where the input was not given."""

    loss: float  # the total that is back-propagated
    pg_loss: float  # the clipped policy-gradient term alone
    clip_fraction: float  # response tokens whose ratio was clipped (verl actor/pg_clipfrac)
    clip_fraction_lower: float  # tokens hit by the dual-clip bound (verl actor/pg_clipfrac_lower)
    approx_kl: float  # mean of old_logp - logp over response tokens (verl actor/ppo_kl)
    kl_to_ref: float | None  # aggregated KL estimate to the reference policy
    entropy: float | None  # mean entropy over response tokens
    response_tokens: int

    def as_dict(self) -> dict[str, float]:
        return {key: float(value) for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class PolicyLoss:
    loss: torch.Tensor  # [] scalar, differentiable
    metrics: LossMetrics


def _group_index(group_ids: Sequence[Hashable], count: int) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to 0..n_groups-1 in order of first appearance."""
    if len(group_ids) != count:
        raise ValueError(f"group_ids has {len(group_ids)} entries but rewards has {count}: "
                         "give one id per episode")
    first_seen: dict[Hashable, int] = {}
    index = [first_seen.setdefault(gid, len(first_seen)) for gid in group_ids]
    return torch.tensor(index, dtype=torch.long), len(first_seen)


def group_advantages(rewards: torch.Tensor, group_ids: Sequence[Hashable], *, norm_by_std: bool = True,
                     epsilon: float = 1e-6) -> torch.Tensor:
    """Per-episode advantage: reward minus its group's mean, divided by (group std + epsilon).

    `rewards` is [episodes]; `group_ids[i]` names episode i's group (e.g. the task id or the
    group's position in the step). `norm_by_std=False` only centres (Dr. GRPO). The std is the
    unbiased sample std, as in verl; a zero-variance group therefore gets all-zero advantages.
    A group of one episode gets 0. Returns [episodes], detached from any graph.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [episodes], got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError(f"rewards must be finite; got {rewards.tolist()} (error episodes carry no reward: "
                         "re-run them instead of passing NaN)")
    rewards = rewards.detach() if rewards.is_floating_point() else rewards.detach().float()
    index, n_groups = _group_index(group_ids, rewards.numel())
    index = index.to(rewards.device)
    counts = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(
        0, index, torch.ones_like(rewards))  # [groups]
    means = torch.zeros_like(counts).index_add_(0, index, rewards) / counts  # [groups]
    centred = rewards - means[index]  # [episodes]; exactly 0 for a group of one
    if norm_by_std:
        squares = torch.zeros_like(counts).index_add_(0, index, centred * centred)  # [groups]
        std = torch.sqrt(squares / (counts - 1).clamp(min=1))  # [groups]; 0 for a group of one
        centred = centred / (std[index] + epsilon)
    return centred


def broadcast_to_tokens(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Give every response token its episode's advantage; masked (prompt/tool/user/pad) tokens 0.

    advantages [batch], response_mask [batch, tokens] -> [batch, tokens].
    """
    mask = as_bool_mask(response_mask)
    if advantages.dim() != 1 or advantages.shape[0] != mask.shape[0]:
        raise ValueError(f"advantages must be [batch]={mask.shape[0]}, got shape {tuple(advantages.shape)}")
    return advantages.unsqueeze(-1) * mask.to(advantages.dtype)  # [batch, tokens]


def as_bool_mask(response_mask: torch.Tensor) -> torch.Tensor:
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be 2-D [batch, tokens], got shape {tuple(response_mask.shape)}")
    if response_mask.dtype == torch.bool:
        return response_mask
    if not ((response_mask == 0) | (response_mask == 1)).all():
        raise ValueError("response_mask must hold only 0 and 1 (1 = a token the policy generated)")
    return response_mask.bool()


def check_same_shape(mask: torch.Tensor, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        if tensor.shape != mask.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but response_mask has "
                             f"{tuple(mask.shape)}: both must be [batch, tokens]")


def aggregate_loss(loss_per_token: torch.Tensor, response_mask: torch.Tensor,
                   mode: LossAggMode = "token-mean", *, total_tokens: int | None = None,
                   total_sequences: int | None = None) -> torch.Tensor:
    """Reduce a [batch, tokens] loss to a scalar over response tokens only.

    - token-mean: sum over all response tokens / number of response tokens (long answers weigh
      more; the reference recipe and verl's default).
    - seq-mean-token-mean: mean over tokens within each sequence, then mean over sequences.
    - seq-mean-token-sum: sum over tokens within each sequence, then mean over sequences.
    - token-sum: sum over all response tokens.
    Sequences without a response token do not count in the sequence means. With gradient
    accumulation over micro-batches, pass the whole batch's `total_tokens` (token-mean) or
    `total_sequences` (seq-mean-*) so the summed micro-batch losses equal the full-batch loss.
    Masked positions are zeroed with `where`, so NaN/inf there cannot leak into the loss or the
    gradient. An empty batch gives 0.
    """
    mask = as_bool_mask(response_mask)
    check_same_shape(mask, loss_per_token=loss_per_token)
    masked = torch.where(mask, loss_per_token, torch.zeros_like(loss_per_token))  # [batch, tokens]
    if mode == "token-sum":
        return masked.sum()
    if mode == "token-mean":
        denominator = mask.sum() if total_tokens is None else torch.tensor(total_tokens, device=mask.device)
        return masked.sum() / denominator.clamp(min=1).to(masked.dtype)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode '{mode}': use one of {list(LOSS_AGG_MODES)}")
    seq_tokens = mask.sum(dim=-1)  # [batch]
    seq_loss = masked.sum(dim=-1)  # [batch]
    if mode == "seq-mean-token-mean":
        seq_loss = seq_loss / seq_tokens.clamp(min=1).to(masked.dtype)
    sequences = (seq_tokens > 0).sum() if total_sequences is None else torch.tensor(total_sequences,
                                                                                       device=mask.device)
    return seq_loss.sum() / sequences.clamp(min=1).to(masked.dtype)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor,
                estimator: KlEstimator = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled-token log-probs [batch, tokens].

    `kl` is k1 = logp - ref_logp (unbiased, high variance, can be negative); `low_var_kl` is
    Schulman's k3 = exp(ref - logp) - (ref - logp) - 1 (unbiased, always >= 0, low variance).
    """
    if estimator == "kl":
        return logp - ref_logp
    if estimator == "low_var_kl":
        log_ratio = torch.clamp(ref_logp - logp, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-K3_CLAMP, max=K3_CLAMP)
    raise ValueError(f"unknown KL estimator '{estimator}': use one of {list(KL_ESTIMATORS)}")


def _zero_outside(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, torch.zeros_like(values))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    count = int(mask.sum())
    return float(torch.where(mask, values, torch.zeros_like(values)).sum()) / count if count else 0.0


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       settings: LossSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token, loss = max(-A r, -A clip(r, 1-low, 1+high)), r = exp(logp - old).

    With dual-clip, a negative-advantage token's loss is also capped at -A * clip_ratio_c.
    Returns (loss [batch, tokens], clipped [batch, tokens] bool, dual_clipped [batch, tokens] bool).
    """
    log_ratio = torch.clamp(logp - old_logp, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)  # [batch, tokens]
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - settings.clip_ratio_low, 1 + settings.clip_ratio_high)
    loss = torch.maximum(unclipped, clipped)  # [batch, tokens]
    was_clipped = clipped > unclipped
    dual_clipped = torch.zeros_like(was_clipped)
    if settings.clip_ratio_c is not None:
        bound = -advantages * settings.clip_ratio_c
        negative = advantages < 0
        dual_clipped = (loss > bound) & negative
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return loss, was_clipped, dual_clipped


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,  # noqa: PLR0913 (optional terms are keyword-only, as verl names them)
                response_mask: torch.Tensor, settings: LossSettings | None = None, *,
                ref_logp: torch.Tensor | None = None, entropy: torch.Tensor | None = None,
                token_weights: torch.Tensor | None = None, total_tokens: int | None = None,
                total_sequences: int | None = None) -> PolicyLoss:
    """The GRPO actor loss: clipped policy gradient - entropy_coeff * entropy + kl_coef * KL.

    All tensors are [batch, tokens]: `logp` the current policy's log-prob of each sampled token
    (carries the graph), `old_logp` the sampling policy's, `advantages` from `broadcast_to_tokens`,
    `ref_logp` the reference policy's (required when settings.kl_coef > 0), `entropy` the
    policy's per-token entropy (optional; only a metric unless entropy_coeff > 0), `token_weights`
    a detached per-token factor on the policy-gradient term only, e.g. the truncated importance weights
    of `tbx.rl.correction` (verl's `rollout_is_weights`; None: the loss is unchanged). Tokens outside
    `response_mask` contribute nothing and receive zero gradient.
    """
    settings = settings or LossSettings()
    mask = as_bool_mask(response_mask)
    check_same_shape(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    # Zero every input outside the mask first: a NaN in padding would otherwise turn the zero
    # gradient of `where` into 0 * NaN = NaN on its way back into the model.
    logp, old_logp, advantages = (_zero_outside(tensor, mask)
                                  for tensor in (logp, old_logp.detach(), advantages.detach()))
    aggregate = dict(mode=settings.loss_agg_mode, total_tokens=total_tokens, total_sequences=total_sequences)
    token_loss, was_clipped, dual_clipped = clipped_token_loss(logp, old_logp, advantages, settings)
    if token_weights is not None:  # as verl: after the clip and dual-clip, before aggregation
        check_same_shape(mask, token_weights=token_weights)
        token_loss = token_loss * _zero_outside(token_weights.detach(), mask)
    pg_loss = aggregate_loss(token_loss, mask, **aggregate)
    loss = pg_loss
    kl_value = entropy_value = None
    if settings.kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef is {settings.kl_coef} but no ref_logp was given: pass the reference "
                         "policy's log-probs, or set kl_coef to 0")
    if ref_logp is not None:
        check_same_shape(mask, ref_logp=ref_logp)
        ref_logp = _zero_outside(ref_logp.detach(), mask)
        kl_loss = aggregate_loss(kl_estimate(logp, ref_logp, settings.kl_estimator), mask, **aggregate)
        if settings.kl_coef > 0:
            loss = loss + settings.kl_coef * kl_loss
        kl_value = float(kl_loss.detach())
    if entropy is not None:
        check_same_shape(mask, entropy=entropy)
        entropy = _zero_outside(entropy, mask)
        if settings.entropy_coeff > 0:
            loss = loss - settings.entropy_coeff * aggregate_loss(entropy, mask, **aggregate)
        entropy_value = _masked_mean(entropy.detach(), mask)
    log_ratio = torch.clamp(logp.detach() - old_logp, min=-LOG_RATIO_CLAMP,
                            max=LOG_RATIO_CLAMP)  # [batch, tokens]
    metrics = LossMetrics(
        loss=float(loss.detach()), pg_loss=float(pg_loss.detach()),
        clip_fraction=_masked_mean(was_clipped.float(), mask),
        clip_fraction_lower=_masked_mean(dual_clipped.float(), mask),
        approx_kl=_masked_mean(-log_ratio, mask), kl_to_ref=kl_value, entropy=entropy_value,
        response_tokens=int(mask.sum()))
    if not math.isfinite(metrics.loss):
        raise FloatingPointError(f"GRPO loss is not finite ({metrics.loss}); metrics {metrics.as_dict()}")
    return PolicyLoss(loss=loss, metrics=metrics)
