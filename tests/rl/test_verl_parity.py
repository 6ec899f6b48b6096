"""Our GRPO math gives verl 0.9.1's numbers on the same random tensors.

verl is not in tbx's .venv; these tests (marker `verl`) run in .venv-vllm, the venv of vLLM's CPU
build and verl's trainer (scripts/setup_vllm.sh), where scripts/test.sh runs them. Compared: the GRPO
advantage, every loss aggregation mode, the vanilla (dual-clip) policy loss with its metrics and
gradients, both KL estimators, the actor's total loss as verl's `ppo_loss` composes it, and the off-policy
correction: the token-level truncated importance weights and their metrics (verl's
`rollout_corr_helper.compute_rollout_correction_and_rejection_mask` with `rollout_is="token"`) and the
policy loss with those weights (`compute_policy_loss_vanilla(..., rollout_is_weights=...)`).
The one documented departure (a group of one gets advantage 0) is asserted as such.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.verl

core = pytest.importorskip(
    "verl.trainer.ppo.core_algos",
    reason="verl is not installed in this venv: scripts/test.sh runs the verl tests in .venv-vllm")
actor_config = pytest.importorskip("verl.workers.config", reason="verl.workers.config did not import")
rollout_corr = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper",
                                   reason="verl.trainer.ppo.rollout_corr_helper did not import")

from tbx.rl.correction import truncated_importance_weights  # noqa: E402
from tbx.rl.grpo import (  # noqa: E402  (after the skip, so the module imports only where verl does)
    LOSS_AGG_MODES,
    LossSettings,
    aggregate_loss,
    broadcast_to_tokens,
    group_advantages,
    kl_estimate,
    policy_loss,
)

# float32 is what training uses; float64 shows the remaining gap is rounding, not a formula.
# verl adds 1e-8 to some denominators where we clamp counts at 1: ~1e-9 relative, hence 1e-8 in float64.
TOLERANCE = {torch.float32: 2e-6, torch.float64: 1e-8}
DTYPES = list(TOLERANCE)
CLIPS = [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, 10.0)]  # (low, high, dual-clip c)


def report(name: str, ours: torch.Tensor, theirs: torch.Tensor, dtype: torch.dtype) -> None:
    diff = (ours.detach().double() - theirs.detach().double()).abs().max().item()
    print(f"parity {name} [{str(dtype).removeprefix('torch.')}]: max|diff| = {diff:.3g}")
    assert diff <= TOLERANCE[dtype], f"{name}: ours and verl differ by {diff}"


def make_batch(dtype: torch.dtype, seed: int = 0, groups: int = 6, size: int = 4, tokens: int = 12):
    """Episodes in shuffled groups with ragged responses; one group has zero variance; one row is empty."""
    gen = torch.Generator().manual_seed(seed)
    batch = groups * size
    ids = np.random.default_rng(seed).permutation(np.repeat([f"task-{g}" for g in range(groups)], size))
    rewards = torch.randint(0, 2, (batch,), generator=gen).to(dtype)
    rewards[ids == "task-0"] = 1.0  # a zero-variance group
    lengths = torch.randint(1, tokens + 1, (batch,), generator=gen)
    lengths[3] = 0  # a response with no policy token (e.g. all tool output)
    mask = torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)  # [batch, tokens]
    logp = -torch.rand(batch, tokens, generator=gen, dtype=dtype) * 3
    old_logp = logp + torch.randn(batch, tokens, generator=gen, dtype=dtype) * 0.4  # many ratios clipped
    old_logp[::2, 0] = logp[::2, 0] - 2.0  # ratio e^2 = 7.4 > c: dual-clip where the advantage is negative
    ref_logp = logp + torch.randn(batch, tokens, generator=gen, dtype=dtype) * 2.0
    entropy = torch.rand(batch, tokens, generator=gen, dtype=dtype) * 4
    return ids, rewards, mask, logp, old_logp, ref_logp, entropy


def verl_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's outcome-reward layout: the score on the last response token (`rm_scores`)."""
    scores = torch.zeros(mask.shape, dtype=rewards.dtype)
    last = (mask.sum(-1) - 1).clamp(min=0)
    scores[torch.arange(len(rewards)), last] = rewards
    return scores


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_grpo_advantages_match(dtype, norm_by_std, kind):
    ids, rewards, mask, *_ = make_batch(dtype)
    if kind == "continuous":
        rewards = torch.rand(len(rewards), generator=torch.Generator().manual_seed(1), dtype=dtype) * 5 - 2
    theirs, _ = core.compute_grpo_outcome_advantage(verl_token_rewards(rewards, mask), mask.to(dtype), ids,
                                                    norm_adv_by_std_in_grpo=norm_by_std)
    ours = broadcast_to_tokens(group_advantages(rewards, list(ids), norm_by_std=norm_by_std), mask)
    report(f"advantage {kind} norm_by_std={norm_by_std}", ours, theirs, dtype)


