"""Asynchronous GRPO (grpo.max_staleness): settings."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tbx.config import Config, GrpoConfig
from tbx.errors import ConfigError, InfraError
from tbx.policies.vllm import Turn
from tbx.records import EpisodeResult, Outcome, TrainState
from tbx.rl.sampler import GroupSampler
from tbx.rl.staleness import BusyClock, fresh_turns, turn_staleness
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


def test_both_trainers_take_max_staleness_above_0():
    for trainer in ("native", "verl"):
        assert compose_cfg("stage=train", f"grpo.trainer={trainer}", "grpo.max_staleness=1").grpo.max_staleness == 1


# --- staleness: hand-worked -------------------------------------------------------------------------
@dataclass(frozen=True)
class T:
    name: str
    weight_versions: tuple[str, ...]


SERVED = ["base", "r:step_1", "r:step_3", "r:step_4"]  # step 2 had no update, so no sync: three syncs so far


def test_age_counts_weight_syncs_not_steps_and_an_unknown_version_is_infinitely_old():
    assert [turn_staleness(T("x", (v,)), SERVED) for v in SERVED] == [3, 2, 1, 0]
    assert turn_staleness(T("x", ("r:step_3", "r:step_4")), SERVED) == 1  # as old as its oldest weights
    assert turn_staleness(T("x", ("reloading:r:step_5",)), SERVED) == math.inf  # a failed reload's label
    with pytest.raises(InfraError, match="carries no weight version"):
        turn_staleness(T("x", ()), SERVED)


def test_a_turn_two_syncs_old_is_dropped_at_staleness_one_and_counted():
    """The trainer holds r:step_4. Turns by it (age 0) and by r:step_3 (age 1: step 2 synced nothing) are
    trained; a turn by r:step_1 is two syncs old: dropped, and an episode left with no turn is counted too."""
    episodes = [[T("a", ("r:step_4",)), T("b", ("r:step_3",))],
                [T("c", ("r:step_1",))],
                [T("d", ("r:step_3", "r:step_4")), T("e", ("r:step_1",)), T("f", ("other:step_4",))]]
    kept, stats = fresh_turns(episodes, SERVED, max_staleness=1)
    assert [[t.name for t in turns] for turns in kept] == [["a", "b"], [], ["d"]]
    assert stats.turns_by_staleness == {0: 1, 1: 2}
    assert (stats.dropped_turns, stats.dropped_episodes) == (3, 1)
    assert stats.as_metrics() == {"staleness/0": 1.0, "staleness/1": 2.0, "staleness_mean": 2 / 3,
                                  "stale_turns_dropped": 3.0, "stale_episodes_dropped": 1.0}
    assert fresh_turns(episodes, SERVED, max_staleness=2)[1].dropped_turns == 1  # another run's version


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
    clock.forget_before(5.0)
    assert clock.busy_between(0.0, 10.0) == 4.0


# --- the recipe playing ahead ----------------------------------------------------------------------------
class Versioned:
    """The trained policy without a server: version `r:step_N` after the sync of step N. With `gates`, the sync
    of step N waits (in its thread, as a real one runs) until an episode of step N (the one played ahead) has
    started, so that episode's turns are sampled by the weights being replaced: the overlap is certain, not a
    matter of timing."""

    def __init__(self, gates: dict[int, threading.Event] | None = None):
        self.model, self.pad_id, self.sync_seconds = tiny_model(), 0, []
        self.served_versions, self.gates, self.syncs = ["r@base"], gates, []

    @property
    def version(self) -> str:
        return self.served_versions[-1]

    def check_samples(self, turns):
        raise AssertionError("an asynchronous step filters by age instead")

    def sync_weights(self, step: int) -> float:
        if self.gates is not None and step in self.gates:
            assert self.gates[step].wait(30), f"no episode of step {step} started while step {step - 1} updated"
        self.syncs.append(step)
        self.served_versions.append(f"r:step_{step}")
        self.sync_seconds.append(0.0)
        return 0.0


def async_recipe(tmp_path, policy, staleness: int, steps: int = 3) -> NativeRecipe:
    cfg = dataclasses.replace(Config(), grpo=GrpoConfig(group_size=2, groups_per_step=2, steps=steps,
                                                        max_staleness=staleness, micro_batch_size=2, lr=1e-3))
    return NativeRecipe(cfg, policy, torch.optim.AdamW(policy.model.parameters(), lr=1e-3),
                        GroupSampler(["a", "b", "c"], 2, 2, np.random.default_rng(0), 0, 0), tmp_path / "ck",
                        TrainState())


def episode(task_id: str, attempt: int, versions: list[str], passed: bool | None = None) -> PlayedEpisode:
    passed = attempt % 2 == 0 if passed is None else passed
    result = EpisodeResult(task_id=task_id, domain="mock", family="f", attempt=attempt, seed=attempt,
                           outcome=Outcome.SUCCESS if passed else Outcome.FAILURE, cause="", transcript=(),
                           usage={}, counts={}, final_delta=None, grade=None, hashes={}, timings={})
    turns = tuple(Turn((1, 2, 3), (4, 5), (-1.0, -1.0), (v,)) for v in versions)
    return PlayedEpisode(result, turns)


def train(recipe: NativeRecipe, play_episode) -> list[dict]:
    metrics: list[dict] = []

    async def done(step, logged):
        metrics.append(logged)

    asyncio.run(recipe.train(play_episode, done))
    return metrics


def test_at_staleness_one_each_next_step_plays_while_this_one_updates(tmp_path):
    gates = {1: threading.Event(), 2: threading.Event()}  # the last step has no step after it
    policy = Versioned(gates)
    recipe = async_recipe(tmp_path, policy, staleness=1)
    order = []

    async def play_episode(task_id, attempt, step):
        order.append((step, policy.version))
        if step in gates:
            gates[step].set()
        await asyncio.sleep(0)
        return episode(task_id, attempt, [policy.version])  # one turn, by the weights served as it started

    metrics = train(recipe, play_episode)
    assert policy.syncs == [1, 2, 3] and [m["train/step"] for m in metrics] == [1, 2, 3]
    # the second step's first episode ran under the base weights, the third's under the first update's
    assert (1, "r@base") in order and (2, "r:step_1") in order
    assert metrics[0]["train/staleness/0"] == 4.0 and "train/staleness/1" not in metrics[0]
    for logged in metrics[1:]:
        assert logged["train/staleness/1"] >= 1.0 and logged["train/stale_turns_dropped"] == 0.0
        assert logged.get("train/staleness/0", 0.0) + logged["train/staleness/1"] == logged["train/samples"] == 4.0
    assert all(0.0 <= m["train/rollout_idle_fraction"] <= 1.0 and 0.0 <= m["train/trainer_idle_fraction"] <= 1.0
               for m in metrics)


def test_a_step_without_an_update_does_not_age_the_turns_played_ahead_of_the_next(tmp_path):
    """Step 1 has only zero-variance groups: nothing to train, no sync. Step 2's turns by the base weights
    (played while step 1 ran) are then one sync old, not two: trained, none dropped."""
    policy = Versioned()
    recipe = async_recipe(tmp_path, policy, staleness=1)

    async def play_episode(task_id, attempt, step):
        return episode(task_id, attempt, [policy.version], passed=True if step == 0 else None)

    metrics = train(recipe, play_episode)
    assert policy.syncs == [2, 3] and "train/loss" not in metrics[0]
    assert all(m["train/stale_turns_dropped"] == 0.0 for m in metrics)


def test_a_turn_two_syncs_old_is_not_trained_on_and_is_counted(tmp_path):
    policy = Versioned()
    recipe = async_recipe(tmp_path, policy, staleness=1)

    async def play_episode(task_id, attempt, step):
        versions = [policy.version]
        if step == 2 and attempt == 0:
            versions.append("r@base")  # a turn sampled two syncs before the weights step 2 trains
        return episode(task_id, attempt, versions)

    metrics = train(recipe, play_episode)
    assert metrics[2]["train/stale_turns_dropped"] == 2.0  # attempt 0 of each of the step's two groups
    assert metrics[2]["train/samples"] == 4.0


def test_at_staleness_zero_nothing_plays_ahead_and_every_turn_is_checked(tmp_path):
    checked = []
    policy = Versioned()
    policy.check_samples = checked.append
    recipe = async_recipe(tmp_path, policy, staleness=0)
    order = []

    async def play_episode(task_id, attempt, step):
        order.append((step, len(policy.syncs)))
        return episode(task_id, attempt, [policy.version])

    metrics = train(recipe, play_episode)
    assert all(step == syncs for step, syncs in order)  # step k played after exactly k syncs
    assert len(checked) == 12 and not any(key.startswith("train/staleness") for m in metrics for key in m)


class Killed(Exception):
    """The process dying right after a checkpoint, with the next step's groups playing."""


