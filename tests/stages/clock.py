"""A test double whose verdict depends on timing: each episode plays the reference solution or does
nothing depending on the clock when its first turn is asked for, after a short pause. Two plays of one
attempt would (about half the time) disagree, so a second verdict for an attempt cannot hide.

Every episode it starts appends `pid task attempt` to the file `+extra.episode_log=PATH` (one short
line per write, so lines from several processes never mix): the episodes actually played, to compare
with what the store holds. With `+extra.peers=N` an episode's first turn waits (up to a minute) until
episodes of N processes are in that file: a test of N workers then sees each of them play, however
slowly one of them starts on a loaded machine (CI once saw one worker play all 48 before the other began).
"""

import asyncio
import functools
import os
import time

from tbx.messages import AssistantTurn
from tbx.policies.base import Agent, Policy
from tbx.policies.reference import DONE, ScriptAgent, turns_from_steps

PEERS_WAIT_S = 60.0


@functools.cache
def _peers_deadline() -> float:
    """One minute for this whole process, not for each episode."""
    return time.monotonic() + PEERS_WAIT_S


def _processes_in(log: str) -> int:
    with open(log) as lines:
        return len({line.split()[0] for line in lines if line.strip()})


class _ClockAgent(Agent):
    def __init__(self, reference, delay_s: float, log: str, peers: int):
        self.reference, self.delay_s, self.script, self.log, self.peers = reference, delay_s, None, log, peers

    async def act(self, messages, tools):  # the Agent signature
        deadline = _peers_deadline()
        while self.script is None and _processes_in(self.log) < self.peers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(self.delay_s)
        if self.script is None:
            plays = time.monotonic_ns() // 1000 % 2 == 0
            self.script = ScriptAgent(turns_from_steps(self.reference) if plays else [AssistantTurn(content=DONE)])
        return await self.script.act(messages, tools)


class ClockPolicy(Policy):
    name = "clock"

    def __init__(self, episode_log: str, delay_s: float, peers: int = 1):
        self.episode_log, self.delay_s, self.peers = episode_log, delay_s, peers

    @classmethod
    def from_config(cls, setup):  # a PolicySetup
        return cls(str(setup.extra["episode_log"]), float(setup.extra.get("turn_delay_s", 0.05)),
                   int(setup.extra.get("peers", 1)))

    def agent(self, context):
        with open(self.episode_log, "a") as log:
            log.write(f"{os.getpid()} {context.task.id} {context.attempt}\n")
        return _ClockAgent(context.task.reference, self.delay_s, self.episode_log, self.peers)
