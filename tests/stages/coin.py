"""A test double for a stochastic policy: each task has a true success rate; an episode plays the
reference solution with that probability (from the episode's seed), else does nothing.

Stands in for a model where a real one would make tests slow; it goes through the same episode
loop, store and grader as any policy.
"""

import hashlib
import random

from tbx.messages import AssistantTurn
from tbx.policies.base import Policy
from tbx.policies.reference import DONE, ScriptAgent, turns_from_steps


def true_rate(task_id: str) -> float:
    """A fixed rate in [0, 1) per task id, spread over the bands."""
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 2**32


class CoinPolicy(Policy):
    name = "coin"

    @classmethod
    def from_config(cls, setup):
        return cls()

    def agent(self, context):
        if random.Random(context.seed).random() < true_rate(context.task.id):
            return ScriptAgent(turns_from_steps(context.task.reference))
        return ScriptAgent([AssistantTurn(content=DONE)])