def test_singleton_group_is_our_documented_departure():
    rewards, mask = torch.tensor([1.0, 0.0, 1.0]), torch.ones(3, 2, dtype=torch.bool)
    ids = np.array(["a", "a", "alone"])
    theirs, _ = core.compute_grpo_outcome_advantage(verl_token_rewards(rewards, mask), mask.float(), ids)
    ours = broadcast_to_tokens(group_advantages(rewards, list(ids)), mask)
    assert torch.allclose(ours[:2], theirs[:2], atol=1e-6)  # the real group agrees
    assert theirs[2, 0].item() == pytest.approx(1.0, abs=1e-5)  # verl: 1 / (1 + eps)
    assert ours[2, 0].item() == 0.0  # ours: no group, no relative signal


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregation_matches(dtype, mode):
    _, _, mask, logp, *_ = make_batch(dtype)
    loss = logp * 3 + 1
    report(f"agg_loss {mode}", aggregate_loss(loss, mask, mode),
           core.agg_loss(loss, mask, mode), dtype)
    # With global totals, as gradient accumulation over micro-batches uses them.
    tokens, sequences = int(mask.sum()) + 7, int((mask.sum(-1) > 0).sum()) + 2
    report(f"agg_loss {mode} with global totals",
           aggregate_loss(loss, mask, mode, total_tokens=tokens, total_sequences=sequences),
           core.agg_loss(loss, mask, mode, batch_num_tokens=tokens, global_batch_size=sequences), dtype)


def verl_config(mode: str, low: float, high: float, c: float, **extra):
    return actor_config.ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1,
                                    clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c,
                                    loss_agg_mode=mode, **extra)


def token_advantages(ids, rewards, mask):
    return broadcast_to_tokens(group_advantages(rewards, list(ids)), mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: f"clip{c[0]}-{c[1]}-c{c[2]}")
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_vanilla_policy_loss_matches(dtype, clip, mode):
    ids, rewards, mask, logp, old_logp, *_ = make_batch(dtype, seed=2)
    advantages = token_advantages(ids, rewards, mask)
    low, high, c = clip
    ours_logp, their_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    settings = LossSettings(clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c, loss_agg_mode=mode)
    ours = policy_loss(ours_logp, old_logp, advantages, mask, settings)
    theirs, metrics = core.get_policy_loss_fn("vanilla")(old_logp, their_logp, advantages, mask, mode,
                                                          verl_config(mode, low, high, c))
    ours.loss.backward()
    theirs.backward()
    name = f"policy_loss {mode} {low}/{high}/c={c}"
    report(name, ours.loss, theirs, dtype)
    report(f"{name} d/dlogp", ours_logp.grad, their_logp.grad, dtype)
    for our_key, their_key in (("clip_fraction", "actor/pg_clipfrac"), ("approx_kl", "actor/ppo_kl"),
                               ("clip_fraction_lower", "actor/pg_clipfrac_lower")):
        report(f"{name} {our_key}", torch.tensor(getattr(ours.metrics, our_key), dtype=torch.float64),
               torch.tensor(metrics[their_key], dtype=torch.float64), dtype)
    assert 0.05 < ours.metrics.clip_fraction < 0.95  # the batch really exercises clipping
    if c == 3.0:
        assert ours.metrics.clip_fraction_lower > 0  # and dual-clip


