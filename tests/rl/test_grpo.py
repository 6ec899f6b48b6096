"""GRPO math on tiny tensors, each expected value worked by hand in the comment beside it."""

from __future__ import annotations

import math

import pytest
import torch

from tbx.errors import ConfigError
from tbx.rl.grpo import (
    LOSS_AGG_MODES,
    LossSettings,
    aggregate_loss,
    broadcast_to_tokens,
    group_advantages,
    kl_estimate,
    policy_loss,
)

SQRT_HALF = math.sqrt(0.5)  # 0.70711


def close(actual: torch.Tensor, expected: list | float, atol: float = 1e-5) -> bool:
    return torch.allclose(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol)


# --- advantages --------------------------------------------------------------------------------
def test_two_groups_of_two():
    # group a = [1, 0]: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.70711
    #   -> ±0.5 / 0.70711 = ±0.70711
    # group b = [0, 1]: the mirror image.
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), ["a", "a", "b", "b"])
    assert close(adv, [SQRT_HALF, -SQRT_HALF, -SQRT_HALF, SQRT_HALF])


def test_one_group_of_four_and_dr_grpo():
    # [1, 0, 0, 1]: mean 0.5, unbiased var = 4 * 0.25 / 3 = 1/3, std 0.57735 -> ±0.5 / 0.57735 = ±0.86603
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert close(group_advantages(rewards, ["t"] * 4), [0.86603, -0.86603, -0.86603, 0.86603])
    # Without std normalisation (Dr. GRPO) only the mean 0.5 is subtracted.
    assert close(group_advantages(rewards, ["t"] * 4, norm_by_std=False), [0.5, -0.5, -0.5, 0.5])


def test_interleaved_ids_zero_variance_and_singleton_groups():
    # x = [1, 0] -> ±0.70711; y = [1, 1] has std 0 -> 0 / (0 + eps) = 0; z = [1] alone -> 0 by definition.
    adv = group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]), ["x", "y", "x", "y", "z"])
    assert close(adv, [SQRT_HALF, 0.0, -SQRT_HALF, 0.0, 0.0])


def test_integer_rewards_and_continuous_rewards():
    # int [2, 0, 1] in one group: mean 1, std 1 -> [1, -1, 0] (up to eps).
    assert close(group_advantages(torch.tensor([2, 0, 1]), [0, 0, 0]), [1.0, -1.0, 0.0])


def test_advantage_input_errors():
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([1.0, float("nan")]), ["a", "a"])
    with pytest.raises(ValueError, match="one id per episode"):
        group_advantages(torch.tensor([1.0, 0.0]), ["a"])
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.ones(2, 2), ["a", "a"])


def test_broadcast_to_tokens_zeroes_masked_tokens():
    # advantage 2 on the first two tokens of row 0, -1 on the first token of row 1, 0 elsewhere.
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert close(broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask), [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"\[batch\]=2"):
        broadcast_to_tokens(torch.tensor([1.0]), mask)


# --- aggregation -------------------------------------------------------------------------------
LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])
# Response tokens: row 0 -> 1, 2; row 1 -> 4.
EXPECTED = {
    "token-mean": 7 / 3,  # (1 + 2 + 4) / 3 tokens
    "seq-mean-token-mean": 2.75,  # ((1 + 2) / 2 + 4 / 1) / 2 sequences = (1.5 + 4) / 2
    "seq-mean-token-sum": 3.5,  # ((1 + 2) + 4) / 2 sequences
    "token-sum": 7.0,  # 1 + 2 + 4
}
EXPECTED_GRAD = {
    "token-mean": [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]],  # each token 1 / 3
    "seq-mean-token-mean": [[0.25, 0.25, 0], [0.5, 0, 0]],  # 1 / (2 seqs * 2 tokens), 1 / (2 * 1)
    "seq-mean-token-sum": [[0.5, 0.5, 0], [0.5, 0, 0]],  # 1 / 2 sequences
    "token-sum": [[1, 1, 0], [1, 0, 0]],
}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_each_aggregation_mode_by_hand(mode):
    loss = torch.tensor(LOSS, requires_grad=True)
    value = aggregate_loss(loss, MASK, mode)
    assert value.item() == pytest.approx(EXPECTED[mode])
    value.backward()
    assert close(loss.grad, EXPECTED_GRAD[mode])


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_masked_nan_and_empty_rows_change_nothing(mode):
    # NaN/inf under the mask and an extra all-masked row leave the value and the real grads unchanged.
    loss = torch.tensor(LOSS + [[9.0, 9.0, 9.0]])
    loss[0, 2], loss[1, 1], loss[2, 0] = float("nan"), float("inf"), float("nan")
    loss.requires_grad_(True)
    mask = torch.cat([MASK, torch.zeros(1, 3, dtype=MASK.dtype)])
    value = aggregate_loss(loss, mask, mode)
    assert value.item() == pytest.approx(EXPECTED[mode])
    value.backward()
    assert close(loss.grad, EXPECTED_GRAD[mode] + [[0, 0, 0]])


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_with_global_totals_sum_to_the_full_batch(mode):
    loss, mask = torch.tensor(LOSS), MASK
    parts = sum(aggregate_loss(loss[i:i + 1], mask[i:i + 1], mode, total_tokens=3, total_sequences=2)
                for i in range(2))
    assert parts.item() == pytest.approx(EXPECTED[mode])


