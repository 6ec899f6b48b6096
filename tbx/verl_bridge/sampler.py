"""The step sampler tbx plugs into verl's V1 trainer: verl's own, with a bound on replacements (imports verl).

The recipe replaces a group whose rewards are all 0 or all 1 (no relative advantage) by a fresh
task (docs/training.md). verl 0.9.1's sync sampler does this (its DAPO filter on `algorithm.filter_groups`:
evict such a group, refill two prompts per eviction), but without a bound: it ignores
`filter_groups.max_num_gen_batches`, so a step over a pool the policy never (or always) solves
samples forever. tbx's native sampler stops after `grpo.max_replacements` replacements in a step
and trains on what it has; this subclass, named through verl's own extension point
(`trainer.v1.sampler.custom_sampler`), does the same: once a step has evicted `max_replacements`
zero-variance groups, further ones stay in the batch (their advantage is zero, so they add no
gradient) and the step goes on. `training/tbx/zero_variance_replaced` logs the count per step.

Groups with a session that errored after its retries (`status: failure`) are verl's: kept with
the trajectories they have, or refilled when none is left (`sync_refill_failed_groups`).

With `grpo.max_staleness` >= 1 (verl's asynchronous trainer, tbx/verl_bridge/async_overrides.py) the same bound
sits on verl's asynchronous sampler (`TbxAsyncReplayBuffer`), whose own rules differ: a group older than
the staleness threshold, and a group with a failed session, are dropped whole and replaced.

verl hands a custom sampler only its base arguments and `trainer.v1.sampler.sampler_kwargs`, so the
filter metric, the batch size and the bound come from there (tbx.verl_bridge.overrides writes them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

REPLACED_METRIC = "training/tbx/zero_variance_replaced"


class _BoundedReplacements:
    """At most `max_replacements` zero-variance evictions a step, over verl's own filter (sync or async)."""

    max_replacements: int
    replaced: int
    _dapo_classification_cache: Any

    def _bound(self, sampler_kwargs: Any) -> dict[str, Any]:
        settings = dict(sampler_kwargs or {})
        self.max_replacements = int(settings.get("max_replacements", 0))
        self.replaced = 0
        return settings

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        self.replaced = 0
        batch, metrics = super().sample(global_steps, partition_id, batch_size)  # type: ignore[misc]
        if partition_id != "val":
            metrics[REPLACED_METRIC] = self.replaced
        return batch, metrics

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """verl's zero-variance groups, cut to what is left of this step's replacement budget."""
        uids, counts = super()._dapo_filtered_keys(partition_id)  # type: ignore[misc]
        room = max(self.max_replacements - self.replaced, 0)
        if len(uids) > room:
            uids = set(sorted(uids)[:room])
            values = self._dapo_classification_cache[partition_id]
            counts = Counter(values[uid] for uid in uids)
        self.replaced += len(uids)
        return uids, counts


class TbxReplayBuffer(_BoundedReplacements, ReplayBuffer):
    """verl's sync ReplayBuffer with at most `max_replacements` zero-variance evictions a step."""

    def __init__(self, *args: Any, sampler_kwargs: Any = None, **kwargs: Any):
        settings = self._bound(sampler_kwargs)
        super().__init__(*args, sampler_kwargs=sampler_kwargs, filter_groups_metric=settings.get("metric") or None,
                         train_batch_size=int(settings["train_batch_size"]), gen_batch_size=1,
                         max_inflight_gen_batches=1, sync_refill_failed_groups=True, **kwargs)


class TbxAsyncReplayBuffer(_BoundedReplacements, ReplayBufferAsync):
    """verl's asynchronous ReplayBuffer (`grpo.max_staleness` >= 1, tbx/verl_bridge/async_overrides.py) with the
    same bound. verl's own rules stay: a group older than `max_off_policy_threshold` versions is dropped and
    replaced, and so is a group with a session that errored after its retries (all of it: the asynchronous
    sampler never trains a group with a failed session)."""

    def __init__(self, *args: Any, sampler_kwargs: Any = None, **kwargs: Any):
        settings = self._bound(sampler_kwargs)
        super().__init__(*args, sampler_kwargs=sampler_kwargs, filter_groups_metric=settings.get("metric") or None,
                         **kwargs)
