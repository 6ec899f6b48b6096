"""Helpers for the launch tests: composing configs like launch.py, and a slow coin policy.

`SlowCoinPolicy` is `tests.stages.coin.CoinPolicy` with a pause before every assistant turn
(`+extra.turn_delay_s=...`), so that a job is still running when a test preempts or cancels it.
`GatedCoinPolicy` holds every assistant turn until a file exists (`+extra.gate_file=...`) and says
that a turn is waiting by creating `+extra.started_file=...`, so a test signals a run it knows is
mid-episode, however loaded the machine.
"""

from __future__ import annotations

import asyncio
import signal
import time
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


GATE_WAIT_S = 300.0  # a gate nobody opens (a test that died) lets the turn go on after this


class _GatedAgent(Agent):
    def __init__(self, inner: Agent, started: Path, gate: Path):
        self.inner, self.started, self.gate = inner, started, gate

    async def act(self, messages, tools):  # the Agent signature
        self.started.touch()
        deadline = time.monotonic() + GATE_WAIT_S
        while not self.gate.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return await self.inner.act(messages, tools)


class GatedCoinPolicy(Policy):
    name = "gatedcoin"

    def __init__(self, started: Path, gate: Path):
        self.coin, self.started, self.gate = CoinPolicy(), started, gate

    @classmethod
    def from_config(cls, setup: PolicySetup) -> GatedCoinPolicy:
        return cls(Path(setup.extra["started_file"]), Path(setup.extra["gate_file"]))

    def agent(self, context):
        return _GatedAgent(self.coin.agent(context), self.started, self.gate)


def ctrl_c_reaches_it() -> None:
    """In the child before it runs: SIGINT's default action, as in a terminal. A test session started in the
    background (`cmd &`, nohup) ignores SIGINT, a child inherits that, and Python then leaves it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