def test_empty_batch_aggregates_to_zero_and_bad_inputs_raise():
    for mode in LOSS_AGG_MODES:
        assert aggregate_loss(torch.ones(2, 3), torch.zeros(2, 3), mode).item() == 0.0
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate_loss(torch.ones(2, 3), MASK, "seq-mean")
    with pytest.raises(ValueError, match="only 0 and 1"):
        aggregate_loss(torch.ones(2, 3), MASK * 2, "token-mean")
    with pytest.raises(ValueError, match="both must be"):
        aggregate_loss(torch.ones(2, 2), MASK, "token-mean")


# --- clipping ----------------------------------------------------------------------------------
# One token, old_logp = 0 so ratio r = exp(logp); loss = max(-A r, -A clip(r, 0.8, 1.2)), dual-clip
# caps a negative-advantage loss at -A * 3. d loss / d logp = -A r when the unclipped term wins, else 0.
CLIP_CASES = [
    # (A, r, loss, clipped, dual_clipped, grad)
    (1.0, 1.1, -1.1, False, False, -1.1),  # inside the band
    (1.0, 1.199, -1.199, False, False, -1.199),  # just below the upper boundary: still live
    (1.0, 1.201, -1.2, True, False, 0.0),  # just above it: clipped to -1.2, no gradient
    (1.0, 0.7, -0.7, False, False, -0.7),  # below the band, A > 0: pessimistic max keeps -0.7
    (-1.0, 1.3, 1.3, False, False, 1.3),  # above the band, A < 0: max keeps 1.3
    (-1.0, 0.799, 0.8, True, False, 0.0),  # just below the lower boundary, A < 0: clipped to 0.8
    (-1.0, 0.801, 0.801, False, False, 0.801),  # just above it: live
    (-1.0, 4.0, 3.0, False, True, 0.0),  # ratio exploded, A < 0: dual-clip caps 4 at 3
    (-1.0, 2.9, 2.9, False, False, 2.9),  # below the dual-clip bound: live
]


@pytest.mark.parametrize(("adv", "ratio", "loss", "clipped", "dual", "grad"), CLIP_CASES)
def test_clipping_at_the_boundaries(adv, ratio, loss, clipped, dual, grad):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    result = policy_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1))
    result.loss.backward()
    assert result.loss.item() == pytest.approx(loss, abs=1e-5)
    assert result.metrics.clip_fraction == float(clipped)
    assert result.metrics.clip_fraction_lower == float(dual)
    assert logp.grad.item() == pytest.approx(grad, abs=1e-5)


def test_dual_clip_off_and_asymmetric_clip_higher():
    logp = torch.tensor([[math.log(4.0)]])
    off = policy_loss(logp, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1),
                      LossSettings(clip_ratio_c=None))
    assert off.loss.item() == pytest.approx(4.0)  # no cap without dual-clip
    # clip_ratio_high 0.28: ratio 1.25 with A = 1 is inside [0.8, 1.28] -> -1.25, not clipped.
    higher = policy_loss(torch.tensor([[math.log(1.25)]]), torch.zeros(1, 1), torch.ones(1, 1),
                         torch.ones(1, 1), LossSettings(clip_ratio_high=0.28))
    assert higher.loss.item() == pytest.approx(-1.25)
    assert higher.metrics.clip_fraction == 0.0


