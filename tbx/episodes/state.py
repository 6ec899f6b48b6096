"""The episode's state, whatever kind it is: what `run_episode` asks of a task's runtime.

A task's runtime (made once per task when a run prepares it) opens one `EpisodeState` per episode: a
clone of the task's SQL template (`tbx.catalog.TaskRuntime`, on a SQLite or PostgreSQL backend) or an
in-memory τ²-bench environment (`tbx.tau2.runtime.Tau2Runtime`). The episode loop serves the runtime's
tools on the state's `target`, reads the terminal state, and asks the state for its grade; it never
knows which kind it plays, so eval, probe, both trainers, serve and the environments of other
trainers play τ² tasks as they play tbx's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tbx.backend.state import State
from tbx.messages import Message
from tbx.records import Grade, JudgeVerdict
from tbx.tasks.model import Task
from tbx.tools.declare import ToolSpec


class EpisodeState(Protocol):
    """One episode's own state."""

    target: Any  # what the tools act on: a SQLAlchemy engine, a τ² environment

    def terminal(self) -> State:
        """The terminal state, read after the conversation (blocking: run off the event loop)."""

    def grade(self, final: State, transcript: Sequence[Message], verdicts: Sequence[JudgeVerdict] | None,
              ended_by: str) -> Grade:
        """The verdict on the episode that left `final`."""

    def delta(self, final: State) -> State:
        """What of `final` differs from the task's initial state (stored with the episode)."""

    def close(self) -> None:
        """Give the state back (drop the clone, put the environment back)."""


class Runtime(Protocol):
    """A prepared task: what its episodes need, built once."""

    task: Task

    @property
    def tools(self) -> tuple[ToolSpec, ...]: ...

    @property
    def versions(self) -> dict[str, str]:
        """The versions stored with every episode: tools, grader, initial_state."""

    def open(self, backend: Any) -> EpisodeState:
        """A fresh state for one episode (blocking: run off the event loop)."""
