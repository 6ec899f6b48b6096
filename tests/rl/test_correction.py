"""The token-level truncated importance weight (TIS) against the sampler's log-probs: worked by hand, masked
tokens ignored, multiplied into the policy-gradient term only, off by default; the native update applies it
and its statistics reach the step metrics; a cap <= 1 is refused with one line."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from tbx.errors import ConfigError
from tbx.rl.correction import ImportanceStats, truncated_importance_weights
from tbx.rl.grpo import LossSettings, policy_loss
from tbx.rl.native import TurnSample, UpdateResult, batch_tensors, grpo_update, token_logprobs
from tests.helpers.models import tiny_model
from tests.launch import compose_cfg

# Three response tokens whose trainer/sampler ratios exp(old - sampler) are 0.5, 1.5 and 3.0, and a fourth,
# masked token with garbage (NaN sampler log-prob, a huge ratio). At threshold 2.0:
#   weights        min(r, 2)                   = 0.5, 1.5, 2.0 (and 0 where masked)
#   mean           (0.5 + 1.5 + 2.0) / 3       = 4/3;  max 2.0;  clipped (r > 2): 1 of 3
#   mismatch_kl    mean(sampler - old) = -mean(ln r) = -(ln 0.5 + ln 1.5 + ln 3) / 3 = -ln(2.25) / 3 = -0.270310
#   mismatch_k3_kl mean(r - ln r - 1) = (0.193147 + 0.094535 + 0.901388) / 3 = 0.396357
RATIOS = [0.5, 1.5, 3.0]
SAMPLER = torch.tensor([[-1.0, -1.0, -1.0, float("nan")]])
OLD = torch.tensor([[-1.0 + math.log(r) for r in RATIOS] + [50.0]])
MASK = torch.tensor([[1, 1, 1, 0]])


def test_three_tokens_by_hand_and_the_masked_one_ignored():
    out = truncated_importance_weights(OLD, SAMPLER, MASK, 2.0)
    assert out.weights[0].tolist() == pytest.approx([0.5, 1.5, 2.0, 0.0])
    assert not out.weights.requires_grad
    assert out.stats.tokens == 3 and out.stats.clipped == 1
    assert out.stats.as_metrics() == pytest.approx({
        "is_weight_mean": 4 / 3, "is_weight_max": 2.0, "is_clipped_fraction": 1 / 3,
        "mismatch_kl": -0.270310, "mismatch_k3_kl": 0.396357}, abs=1e-6)


def test_micro_batches_combine_to_the_whole_batch():
    whole = truncated_importance_weights(OLD, SAMPLER, MASK, 2.0).stats
    parts = [truncated_importance_weights(OLD[:, cols], SAMPLER[:, cols], MASK[:, cols], 2.0).stats
             for cols in (slice(0, 1), slice(1, 2), slice(2, 4))]
    combined = ImportanceStats()
    for part in parts:
        combined = combined.combine(part)
    assert combined.as_metrics() == pytest.approx(whole.as_metrics(), abs=1e-7)
    assert combined.tokens == 3 and combined.clipped == 1


def test_no_token_gives_nan_metrics_and_zero_weights():
    out = truncated_importance_weights(OLD, SAMPLER, torch.zeros_like(MASK), 2.0)
    assert out.weights.abs().sum() == 0 and out.stats.tokens == 0
    assert all(math.isnan(value) for value in out.stats.as_metrics().values())


@pytest.mark.parametrize("threshold", [1.0, 0.5, 0.0])
def test_a_cap_at_or_below_one_is_refused(threshold):
    with pytest.raises(ValueError, match="use a value > 1"):
        truncated_importance_weights(OLD, SAMPLER, MASK, threshold)


def test_the_weight_multiplies_the_policy_gradient_term_by_hand():
    """On-policy (logp = old) each token's loss is -A, its gradient -A; weighted: -A w.
    A = (1, -1, 1), w = (0.5, 1.5, 2.0): token-mean loss (-0.5 + 1.5 - 2.0) / 3 = -1/3, gradient
    (-0.5, 1.5, -2.0) / 3; the masked fourth token gets no gradient."""
    weights = truncated_importance_weights(OLD, SAMPLER, MASK, 2.0).weights
    logp = OLD.clone().requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0, 1.0, 0.0]])
    out = policy_loss(logp, OLD, advantages, MASK, token_weights=weights)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1 / 3, abs=1e-6)
    assert logp.grad[0].tolist() == pytest.approx([-0.5 / 3, 1.5 / 3, -2.0 / 3, 0.0], abs=1e-6)


def test_the_weight_applies_after_dual_clip_and_not_to_kl_or_entropy():
    """A = -1, ratio e^2 = 7.39 > c = 3: the dual-clipped loss is -A c = 3, weighted by 0.5: 1.5.
    KL (k1, logp - ref = 1) at coefficient 0.1 and entropy 2 at 0.01 are added unweighted:
    1.5 + 0.1 * 1 - 0.01 * 2 = 1.58."""
    logp, old = torch.tensor([[0.0]]), torch.tensor([[-2.0]])
    settings = LossSettings(kl_coef=0.1, kl_estimator="kl", entropy_coeff=0.01)
    out = policy_loss(logp, old, torch.tensor([[-1.0]]), torch.ones(1, 1), settings, ref_logp=torch.tensor([[-1.0]]),
                      entropy=torch.tensor([[2.0]]), token_weights=torch.tensor([[0.5]]))
    assert out.metrics.pg_loss == pytest.approx(1.5) and out.loss.item() == pytest.approx(1.58)


def test_no_weight_and_unit_weights_leave_the_loss_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=gen) * 3
    old = logp + torch.randn(4, 6, generator=gen) * 0.4
    advantages, mask = torch.randn(4, 6, generator=gen), (torch.rand(4, 6, generator=gen) > 0.3).float()
    results = []
    for weights in (None, torch.ones(4, 6)):
        leaf = logp.clone().requires_grad_(True)
        out = policy_loss(leaf, old, advantages, mask, LossSettings(clip_ratio_high=0.28), token_weights=weights)
        out.loss.backward()
        results.append((out.loss.detach(), leaf.grad, out.metrics))
    (loss_none, grad_none, metrics_none), (loss_ones, grad_ones, metrics_ones) = results
    assert torch.equal(loss_none, loss_ones) and torch.equal(grad_none, grad_ones) and metrics_none == metrics_ones


def trainer_logprobs(model, samples):
    """Each sample's completion log-probs under the model (temperature 1), as the update computes them."""
    ids, attention, response = batch_tensors(samples, 0)
    with torch.no_grad():
        logp = token_logprobs(model, ids, attention, 1.0)
    return [logp[row, response[row].bool()].tolist() for row in range(len(samples))]