def test_policy_loss_metrics_and_masked_tokens_get_zero_gradient():
    # Row 0: two live tokens, ratios 1.1 and 1.5 with A = 1 -> losses -1.1 and -1.2 (clipped).
    # Row 1: one live token, ratio 1 with A = -0.5 -> 0.5. Token-mean: (-1.1 - 1.2 + 0.5) / 3 = -0.6.
    # The masked tokens hold NaN and huge values; they must not matter.
    nan = float("nan")
    # (A NaN advantage on a masked token with a finite ratio, [1, 2], is the case that would leak
    # 0 * NaN into the gradient if inputs were not zeroed outside the mask first.)
    logp = torch.tensor([[math.log(1.1), math.log(1.5), nan], [0.0, 50.0, 0.1]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, nan], [0.0, -50.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, nan], [-0.5, 9.0, nan]])
    entropy = torch.tensor([[1.0, 2.0, nan], [3.0, 7.0, 7.0]])
    result = policy_loss(logp, old, adv, MASK, entropy=entropy)
    result.loss.backward()
    assert result.loss.item() == pytest.approx(-0.6, abs=1e-5)
    assert result.metrics.clip_fraction == pytest.approx(1 / 3)  # one of three tokens clipped
    # approx_kl = mean(old - logp) = (-log 1.1 - log 1.5 - 0) / 3 = -(0.09531 + 0.40547) / 3 = -0.16693
    assert result.metrics.approx_kl == pytest.approx(-0.16693, abs=1e-5)
    assert result.metrics.entropy == pytest.approx(2.0)  # (1 + 2 + 3) / 3; only a metric at coeff 0
    assert result.metrics.response_tokens == 3 and result.metrics.kl_to_ref is None
    # Grads: -A r / 3 on live unclipped tokens, 0 on the clipped one, exactly 0 under the mask.
    expected = [[-1.1 / 3, 0.0, 0.0], [0.5 / 3, 0.0, 0.0]]
    assert torch.isfinite(logp.grad).all()
    assert close(logp.grad, expected)
    assert logp.grad[0, 2].item() == 0.0 and logp.grad[1, 1].item() == 0.0 and logp.grad[1, 2].item() == 0.0


# --- KL and the combined loss ------------------------------------------------------------------
def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([[0.0]]), torch.tensor([[math.log(2.0)]])
    # k1 = logp - ref = -log 2 = -0.69315; k3 = exp(log 2) - log 2 - 1 = 2 - 0.69315 - 1 = 0.30685
    assert kl_estimate(logp, ref, "kl").item() == pytest.approx(-0.69315, abs=1e-5)
    assert kl_estimate(logp, ref, "low_var_kl").item() == pytest.approx(0.30685, abs=1e-5)
    assert kl_estimate(ref, ref, "low_var_kl").item() == 0.0  # identical policies
    with pytest.raises(ValueError, match="unknown KL"):
        kl_estimate(logp, ref, "k9")


def test_total_loss_adds_kl_and_subtracts_entropy():
    # A = 0 -> pg loss 0. Two live tokens with k3 = 0.30685 each -> token-mean KL 0.30685, times 0.1.
    # Entropy 2 on both -> minus 0.01 * 2. Total = 0.030685 - 0.02 = 0.010685.
    mask = torch.tensor([[1, 1, 0]])
    logp = torch.zeros(1, 3, requires_grad=True)
    ref = torch.full((1, 3), math.log(2.0))
    settings = LossSettings(kl_coef=0.1, entropy_coeff=0.01)
    result = policy_loss(logp, torch.zeros(1, 3), torch.zeros(1, 3), mask, settings, ref_logp=ref,
                         entropy=torch.full((1, 3), 2.0))
    assert result.loss.item() == pytest.approx(0.010685, abs=1e-6)
    assert result.metrics.kl_to_ref == pytest.approx(0.30685, abs=1e-5)
    assert result.metrics.pg_loss == 0.0
    # d k3 / d logp = 1 - exp(ref - logp) = 1 - 2 = -1 per token; times 0.1 / 2 tokens = -0.05.
    result.loss.backward()
    assert close(logp.grad, [[-0.05, -0.05, 0.0]])
    with pytest.raises(ValueError, match="no ref_logp"):
        policy_loss(logp, torch.zeros(1, 3), torch.zeros(1, 3), mask, settings)


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="loss_agg_mode"):
        LossSettings(loss_agg_mode="seq-mean")
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        LossSettings(clip_ratio_c=1.0)
    with pytest.raises(ConfigError, match="clip_ratio_low"):
        LossSettings(clip_ratio_low=1.0)
    with pytest.raises(ConfigError, match="kl_estimator"):
        LossSettings(kl_estimator="k2")
    with pytest.raises(ConfigError, match="kl_coef"):
        LossSettings(kl_coef=-0.1)
