"""tbx's samplers on verl's V1 trainer (tbx/verl_bridge/sampler.py): the bound on zero-variance replacements a step,
on verl's synchronous sampler and on its asynchronous one (grpo.max_staleness >= 1). Marker `verl`: .venv-vllm."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from tbx.verl_bridge.sampler import TbxAsyncReplayBuffer, TbxReplayBuffer

pytestmark = pytest.mark.verl
ZERO_VARIANCE = {"uid-a": 0.0, "uid-b": 1.0, "uid-c": 0.0}  # what verl's own filter finds this poll


def sampler(cls, max_replacements: int):
    kwargs = {"metric": "acc", "max_replacements": max_replacements, "train_batch_size": 2}
    return cls(trainer_mode="sync" if cls is TbxReplayBuffer else "colocate_async", trainer_config={},
               max_off_policy_threshold=2, max_off_policy_strategy="drop", sampler_kwargs=kwargs,
               refill_fn=lambda n: n)


@pytest.mark.parametrize(("cls", "base"), [(TbxReplayBuffer, ReplayBuffer), (TbxAsyncReplayBuffer, ReplayBufferAsync)])
def test_zero_variance_evictions_stop_at_the_steps_bound(cls, base, monkeypatch):
    def verls_filter(self, partition_id):
        self._dapo_classification_cache[partition_id].update(ZERO_VARIANCE)
        return set(ZERO_VARIANCE), Counter(ZERO_VARIANCE.values())

    monkeypatch.setattr(base, "_dapo_filtered_keys", verls_filter)
    bounded = sampler(cls, max_replacements=2)
    assert isinstance(bounded, base) and bounded.filter_groups_metric == "acc"
    first, counts = bounded._dapo_filtered_keys("train")
    assert first == {"uid-a", "uid-b"} and counts == Counter({0.0: 1, 1.0: 1})  # 2 of 3, in uid order
    assert bounded._dapo_filtered_keys("train") == (set(), Counter())  # the step's budget is spent
    assert bounded.replaced == 2
    assert sampler(cls, max_replacements=5)._dapo_filtered_keys("train")[0] == set(ZERO_VARIANCE)
