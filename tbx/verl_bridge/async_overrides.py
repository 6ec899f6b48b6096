"""`grpo.max_staleness` and `grpo.is_threshold` → verl 0.9.1's asynchronous trainer keys (pure: no verl).

verl 0.9.1 has two asynchronous trainers (docs/training.md, "verl's asynchronous mode"):

- its V1 trainer's asynchronous modes (`trainer.v1.trainer_mode`), on the same entry
  (`verl.trainer.main_ppo`), the same TransferQueue, agent loop, sampler extension point and
  checkpoints as the synchronous path tbx uses: `colocate_async` (trainer and vLLM on the same
  GPUs; at the end of sampling the in-flight requests are aborted, the weights synced, and the
  requests resumed on the new weights: partial rollout) and `separate_async` (vLLM on a rollout
  pool of its own that keeps generating while the trainer updates);
- the older recipe `verl.experimental.fully_async_policy.fully_async_main` (a rollouter and a
  trainer actor, a message queue, `async_training.*` keys), which replaces the V1 trainer and its
  sampler, so tbx's zero-variance bound and failed-group rules would not apply.

tbx maps `grpo.max_staleness = s >= 1` onto `colocate_async`, which runs on the hardware the
synchronous path runs on (one GPU, a cluster, or CPU ranks; `separate_async` needs a weight-sync
backend between two GPU pools, NCCL or an RDMA engine, which no CPU machine has):

- `trainer.v1.sampler.max_off_policy_threshold = s + 1` with strategy `drop`: verl counts the model
  versions a prompt group spans inclusively (`step - dispatch step + 1`, 1 in synchronous training),
  so a group dispatched at step g is trained at step g + s at the latest and dropped after
  (`training/off_policy/evicted_samples`), never silently trained on;
- `trainer.v1.colocate_async.num_warmup_batches = s`: s batches of groups are dispatched before
  the first step, so in steady state a step trains on groups dispatched s steps earlier;
- the sampler is tbx's asynchronous one (`tbx.verl_bridge.sampler.TbxAsyncReplayBuffer`): verl's,
  with the same bound on zero-variance replacements as the synchronous one. A group with a session
  that errored after its retries is dropped whole and replaced (verl's asynchronous rule), so an
  error episode is never trained on.
- Partial rollout: verl's asynchronous client (`FullyAsyncLLMServerClient`) resubmits a request
  aborted at a weight sync with the tokens generated so far, so the episode goes on, on the new
  weights, inside the same agent-loop call: each episode is played and stored once, and its
  `min/max_global_steps` record the versions it spans (`training/off_policy/trajectory_spans`).

The PPO ratio's old policy is recomputed by the trainer (verl's decoupled mode, not `bypass_mode`):
the sampler's log-probs enter only through the off-policy correction, `grpo.is_threshold` →
`algorithm.rollout_correction.rollout_is=token` with `rollout_is_threshold` (the token-level truncated
importance weight min(exp(old - rollout), threshold) of tbx/rl/correction.py), in either mode.
"""

from __future__ import annotations

from typing import Any

from tbx.config import GrpoConfig
from tbx.verl_bridge.cpu import PLATFORM_MODULE

ASYNC_TRAINER_MODE = "colocate_async"  # verl's V1 trainer with trainer and rollout on the same GPUs
ASYNC_SAMPLER_NAME = "TbxAsyncReplayBuffer"  # in tbx.verl_bridge.sampler, beside the synchronous one
# verl imports these modules in each of its processes (a list; the CPU platform's is first on CPU)
EXTERNAL_MODULES_KEY = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"
PAUSE_MODULE = "tbx.verl_bridge.vllm_pause"  # verl's abort at a weight sync, on vLLM 0.32
STALE_STRATEGY = "drop"  # verl drops a group past the threshold (the other strategy, wait, stalls the step)


def off_policy_threshold(max_staleness: int) -> int:
    """verl's `max_off_policy_threshold` for groups at most `max_staleness` versions old: verl counts the
    versions a group spans inclusively (trained at its dispatch step: 1)."""
    return max_staleness + 1


def async_overrides(grpo: GrpoConfig) -> list[tuple[str, Any]]:
    """The keys that change when a step may train on groups up to `grpo.max_staleness` versions old
    (nothing for 0: the synchronous trainer)."""
    if grpo.max_staleness <= 0:
        return []
    return [
        ("trainer.v1.trainer_mode", ASYNC_TRAINER_MODE),
        ("trainer.v1.sampler.custom_sampler.name", ASYNC_SAMPLER_NAME),
        (f"trainer.v1.{ASYNC_TRAINER_MODE}.num_warmup_batches", grpo.max_staleness),
        ("trainer.v1.sampler.max_off_policy_threshold", off_policy_threshold(grpo.max_staleness)),
        ("trainer.v1.sampler.max_off_policy_strategy", STALE_STRATEGY),
    ]


def correction_overrides(grpo: GrpoConfig) -> list[tuple[str, Any]]:
    """The token-level truncated importance weight against the sampler's log-probs (`grpo.is_threshold`;
    nothing when it is null: verl then logs the mismatch metrics and applies no weight)."""
    if grpo.is_threshold is None:
        return []
    return [
        ("algorithm.rollout_correction.rollout_is", "token"),
        ("algorithm.rollout_correction.rollout_is_threshold", float(grpo.is_threshold)),
    ]


def off_policy_overrides(grpo: GrpoConfig) -> list[tuple[str, Any]]:
    """Both deltas, in the order they are applied to the synchronous recipe."""
    return async_overrides(grpo) + correction_overrides(grpo)


def external_modules(grpo: GrpoConfig, cpu: bool) -> list[tuple[str, Any]]:
    """The modules verl loads in every process of an asynchronous run: the CPU platform (on CPU) and the
    shim for verl's pause call on vLLM 0.32 (tbx/verl_bridge/vllm_pause.py); applied after the CPU delta,
    whose own value it extends."""
    if grpo.max_staleness <= 0:
        return []
    return [(EXTERNAL_MODULES_KEY, ",".join([PLATFORM_MODULE] * cpu + [PAUSE_MODULE]))]


def apply_delta(pairs: list[tuple[str, Any]], delta: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """`pairs` with each key of `delta` given its value in place, and the keys it lacks appended (Hydra
    takes one value per key)."""
    changes = dict(delta)
    merged = [(key, changes.pop(key)) if key in changes else (key, value) for key, value in pairs]
    return merged + [(key, value) for key, value in delta if key in changes]
