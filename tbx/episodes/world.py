"""The episode's world: everything an episode is played in except who plays it and which try it is.

One record, built once per run (per process: a backend and the simulators' connections do not cross a
process) and passed to `run_episode` by every caller: campaigns (eval, probe), serve, `tbx.envs`, the
native trainer, the verl bridge and the admission gate. It holds the backend the task states are cloned
on, the prepared runtimes by task id, the user simulator, the judge, the limits, the injected faults and,
where a process keeps them, the MCP tool sessions; the faults are checked once, when the world is built.
`tbx.campaign.components.build_world` builds it from the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tbx.config import FaultsConfig
from tbx.config.values import validate_faults
from tbx.episodes.limits import EpisodeLimits
from tbx.episodes.state import Runtime
from tbx.grading.judge import Judge
from tbx.tools.mcp_server import ToolSessions
from tbx.users.base import UserSimulator


@dataclass(frozen=True)
class EpisodeWorld:
    backend: Any  # tbx.backend.Backend the SQL states are cloned on; None where every state is in memory (τ²)
    runtimes: Mapping[str, Runtime]  # task id -> its prepared runtime
    user: UserSimulator
    judge: Judge | None  # None: a task with judge rules is excluded
    limits: EpisodeLimits
    faults: FaultsConfig | None = None  # None: nothing injected
    sessions: ToolSessions | None = None  # MCP sessions kept across episodes; None: a server per episode

    def __post_init__(self) -> None:
        if self.faults is not None:
            validate_faults(self.faults, self.limits.call_timeout_s)

    def runtime(self, task: str | Runtime) -> Runtime:
        """The runtime of `task` (a task id of this world, or a runtime prepared elsewhere)."""
        return self.runtimes[task] if isinstance(task, str) else task

    async def aclose(self) -> None:
        """Close the kept tool sessions and the user's and judge's connections, in the event loop that played
        the episodes (the simulators open new connections if a later loop plays more); the backend is closed
        by whoever opened it."""
        if self.sessions is not None:
            await self.sessions.aclose()
        for part in (self.user, self.judge):
            if part is not None:
                await part.aclose()
