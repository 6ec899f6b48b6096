"""A native training run end to end on the CPU, the served model being the one seam faked: stage=train builds the
recipe (tbx/rl/trainer.py), plays each step's groups on the mock tasks in the run's episode world, trains a tiny
random llama on the turns each episode carries back, and saves. The losses and grad norms are pinned to what the
trainer gave before it became a recipe (a885111), so a change of the loop's order or seeding shows here."""

from __future__ import annotations

import json

import pytest

import tbx.stages.train
from tbx.policies.base import Agent, Policy
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.policies.trainable import TracedPolicy
from tbx.policies.vllm import Turn
from tbx.records import PoolManifest
from tests.helpers.models import tiny_model
from tests.helpers.stage import make_cfg

# (train/loss, train/grad_norm) of steps 1-3 at a885111
PINNED = [(-0.4242634177207947, 1.4149521589279175), (-0.4242634177207947, 1.6861754655838013),
          (-0.4242634177207947, 1.5948339700698853)]


class SampledAgent(Agent):
    """A reference agent whose turns are recorded as sampled tokens (made up from the seed, as vLLM's would be)."""

    def __init__(self, inner: Agent, seed: int, version: str):
        self.inner, self.seed, self.version, self.trace = inner, seed, version, []

    async def act(self, messages, tools):
        turn = await self.inner.act(messages, tools)
        n = len(self.trace)
        self.trace.append(Turn((*range(1, 6 + self.seed % 7), n), (7 + self.seed % 5, 8, 9 + n), (-1.0, -0.5, -2.0),
                               (self.version,)))
        return turn


class StandIn(Policy):
    """The trainable policy without vLLM: even attempts play the reference solution (reward 1), odd ones
    nothing (reward 0), so every group of 2 trains."""

    name, model_name = "trainable", "tiny"

    def __init__(self):
        self.model, self.pad_id, self.sync_seconds, self.weights_version = tiny_model(), 0, [], "v0"

    def agent(self, context):
        inner = (OraclePolicy() if context.attempt % 2 == 0 else NullPolicy()).agent(context)
        return SampledAgent(inner, context.seed, self.weights_version)

    def traced(self) -> TracedPolicy:
        return TracedPolicy(self)

    def check_samples(self, turns):
        assert all(set(t.weight_versions) == {self.weights_version} for t in turns)

    def sync_weights(self, step: int) -> float:
        self.weights_version = f"v{step}"
        self.sync_seconds.append(0.0)
        return 0.0

    def save_final(self, folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights").write_text("stand-in")
        return folder

    def engine(self) -> dict:
        return {"name": "stand-in"}


def test_a_seeded_native_run_trains_the_losses_it_always_trained(tmp_path, monkeypatch):
    manifest = PoolManifest(kept=("mock/transfer/5", "mock/transfer/20"), pool={"name": "full_param", "finetune": "full"},
                            probe_settings={"tasks": {"name": "mock", "domains": ["mock"]}}).sealed()
    (tmp_path / "pool.json").write_text(json.dumps(manifest.to_dict()))
    monkeypatch.setattr(tbx.stages.train, "build_trainable", lambda cfg, run_dir, finetune: StandIn())
    cfg = make_cfg(tmp_path, "stage=train", "model=smollm2_135m", f"train.pool={tmp_path / 'pool.json'}",
                   "grpo.group_size=2", "grpo.groups_per_step=2", "grpo.steps=3", "grpo.micro_batch_size=2",
                   f"run_dir={tmp_path / 'run'}")
    summary = tbx.stages.train.run_train(cfg)
    assert summary.updates == 3 and [h["train/samples"] for h in summary.history] == [10, 10, 10]
    trained = [(h["train/loss"], h["train/grad_norm"]) for h in summary.history]
    assert trained == [pytest.approx(pair, rel=1e-5) for pair in PINNED]
    assert (tmp_path / "run" / "checkpoints").is_dir() and summary.final_model is not None
