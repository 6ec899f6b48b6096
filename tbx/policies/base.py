"""The one policy interface.

A `Policy` is built once per run (it may hold a model, an HTTP client, a batching scheduler) and
hands out one `Agent` per episode. An agent is asked for the next assistant turn given the
conversation so far and the tool schemas from the MCP session; it returns text and/or tool calls
with token usage. Only the oracle and replay policies look at the task itself (they are
references, not agents under test); model-backed agents see nothing but the conversation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tbx.messages import AssistantTurn, Message, ToolSchema
from tbx.tasks.model import Task

if TYPE_CHECKING:
    from tbx.config import ModelConfig, PolicyConfig


@dataclass(frozen=True)
class PolicySetup:
    """What a policy's `from_config` is given (the stage layer makes it, tbx/campaign/components.py): its own
    group, the model a model policy plays, the run's seed, and the run's free-form `extra` notes (the knobs of
    a custom policy, such as a test's)."""

    policy: PolicyConfig
    model: ModelConfig
    seed: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeContext:
    task: Task
    attempt: int
    seed: int  # per-episode sampling seed, derived from the run seed, task and attempt


class Agent(ABC):
    @abstractmethod
    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        """The next assistant turn. Raise `InfraError` when the model endpoint fails."""


class Policy(ABC):
    name: str = "policy"
    model_name: str = ""  # what produced the tokens, for accounting and reports
    # Traits (tbx/traits.py), read from the class its `_target_` names before anything is built: a custom
    # policy declares what it is the same way.
    plays_model: bool = False  # its turns come from the `model` group's model, served or called by tbx
    is_reference: bool = False  # it plays each task's own steps, no model: the model's settings do not count

    @abstractmethod
    def agent(self, context: EpisodeContext) -> Agent:
        """A fresh agent for one episode."""

    def engine(self) -> dict[str, Any]:
        """What produces the turns, for run.json (vLLM: its version and the weights it serves)."""
        return {"name": self.name}

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release model servers, HTTP clients, schedulers."""
