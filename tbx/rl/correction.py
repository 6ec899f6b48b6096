"""Off-policy correction: the token-level truncated importance weight (TIS) between the trainer and the sampler.

The rollout engine (vLLM) and the trainer compute different log-probs for the same weights and tokens
(other kernels, other precision), and with asynchronous rollouts the sampler's weights are older than
the trainer's. The policy gradient is an expectation under the trainer's old policy; the tokens were
drawn from the sampler's. Each token's policy-gradient term is therefore multiplied by

    w = min(exp(old_logp - sampler_logp), is_threshold)    (detached; 0 outside the response mask)

the importance ratio old / sampler truncated from above, so a token the sampler found much less likely
than the trainer does cannot blow up the update. Pure torch; no I/O.

Reference: verl 0.9.1 `verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_weights` with
`rollout_is="token"` and a single float `rollout_is_threshold` (TIS; `algorithm.rollout_correction`),
its metrics `compute_is_metrics` (`rollout_is_mean`, `rollout_is_max`, `rollout_is_ratio_fraction_high`)
and `compute_offpolicy_metrics` (`kl`, `k3_kl`; older verl logged these as `mismatch_kl` and
`mismatch_k3_kl`); verl multiplies the weight into the per-token policy-gradient loss before
aggregation (`core_algos.compute_policy_loss_vanilla`), as `tbx.rl.grpo.policy_loss` does with
`token_weights`. SkyRL's `off_policy_correction.tis_ratio_type: token` is the same weight. The numbers
agree with verl's (tests/rl/test_verl_parity.py). Where we depart, on purpose:
- `is_threshold` must be > 1 (verl accepts any positive value): a cap at or below 1 lowers the weight
  of every token the trainer finds at least as likely as the sampler did, which biases the gradient
  instead of bounding its variance.
- Inputs outside the mask are zeroed before any arithmetic (verl multiplies by the mask, so NaN in
  padding would survive), and the k3 log-ratio is clamped to [-20, 20] like the weight's (verl's k3 is
  unclamped and overflows to inf beyond ~88 in float32).
- A batch without a response token gives NaN metrics and all-zero weights (verl raises).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tbx.rl.grpo import LOG_RATIO_CLAMP, as_bool_mask, check_same_shape


@dataclass(frozen=True)
class ImportanceStats:
    """Sums over the response tokens of one batch (or several: `combine`), so micro-batches add up."""

    tokens: int = 0  # response tokens with a sampler log-prob
    weight_sum: float = 0.0  # of the truncated weights
    weight_max: float = float("nan")  # largest truncated weight (nan: no token)
    clipped: int = 0  # tokens whose raw ratio exceeded the threshold (verl: raw > threshold)
    log_gap_sum: float = 0.0  # of sampler_logp - old_logp (k1 estimate of KL(sampler || trainer))
    k3_sum: float = 0.0  # of exp(r) - r - 1, r = old_logp - sampler_logp (k3 estimate, >= 0)

    def combine(self, other: ImportanceStats) -> ImportanceStats:
        if not other.tokens:
            return self
        if not self.tokens:
            return other
        return ImportanceStats(self.tokens + other.tokens, self.weight_sum + other.weight_sum,
                               max(self.weight_max, other.weight_max), self.clipped + other.clipped,
                               self.log_gap_sum + other.log_gap_sum, self.k3_sum + other.k3_sum)

    def as_metrics(self) -> dict[str, float]:
        """Per-step metrics (verl 0.9.1 names in brackets, under `rollout_corr/`); nan without tokens."""
        count = self.tokens or math.nan
        return {"is_weight_mean": self.weight_sum / count,  # [rollout_is_mean]
                "is_weight_max": self.weight_max,  # [rollout_is_max]
                "is_clipped_fraction": self.clipped / count,  # [rollout_is_ratio_fraction_high]
                "mismatch_kl": self.log_gap_sum / count,  # [kl]
                "mismatch_k3_kl": self.k3_sum / count}  # [k3_kl]


@dataclass(frozen=True)
class ImportanceWeights:
    weights: torch.Tensor  # [batch, tokens] detached; 0 outside the response mask
    stats: ImportanceStats


def check_is_threshold(threshold: float) -> None:
    if not threshold > 1.0:
        raise ValueError(f"is_threshold is {threshold}; a truncation at or below 1 down-weights every token the "
                         "trainer finds at least as likely as the sampler: use a value > 1 (verl's default 2.0)")


def truncated_importance_weights(old_logp: torch.Tensor, sampler_logp: torch.Tensor,
                                 response_mask: torch.Tensor, threshold: float) -> ImportanceWeights:
    """Token-level TIS weights min(exp(old_logp - sampler_logp), threshold) and their statistics.

    All tensors are [batch, tokens]: `old_logp` the trainer's log-prob of each sampled token before
    the update, `sampler_logp` the rollout engine's, `response_mask` 1 where the policy generated the
    token and the sampler's log-prob is known. Weights are detached and 0 outside the mask.
    """
    check_is_threshold(threshold)
    mask = as_bool_mask(response_mask)
    check_same_shape(mask, old_logp=old_logp, sampler_logp=sampler_logp)
    zero = torch.zeros((), dtype=old_logp.dtype, device=old_logp.device)
    log_ratio = torch.where(mask, old_logp.detach() - sampler_logp.detach(), zero)  # [batch, tokens]
    safe = torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    raw = torch.where(mask, torch.exp(safe), zero)  # [batch, tokens]
    weights = raw.clamp(max=threshold)
    tokens = int(mask.sum())
    if not tokens:
        return ImportanceWeights(weights, ImportanceStats())
    k3 = torch.exp(safe) - safe - 1  # 0 outside the mask, where safe is 0
    stats = ImportanceStats(tokens=tokens, weight_sum=float(weights.sum()),
                            weight_max=float(weights.masked_fill(~mask, -math.inf).max()),
                            clipped=int(((raw > threshold) & mask).sum()),
                            log_gap_sum=float(-log_ratio.sum()), k3_sum=float(k3.sum()))
    return ImportanceWeights(weights, stats)