def test_a_run_killed_with_a_step_playing_ahead_resumes_that_step_with_the_same_tries(tmp_path):
    """Step 0 is checkpointed (in a thread, as the stage writes it) while step 1 plays ahead; the process then
    dies. The resumed run restores the sampler of step 0's draws and plays step 1 again: the same tasks and
    attempts as the killed run had started, so the store's discard of step 1 and the replay leave each try
    once; and step 1 is trained once, by the resumed run."""
    gates = {1: threading.Event()}
    played: list[tuple[int, str, int]] = []
    policy = Versioned(gates)
    recipe = async_recipe(tmp_path, policy, staleness=1, steps=2)

    async def play_episode(task_id, attempt, step):
        played.append((step, task_id, attempt))
        if step in gates:
            gates[step].set()
        await asyncio.sleep(0.01)
        return episode(task_id, attempt, [policy.version])

    async def killed_after_save(step, logged):
        await asyncio.to_thread(recipe.write, recipe.snapshot())
        raise Killed

    with pytest.raises(Killed):
        asyncio.run(recipe.train(play_episode, killed_after_save))
    ahead = sorted(entry for entry in played if entry[0] == 1)
    assert ahead, "step 1 was not playing ahead when the run died"

    resumed_policy = Versioned()
    resumed = NativeRecipe.setup(recipe.cfg, ["a", "b", "c"], tmp_path / "ck", lambda: resumed_policy)
    assert resumed.state.step == 1 and resumed_policy.served_versions == ["r@base", "r:step_1"]
    played.clear()
    trained = train(resumed, play_episode)
    assert [m["train/step"] for m in trained] == [2]
    replayed = sorted(entry for entry in played if entry[0] == 1)
    assert {entry[1:] for entry in replayed} >= {entry[1:] for entry in ahead}  # the same tries, played again
    assert len(replayed) == len(set(replayed))


