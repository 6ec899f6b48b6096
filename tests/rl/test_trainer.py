"""The native trainer's recipe (tbx/rl/trainer.py): each episode comes back with the turns the trained policy
sampled in it (no trace fetched afterwards by seed), and a step's playing and updating are separate methods."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tbx.config import Config, GrpoConfig
from tbx.policies.base import Agent, Policy
from tbx.policies.trainable import TracedPolicy
from tbx.records import EpisodeResult, Outcome, TrainState
from tbx.rl.sampler import Group, GroupSampler, SamplerStats, StepBatch
from tbx.rl.trainer import NativeRecipe, PlayedEpisode, step_samples


def turn(prompt, completion):
    return SimpleNamespace(prompt_ids=prompt, completion_ids=completion, logprobs=[-0.5] * len(completion))


def played(task_id: str, attempt: int, passed: bool, turns=()) -> PlayedEpisode:
    result = EpisodeResult(task_id=task_id, domain="mock", family="f", attempt=attempt, seed=attempt,
                           outcome=Outcome.SUCCESS if passed else Outcome.FAILURE, cause="", transcript=(), usage={},
                           counts={}, final_delta=None, grade=None, hashes={}, timings={})
    return PlayedEpisode(result, tuple(turns))


class Checked:
    """The trained policy as `step_samples` sees it: the turns it was asked to check."""

    def __init__(self):
        self.checked: list[list] = []

    def check_samples(self, turns):
        self.checked.append(list(turns))


def test_samples_are_the_turns_each_episode_carries():
    # one group of 2: rewards 1 and 0, mean 0.5 -> advantages +0.5 and -0.5 (centred, not divided by the std)
    first, second = turn([1, 2], [3, 4]), turn([1, 2, 3, 4, 9], [5])
    batch = StepBatch(groups=(Group("t", (played("t", 0, True, [first, turn([1], [])]), played("t", 1, False,
                                                                                                [second]))),),
                      stats=SamplerStats(*[0] * 4, 0.0, *[0] * 6), discarded=())
    policy = Checked()
    samples, staleness = step_samples(batch, policy, norm_by_std=False)
    assert [(s.prompt_ids, s.completion_ids, s.advantage) for s in samples] == [([1, 2], [3, 4], 0.5),
                                                                              ([1, 2, 3, 4, 9], [5], -0.5)]
    assert policy.checked == [[first], [second]]  # a turn without completion tokens is not a sample
    assert staleness is None  # synchronous: a turn of other weights is refused, not dropped


class Recording(Agent):
    def __init__(self, trace):
        self.trace = trace

    async def act(self, messages, tools):
        raise AssertionError("not played here")


class Making(Policy):
    name, model_name = "trainable", "tiny"

    def agent(self, context):
        return Recording([turn([1], [2])])


def test_a_traced_policy_hands_back_the_turns_of_its_own_episode():
    traced = TracedPolicy(Making())
    assert traced.turns == () and traced.name == "trainable" and traced.model_name == "tiny"
    agent = traced.agent(SimpleNamespace(seed=7))
    assert traced.turns == tuple(agent.trace) and len(traced.turns) == 1
    assert TracedPolicy(Making()).turns == ()  # another episode's view holds only its own


def test_playing_a_step_leaves_the_model_alone():
    """`play` fills the step's groups through the caller's function and touches neither the weights nor the
    run's state; `update` is the one that trains (asynchronous GRPO plays while it updates)."""
    cfg = dataclasses.replace(Config(), grpo=GrpoConfig(group_size=2, groups_per_step=1))
    model = torch.nn.Linear(1, 1)
    policy = SimpleNamespace(model=model, sync_seconds=[], pad_id=0, check_samples=lambda turns: None,
                             sync_weights=lambda step: pytest.fail("play sent weights"))
    recipe = NativeRecipe(cfg, policy, torch.optim.AdamW(model.parameters()),
                          GroupSampler(["t"], 2, 1, np.random.default_rng(0), 0, 0), None, TrainState())
    before = [p.detach().clone() for p in model.parameters()]
    calls = []

    async def play_episode(task_id, attempt, step):
        calls.append((task_id, attempt, step))
        return played(task_id, attempt, passed=attempt == 0)

    batch = asyncio.run(recipe.play(3, play_episode))
    assert sorted(calls) == [("t", 0, 3), ("t", 1, 3)] and [g.rewards for g in batch.groups] == [(1.0, 0.0)]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert recipe.state == TrainState()
    updated = asyncio.run(recipe.update(3, batch))  # no turn sampled tokens: nothing to train on
    assert updated.samples == [] and updated.result is None and recipe.state.scored == [1.0, 0.0]
