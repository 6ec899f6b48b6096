"""Asynchronous GRPO (grpo.max_staleness): settings."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tbx.config import Config, GrpoConfig
from tbx.errors import ConfigError
from tbx.policies.vllm import Turn
from tbx.records import EpisodeResult, Outcome, TrainState
from tbx.rl.checkpoint import latest_checkpoint, load_checkpoint
from tbx.rl.sampler import GroupSampler
from tbx.rl.staleness import BusyClock, fresh_turns, turn_staleness, version_step
from tbx.rl.trainer import NativeRecipe, PlayedEpisode
from tests.helpers.models import tiny_model
from tests.launch import compose_cfg


@pytest.mark.parametrize("value", [-1])
def test_a_bad_max_staleness_names_the_file_the_field_and_the_fix(value):
    with pytest.raises(ConfigError) as error:
        compose_cfg("stage=train", f"grpo.max_staleness={value}")
    assert (error.value.source, error.value.field) == ("conf/grpo", "grpo.max_staleness")
    assert "grpo.max_staleness=0" in error.value.fix or "give 0" in error.value.fix
    assert compose_cfg("stage=train").grpo.max_staleness == 0


# --- staleness: hand-worked -------------------------------------------------------------------------
@dataclass(frozen=True)
class T:
    name: str
    weight_versions: tuple[str, ...]


def test_a_version_label_names_its_step_and_the_base_model_is_step_zero():
    assert version_step("run-3:step_12") == 12
    assert version_step("smollm2_135m@3f2a") == 0
    assert version_step("reloading:run-3:step_4") == 4


def test_a_turn_two_versions_old_is_dropped_at_staleness_one_and_counted():
    """The trainer holds step 5. Turns by step 5 (age 0) and step 4 (age 1) are trained; a turn by step 3 is
    two versions old: dropped, and an episode left with no turn is counted as dropped too."""
    episodes = [[T("a", ("r:step_5",)), T("b", ("r:step_4",))],
                [T("c", ("r:step_3",))],
                [T("d", ("r:step_4", "r:step_5")), T("e", ("r:step_3",)), T("f", ())]]
    kept, stats = fresh_turns(episodes, current_step=5, max_staleness=1)
    assert [[t.name for t in turns] for turns in kept] == [["a", "b"], [], ["d", "f"]]
    assert stats.turns_by_staleness == {0: 2, 1: 2}  # "d" is as old as its oldest weights; "f" is unlabelled
    assert (stats.dropped_turns, stats.dropped_episodes) == (2, 1)
    assert stats.as_metrics() == {"staleness/0": 2.0, "staleness/1": 2.0, "staleness_mean": 0.5,
                                  "stale_turns_dropped": 2.0, "stale_episodes_dropped": 1.0}
    assert fresh_turns(episodes, current_step=5, max_staleness=2)[1].dropped_turns == 0
    assert turn_staleness(T("x", ("r:step_3",)), 5) == 2


def test_the_busy_clock_counts_overlapping_work_once_and_clips_to_a_window():
    now = [0.0]
    clock = BusyClock(clock=lambda: now[0])
    clock.start()          # t=0: one episode
    now[0] = 1.0
    clock.start()          # t=1: a second one overlaps
    now[0] = 3.0
    clock.stop()
    now[0] = 4.0
    clock.stop()           # busy 0..4
    now[0] = 6.0
    clock.start()          # busy again from 6, still open
    assert clock.busy_between(0.0, 10.0) == 8.0
    assert clock.busy_between(2.0, 7.0) == 3.0


# --- the recipe playing ahead ----------------------------------------------------------------------------
class Versioned:
    """The trained policy without a server: its version label is `r:step_N` after the N-th sync. Each sync waits
    (in its thread, as a real one runs) until an episode of the next step has started, so that episode's turns
    are sampled by the weights being replaced: the overlap is certain, not a matter of timing."""

    def __init__(self, ahead_started: threading.Event | None):
        self.model, self.pad_id, self.sync_seconds, self.version = tiny_model(), 0, [], "r@base"
        self.ahead_started, self.syncs = ahead_started, []

    def check_samples(self, turns):
        raise AssertionError("an asynchronous step filters by age instead")

    def sync_weights(self, step: int) -> float:
        if self.ahead_started is not None and step < 3:  # the last step has no step after it
            assert self.ahead_started.wait(30), "no episode of the next step started while this one updated"
            self.ahead_started.clear()
        self.syncs.append(step)
        self.version = f"r:step_{step}"
        self.sync_seconds.append(0.0)
        return 0.0


def async_recipe(tmp_path, policy, staleness: int) -> NativeRecipe:
    cfg = dataclasses.replace(Config(), grpo=GrpoConfig(group_size=2, groups_per_step=2, steps=3, max_staleness=staleness,
                                                        micro_batch_size=2, lr=1e-3))
    return NativeRecipe(cfg, policy, torch.optim.AdamW(policy.model.parameters(), lr=1e-3),
                        GroupSampler(["a", "b", "c"], 2, 2, np.random.default_rng(0), 0, 0), tmp_path / "ck",
                        TrainState())


def episode(task_id: str, attempt: int, versions: list[str]) -> PlayedEpisode:
    result = EpisodeResult(task_id=task_id, domain="mock", family="f", attempt=attempt, seed=attempt,
                           outcome=Outcome.SUCCESS if attempt % 2 == 0 else Outcome.FAILURE, cause="", transcript=(),
                           usage={}, counts={}, final_delta=None, grade=None, hashes={}, timings={})
    turns = tuple(Turn((1, 2, 3), (4, 5), (-1.0, -1.0), (v,)) for v in versions)
    return PlayedEpisode(result, turns)


def train(recipe: NativeRecipe, play_episode) -> list[dict]:
    metrics: list[dict] = []

    async def done(step, logged):
        metrics.append(logged)

    asyncio.run(recipe.train(play_episode, done))
    return metrics


def test_at_staleness_one_the_next_step_plays_while_this_one_updates(tmp_path):
    started = threading.Event()
    policy = Versioned(started)
    recipe = async_recipe(tmp_path, policy, staleness=1)
    order = []

    async def play_episode(task_id, attempt, step):
        order.append((step, policy.version))
        if step > 0:
            started.set()
        await asyncio.sleep(0)
        return episode(task_id, attempt, [policy.version])  # one turn, by the weights served as it started

    metrics = train(recipe, play_episode)
    assert policy.syncs == [1, 2, 3] and [m["train/step"] for m in metrics] == [1, 2, 3]
    # the second step's first episodes ran under the base weights (its sync waited for them), the third's under
    # the first update's
    assert (1, "r@base") in order and (2, "r:step_1") in order
    assert metrics[0]["train/staleness/0"] == 4.0 and "train/staleness/1" not in metrics[0]
    for logged in metrics[1:]:
        assert logged["train/staleness/1"] >= 1.0 and logged["train/stale_turns_dropped"] == 0.0
        assert logged.get("train/staleness/0", 0.0) + logged["train/staleness/1"] == logged["train/samples"] == 4.0
    assert all(0.0 <= m["train/rollout_idle_fraction"] <= 1.0 and 0.0 <= m["train/trainer_idle_fraction"] <= 1.0
               for m in metrics)


def test_a_turn_two_versions_old_is_not_trained_on_and_is_counted(tmp_path):
    policy = Versioned(None)
    recipe = async_recipe(tmp_path, policy, staleness=1)

    async def play_episode(task_id, attempt, step):
        versions = [policy.version]
        if step == 2 and attempt == 0:
            versions.append("r@base")  # a turn sampled two syncs before the weights step 2 trains
        return episode(task_id, attempt, versions)

    metrics = train(recipe, play_episode)
    assert metrics[2]["train/stale_turns_dropped"] >= 1.0
    assert metrics[2]["train/samples"] == 4.0 + 2 - metrics[2]["train/stale_turns_dropped"]


def test_at_staleness_zero_nothing_plays_ahead_and_every_turn_is_checked(tmp_path):
    checked = []
    policy = Versioned(None)
    policy.check_samples = checked.append
    recipe = async_recipe(tmp_path, policy, staleness=0)
    order = []

    async def play_episode(task_id, attempt, step):
        order.append((step, len(policy.syncs)))
        return episode(task_id, attempt, [policy.version])

    metrics = train(recipe, play_episode)
    assert all(step == syncs for step, syncs in order)  # step k played after exactly k syncs
    assert len(checked) == 12 and not any(key.startswith("train/staleness") for m in metrics for key in m)


def test_a_checkpoint_keeps_the_sampler_of_the_trained_step_not_of_the_step_played_ahead(tmp_path):
    started = threading.Event()
    policy = Versioned(started)
    recipe = async_recipe(tmp_path, policy, staleness=1)
    saved = {}

    async def play_episode(task_id, attempt, step):
        if step > 0:
            started.set()
        return episode(task_id, attempt, [policy.version])

    async def done(step, logged):
        saved[step] = (recipe._drawn.get(step), dict(recipe.sampler.state_dict()))
        if step == 0:
            recipe.save()

    asyncio.run(recipe.train(play_episode, done))
    drawn_by_step_0, live = saved[0]
    assert drawn_by_step_0["position"] != live["position"]  # step 1 had already drawn its tasks when step 0 saved
    step, extra = load_checkpoint(latest_checkpoint(tmp_path / "ck"), policy.model, recipe.optimizer)
    assert step == 1 and extra["sampler"] == drawn_by_step_0  # a resumed run draws step 1's tasks again


def test_a_lora_pool_is_refused_when_the_native_trainer_would_play_ahead():
    from tbx.stages.train import validate_train

    cfg = compose_cfg("stage=train", "model=smollm2_135m", "grpo.max_staleness=1", "train.pool=/runs/pool.json")
    with pytest.raises(ConfigError) as error:
        validate_train(cfg, "lora")
    assert (error.value.source, error.value.field) == ("/runs/pool.json", "finetune")
    assert "grpo.max_staleness=0" in error.value.fix
    validate_train(cfg, "full")