def test_a_lora_pool_is_refused_when_the_native_trainer_would_play_ahead():
    from tbx.stages.train import validate_train

    cfg = compose_cfg("stage=train", "model=smollm2_135m", "grpo.max_staleness=1", "train.pool=/runs/pool.json")
    with pytest.raises(ConfigError) as error:
        validate_train(cfg, "lora")
    assert (error.value.source, error.value.field) == ("/runs/pool.json", "finetune")
    assert "grpo.max_staleness=0" in error.value.fix
    validate_train(cfg, "full")


def test_every_update_and_weight_sync_runs_on_the_one_trainer_thread(tmp_path, monkeypatch):
    """Updates spread over asyncio's shared pool (busy with the episodes played ahead) each left a heap of freed
    activations behind (glibc keeps one per thread): an asynchronous run reached 19 GB and was killed. The update
    and the sync run on the recipe's own thread, whatever the episodes keep busy."""
    import tbx.rl.trainer as trainer

    threads = []
    real_update = trainer.grpo_update

    def update(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_update(*args, **kwargs)

    monkeypatch.setattr(trainer, "grpo_update", update)
    policy = Versioned()
    real_sync = policy.sync_weights
    policy.sync_weights = lambda step: (threads.append(threading.current_thread().name), real_sync(step))[1]
    recipe = async_recipe(tmp_path, policy, staleness=1, steps=4)

    async def play_episode(task_id, attempt, step):
        await asyncio.gather(*(asyncio.to_thread(threading.Event().wait, 0.01) for _ in range(4)))  # the shared pool
        return episode(task_id, attempt, [policy.version])

    assert [m["train/step"] for m in train(recipe, play_episode)] == [1, 2, 3, 4]
    assert len(threads) == 8 and {name.rsplit("_", 1)[0] for name in threads} == {"tbx-trainer"}, threads
    assert len(set(threads)) == 1
