"""The native trainer plays its episodes within the run's `EpisodeLimits`, as evaluation does: a tool
whose body never returns ends the training episode as an infra_error once `eval.call_timeout_s` has
passed, and the step goes on (the group is dropped, nothing trains on it).

The trainer's loop (`tbx.stages.train._train` over the recipe, tbx/rl/trainer.py) runs for real over the mock
task, the results store and the group sampler; the trained policy is the seam faked (the served model is the
GPU part): a script that calls the blocking tool, with a one-parameter module for the checkpoint. The loop runs in a thread
the test waits for with a deadline, so a hang fails the test instead of freezing it."""

import asyncio
import threading

import numpy as np
import pytest
import torch

from tbx.campaign import build_world
from tbx.catalog import prepare_task
from tbx.messages import AssistantTurn, ToolCall
from tbx.policies.trainable import TracedPolicy
from tbx.records import TrainState
from tbx.rl.sampler import GroupSampler
from tbx.rl.trainer import NativeRecipe
from tbx.runs.sinks import NullSink
from tbx.stages.train import _train
from tbx.store import open_store
from tbx.store.results import read_records
from tests.helpers.episodes import ScriptPolicy, blocking, mock_task, released, with_tool
from tests.helpers.stage import make_cfg

LIMIT_S = 0.5


class BlockedTrainee(ScriptPolicy):
    """What `_train` asks of the trained policy when no episode reaches a verdict: every agent calls the
    blocking tool (a script: it samples no tokens)."""

    name = "trainee"

    def __init__(self):
        super().__init__([AssistantTurn(tool_calls=(ToolCall("blocking", {}, "call_0"),))])
        self.model = torch.nn.Linear(1, 1)
        self.sync_seconds: list[float] = []

    def traced(self) -> TracedPolicy:
        return TracedPolicy(self)

    def sync_weights(self, step: int) -> float:
        raise AssertionError("no step with only error episodes updates the model")


@pytest.fixture
def unblock():
    released.clear()
    yield
    released.set()  # the hung tool bodies return, and their threads end


def test_a_tool_that_never_returns_ends_a_native_training_episode_as_an_error(tmp_path, backend, unblock):
    _train_one_step(tmp_path, backend)
    # the first error makes the group unfillable (no re-runs): the sampler may cancel its sibling unstored
    records = read_records(tmp_path / "run")
    assert all(f"did not answer within {LIMIT_S:g} s" in r.cause for r in records), records


def test_injected_faults_reach_native_training_episodes(tmp_path, backend, unblock):
    """`faults=` counts toward a training run's identity, so the native trainer injects them as evaluation
    and verl's episodes do: every clone fails here, before the agent's first turn."""
    _train_one_step(tmp_path, backend, "faults.db=1.0", "faults.hang=0")
    records = read_records(tmp_path / "run")
    assert all("injected fault: db call 0 failed" in r.cause for r in records), records


def _train_one_step(tmp_path, backend, *overrides: str) -> None:
    """One step of one group of 2 on the mock task with the blocking tool; every episode must end as an
    infra_error that is stored, never trained on."""
    cfg = make_cfg(tmp_path, "stage=train", "tasks=mock", f"eval.call_timeout_s={LIMIT_S}", "grpo.group_size=2",
                   "grpo.groups_per_step=1", "grpo.steps=1", "grpo.max_error_reruns=0", "grpo.max_replacements=0",
                   *overrides)
    runtime = with_tool(prepare_task(mock_task(), backend), blocking.__tbx_tool__)
    run_dir = tmp_path / "run"
    store = open_store(None, run_dir, "train-limits", "train")
    policy = BlockedTrainee()
    recipe = NativeRecipe(cfg, policy, torch.optim.AdamW(policy.model.parameters()),
                          GroupSampler([runtime.task.id], 2, 1, np.random.default_rng(0), 0, 0),
                          run_dir / "checkpoints", TrainState())
    world = build_world(cfg, backend, {runtime.task.id: runtime})
    failed = []

    def train() -> None:
        try:
            asyncio.run(_train(cfg, recipe, world, store, NullSink()))
        except BaseException as exc:  # reported by the assertion below
            failed.append(exc)

    worker = threading.Thread(target=train, daemon=True)
    worker.start()
    worker.join(30)  # a step whose two calls are cut at 0.5 s ends in about a second
    try:
        assert not worker.is_alive(), "the training step never ended: its episodes waited on the tool for ever"
        assert not failed, failed
        records = read_records(run_dir)
        assert records and all(r.outcome == "infra_error" for r in records), records
        assert recipe.state.step == 1 and recipe.state.history[0]["train/groups"] == 0  # dropped, never trained
        assert "train/loss" not in recipe.state.history[0] and not recipe.state.scored  # no update, no reward
    finally:
        store.close()