def test_default_settings_are_verls_actor_defaults():
    ours, theirs = LossSettings(), verl_config("token-mean", 0.2, 0.2, 3.0)
    defaults = actor_config.ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1)
    assert (ours.clip_ratio_low, ours.clip_ratio_high) == (defaults.clip_ratio_low, defaults.clip_ratio_high)
    assert ours.clip_ratio_c == defaults.get("clip_ratio_c", 3.0) == theirs.clip_ratio_c
    assert ours.loss_agg_mode == defaults.loss_agg_mode
    assert ours.kl_estimator == defaults.kl_loss_type and (ours.kl_coef > 0) == defaults.use_kl_loss
    assert ours.entropy_coeff == defaults.entropy_coeff


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", ["low_var_kl", "kl"])
def test_kl_estimators_match(dtype, estimator):
    _, _, _, logp, _, ref_logp, _ = make_batch(dtype, seed=3)
    ref_logp = ref_logp.clone()
    ref_logp[0, :4] = logp[0, :4] + torch.tensor([-30.0, 30.0, 12.0, -12.0], dtype=dtype)  # hit the clamps
    report(f"kl_penalty {estimator}", kl_estimate(logp, ref_logp, estimator),
           core.kl_penalty(logp, ref_logp, estimator), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_total_actor_loss_matches_verl_ppo_loss_composition(dtype, mode):
    """verl.workers.utils.losses.ppo_loss: pg_loss - entropy_coeff * agg(entropy) + kl_coef * agg(kl)."""
    ids, rewards, mask, logp, old_logp, ref_logp, entropy = make_batch(dtype, seed=4)
    advantages = token_advantages(ids, rewards, mask)
    settings = LossSettings(clip_ratio_high=0.28, loss_agg_mode=mode, kl_coef=0.05, entropy_coeff=0.01)
    ours_logp, their_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours = policy_loss(ours_logp, old_logp, advantages, mask, settings, ref_logp=ref_logp, entropy=entropy)
    config = verl_config(mode, 0.2, 0.28, 3.0, entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.05)
    pg_loss, _ = core.get_policy_loss_fn("vanilla")(old_logp, their_logp, advantages, mask, mode, config)
    kl_loss = core.agg_loss(core.kl_penalty(their_logp, ref_logp, config.kl_loss_type), mask, mode)
    entropy_loss = core.agg_loss(entropy, mask, mode)
    theirs = pg_loss - config.entropy_coeff * entropy_loss + kl_loss * config.kl_loss_coef
    ours.loss.backward()
    theirs.backward()
    report(f"total loss {mode}", ours.loss, theirs, dtype)
    report(f"total loss {mode} d/dlogp", ours_logp.grad, their_logp.grad, dtype)
    report(f"kl_to_ref {mode}", torch.tensor(ours.metrics.kl_to_ref, dtype=torch.float64), kl_loss, dtype)


def sampler_logprobs(old_logp: torch.Tensor, seed: int) -> torch.Tensor:
    """The rollout engine's log-probs: the trainer's plus noise wide enough that many ratios pass 2 and 5."""
    gen = torch.Generator().manual_seed(seed)
    return old_logp + torch.randn(old_logp.shape, generator=gen, dtype=old_logp.dtype) * 0.8


# ours (ImportanceStats.as_metrics) -> verl 0.9.1 (compute_rollout_correction_and_rejection_mask's metrics)
TIS_METRICS = {"is_weight_mean": "rollout_corr/rollout_is_mean", "is_weight_max": "rollout_corr/rollout_is_max",
               "is_clipped_fraction": "rollout_corr/rollout_is_ratio_fraction_high",
               "mismatch_kl": "rollout_corr/kl", "mismatch_k3_kl": "rollout_corr/k3_kl"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threshold", [1.5, 2.0, 5.0])
def test_token_tis_weights_and_metrics_match(dtype, threshold):
    _, _, mask, _, old_logp, *_ = make_batch(dtype, seed=5)
    rollout_logp = sampler_logprobs(old_logp, seed=6)
    ours = truncated_importance_weights(old_logp, rollout_logp, mask, threshold)
    weights, _, metrics = rollout_corr.compute_rollout_correction_and_rejection_mask(
        old_logp, rollout_logp, mask.to(dtype), rollout_is="token", rollout_is_threshold=threshold)
    report(f"TIS weights threshold={threshold}", ours.weights, weights.batch["rollout_is_weights"], dtype)
    for our_key, their_key in TIS_METRICS.items():
        report(f"TIS {our_key} threshold={threshold}", torch.tensor(ours.stats.as_metrics()[our_key], dtype=torch.float64),
               torch.tensor(metrics[their_key], dtype=torch.float64), dtype)
    assert 0 < ours.stats.clipped < ours.stats.tokens / 2  # the batch really exercises the cap


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_policy_loss_with_tis_weights_matches(dtype, mode):
    """verl multiplies `rollout_is_weights` into the per-token loss after the (dual) clip, before `agg_loss`."""
    ids, rewards, mask, logp, old_logp, *_ = make_batch(dtype, seed=7)
    advantages = token_advantages(ids, rewards, mask)
    rollout_logp = sampler_logprobs(old_logp, seed=8)
    weights = truncated_importance_weights(old_logp, rollout_logp, mask, 2.0).weights
    their_weights, _ = rollout_corr.compute_rollout_correction_weights(old_logp - rollout_logp, mask.to(dtype),
                                                                       rollout_is="token", rollout_is_threshold=2.0)
    ours_logp, their_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours = policy_loss(ours_logp, old_logp, advantages, mask, LossSettings(loss_agg_mode=mode), token_weights=weights)
    theirs, _ = core.get_policy_loss_fn("vanilla")(old_logp, their_logp, advantages, mask, mode,
                                                   verl_config(mode, 0.2, 0.2, 3.0), rollout_is_weights=their_weights)
    ours.loss.backward()
    theirs.backward()
    report(f"policy_loss with TIS {mode}", ours.loss, theirs, dtype)
    report(f"policy_loss with TIS {mode} d/dlogp", ours_logp.grad, their_logp.grad, dtype)
    unweighted = policy_loss(logp, old_logp, advantages, mask, LossSettings(loss_agg_mode=mode)).loss
    assert abs(unweighted.item() - ours.loss.item()) > 1e-3  # the weights really change the loss
