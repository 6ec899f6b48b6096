"""A test double whose verdict depends on timing: each episode plays the reference solution or does
nothing depending on the clock when its first turn is asked for, after a short pause. Two plays of one
attempt would (about half the time) disagree, so a second verdict for an attempt cannot hide.

Every episode it starts appends `pid task attempt` to the file `+extra.episode_log=PATH` (one short
line per write, so lines from several processes never mix): the episodes actually played, to compare
with what the store holds.
"""

import asyncio
import os
import time

from tbx.messages import AssistantTurn
from tbx.policies.base import Agent, Policy
from tbx.policies.reference import DONE, ScriptAgent, turns_from_steps


class _ClockAgent(Agent):
    def __init__(self, reference, delay_s: float):
        self.reference, self.delay_s, self.script = reference, delay_s, None

    async def act(self, messages, tools):  # the Agent signature
        await asyncio.sleep(self.delay_s)
        if self.script is None:
            plays = time.monotonic_ns() // 1000 % 2 == 0
            self.script = ScriptAgent(turns_from_steps(self.reference) if plays else [AssistantTurn(content=DONE)])
        return await self.script.act(messages, tools)


class ClockPolicy(Policy):
    name = "clock"

    def __init__(self, episode_log: str, delay_s: float):
        self.episode_log, self.delay_s = episode_log, delay_s

    @classmethod
    def from_config(cls, setup):  # a PolicySetup
        return cls(str(setup.extra["episode_log"]), float(setup.extra.get("turn_delay_s", 0.05)))

    def agent(self, context):
        with open(self.episode_log, "a") as log:
            log.write(f"{os.getpid()} {context.task.id} {context.attempt}\n")
        return _ClockAgent(context.task.reference, self.delay_s)
