"""Helpers for the launch tests: composing configs like launch.py, and a slow coin policy.

`SlowCoinPolicy` is `tests.stages.coin.CoinPolicy` with a pause before every assistant turn
(`+extra.turn_delay_s=...`), so that a job is still running when a test preempts or cancels it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tbx.config import Config, register_configs
from tbx.policies.base import Agent, Policy, PolicySetup
from tests.stages.coin import CoinPolicy

ROOT = Path(__file__).resolve().parents[2]
register_configs()


def compose_cfg(*overrides: str) -> Config:
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=["logger=none", *overrides]))


def probe_overrides(tmp_path: Path, *extra: str) -> list[str]:
    """A small probe with the coin policy, everything under tmp_path."""
    return ["stage=probe", "policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin",
            f"out_root={tmp_path}/outputs", f"backend.workdir={tmp_path}/db", *extra]


class _SlowAgent(Agent):
    def __init__(self, inner: Agent, delay_s: float):
        self.inner, self.delay_s = inner, delay_s

    async def act(self, messages, tools):  # the Agent signature
        await asyncio.sleep(self.delay_s)
        return await self.inner.act(messages, tools)


class SlowCoinPolicy(Policy):
    name = "slowcoin"

    def __init__(self, delay_s: float):
        self.coin, self.delay_s = CoinPolicy(), delay_s

    @classmethod
    def from_config(cls, setup: PolicySetup) -> SlowCoinPolicy:
        return cls(float(setup.extra.get("turn_delay_s", 0.2)))

    def agent(self, context):
        return _SlowAgent(self.coin.agent(context), self.delay_s)
