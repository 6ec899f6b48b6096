"""The simulated-user interface, shared by the scripted user and the LLM user."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from tbx.messages import Message, Usage
from tbx.tasks.model import UserScenario

STOP = "###STOP###"


@dataclass(frozen=True)
class UserTurn:
    text: str
    done: bool  # the user considers the conversation over
    usage: Usage = field(default_factory=Usage)
    revealed: tuple[str, ...] = ()  # names of private facts this turn disclosed
    reason: str = ""  # why a final turn ends the talk: completed | cannot_help | patience | user ("" goes on)

    def __post_init__(self) -> None:
        """`STOP` is a control marker between a user simulator and tbx, never words the agent reads: a turn
        that carries it ends the talk and has it removed, whichever simulator (bundled or not) wrote it."""
        if STOP in self.text:
            object.__setattr__(self, "text", " ".join(self.text.replace(STOP, " ").split()))
            object.__setattr__(self, "done", True)


@dataclass(frozen=True)
class Opening:
    """The conversation's first messages after the agent's system prompt, and what making them cost."""

    messages: tuple[Message, ...]
    usage: Usage = field(default_factory=Usage)


class UserSession(ABC):
    @abstractmethod
    def opening(self) -> str:
        """The user's first message (the scenario's opening message)."""

    async def start(self) -> Opening:
        """The conversation's first messages: the user's opening, or, for a simulator that answers the agent's
        fixed greeting (τ²-bench's), the greeting and the user's answer."""
        return Opening((Message("user", self.opening()),))

    @abstractmethod
    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        """Answer the agent's last message. Raise `UserSimError` when the simulator fails."""


class UserSimulator(ABC):
    name: str = "user"

    @abstractmethod
    def session(self, scenario: UserScenario, seed: int) -> UserSession:
        """A fresh user for one episode."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release endpoints."""
