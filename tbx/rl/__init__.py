"""RL core: GRPO math (`grpo`), the off-policy correction (`correction`) and the group sampler (`sampler`), which
need only torch and numpy; the native trainer's recipe (`trainer`) runs them over episodes its caller plays."""

from tbx.rl.correction import ImportanceStats, ImportanceWeights, truncated_importance_weights
from tbx.rl.grpo import (
    LOSS_AGG_MODES,
    LossMetrics,
    LossSettings,
    PolicyLoss,
    aggregate_loss,
    broadcast_to_tokens,
    group_advantages,
    kl_estimate,
    policy_loss,
)
from tbx.rl.sampler import EpisodeOutcome, Group, GroupSampler, SamplerStats, StepBatch

__all__ = [
    "LOSS_AGG_MODES", "EpisodeOutcome", "Group", "GroupSampler", "LossMetrics", "LossSettings", "PolicyLoss",
    "SamplerStats", "StepBatch", "aggregate_loss", "broadcast_to_tokens", "group_advantages", "kl_estimate",
    "policy_loss", "ImportanceStats", "ImportanceWeights", "truncated_importance_weights",
]