def test_the_native_update_applies_the_weights_against_the_sampled_log_probs():
    """The sampler's log-probs are set so the three tokens of the first two turns have ratios 0.5, 1.5
    and 3.0; the third turn has none (weight 1, left out of the statistics). On-policy the token-mean
    loss is -sum(A w) / tokens = -(1.0 * 0.5 + 1.0 * 1.5 + (-1.0) * 2.0 + 0.5 * 1 + 0.5 * 1) / 5 = -1/5;
    uncorrected it is -(1 + 1 - 1 + 0.5 + 0.5) / 5 = -2/5."""
    plain = [TurnSample((1, 2, 3), (5, 6), 1.0), TurnSample((1, 2, 4), (7,), -1.0),
             TurnSample((1, 2, 9), (10, 11), 0.5)]
    trainer = trainer_logprobs(tiny_model(), plain)
    sampled = [tuple(lp - math.log(r) for lp, r in zip(trainer[0], RATIOS[:2], strict=True)),
               (trainer[1][0] - math.log(RATIOS[2]),), ()]
    samples = [TurnSample(s.prompt_ids, s.completion_ids, s.advantage, lps)
               for s, lps in zip(plain, sampled, strict=True)]
    results = {}
    for threshold in (None, 2.0):
        model = tiny_model()
        results[threshold] = grpo_update(model, torch.optim.SGD(model.parameters(), lr=0.1), samples,
                                         LossSettings(), pad_id=0, micro_batch_size=2, temperature=1.0,
                                         max_grad_norm=1e9, is_threshold=threshold)
    assert results[None].loss == pytest.approx(-2 / 5, abs=1e-5)
    assert results[2.0].loss == pytest.approx(-1 / 5, abs=1e-5)
    metrics = results[2.0].importance.as_metrics()
    assert results[2.0].importance.tokens == 3 and metrics["is_clipped_fraction"] == pytest.approx(1 / 3)
    assert metrics["is_weight_mean"] == pytest.approx(4 / 3, abs=1e-5)
    assert metrics["mismatch_kl"] == pytest.approx(-0.270310, abs=1e-5)
    assert results[None].importance.as_metrics()["mismatch_kl"] == pytest.approx(metrics["mismatch_kl"])


def step_metrics(*overrides: str, temperature: float = 1.0) -> dict:
    from tbx.rl.sampler import SamplerStats
    from tbx.rl.trainer import step_metrics as metrics_of

    cfg = compose_cfg("stage=train", *overrides, f"model.temperature={temperature}")
    stats = truncated_importance_weights(OLD, SAMPLER, MASK, 2.0).stats
    batch = SimpleNamespace(groups=(), stats=SamplerStats(*[0] * 4, 0.0, *[0] * 6))
    update = UpdateResult(-0.2, 1.0, 5, 3, 0.0, 0.1, stats)
    return metrics_of(cfg, 0, batch, [], update, [], 1.0, SimpleNamespace(sync_seconds=[0.5]))


def test_each_step_logs_the_weights_and_the_mismatch_kl():
    logged = step_metrics("grpo.is_threshold=2.0")
    assert logged["train/is_weight_mean"] == pytest.approx(4 / 3) and logged["train/is_weight_max"] == 2.0
    assert logged["train/is_clipped_fraction"] == pytest.approx(1 / 3)
    assert logged["train/mismatch_kl"] == pytest.approx(-0.270310, abs=1e-6)
    off = step_metrics()  # the correction off: the mismatch is still logged, no weight is
    assert "train/mismatch_kl" in off and not any(key.startswith("train/is_") for key in off)
    assert math.isnan(step_metrics(temperature=0.7)["train/mismatch_kl"])  # vLLM's raw log-probs: no comparison


@pytest.mark.parametrize(("overrides", "fix"), [
    (["grpo.is_threshold=1.0"], "grpo.is_threshold > 1"),
    (["grpo.is_threshold=1.5", "grpo.trainer=verl", "model.temperature=0.7"], "model.temperature=1.0"),
    (["grpo.is_threshold=2.0", "model.temperature=0.7"], "model.temperature=1.0"),
])
def test_a_bad_is_threshold_names_the_file_the_field_and_the_fix(overrides, fix):
    with pytest.raises(ConfigError) as error:
        compose_cfg("stage=train", *overrides)
    assert (error.value.source, error.value.field) == ("conf/grpo", "grpo.is_threshold")
    assert fix in error.value.fix and "\n" not in str(error.value)
    assert compose_cfg("stage=train", "grpo.is_threshold=2.0").grpo.is_threshold == 2.0
    # verl applies it too (algorithm.rollout_correction, tbx/verl_bridge/async_overrides.py)
    assert compose_cfg("stage=train", "grpo.is_threshold=2.0", "grpo.trainer=verl").grpo.is_threshold == 2.0
