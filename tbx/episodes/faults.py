"""Injected faults: a share of tool calls, harness DB connections, user replies and judge calls fail
or hang, so that a campaign shows what the harness promises: every such episode ends as an error
outcome of its site's type, is re-run within `eval.max_error_retries`, and never moves a score.

- `draw` decides one call from a hash of (faults seed, episode seed, site, call index): no global
  RNG and no clock, so the same campaign injects the same faults, and a re-run of an attempt (a new
  episode seed) draws afresh.
- `EpisodeFaults` is one episode's injector: it counts calls per site, records what it injected
  (the episode stores it in `extra["faults"]`) and wraps the seams: the user session and the judge
  (wrappers), the MCP tool handlers (`tool_gate`, passed to `build_server`) and the harness's DB
  connections (`connect` in front of the clone and the grader's reader).
- A failure raises at once; a hang lasts `faults.hang_s` and then fails, or, without it, waits on
  an event that never fires until `bounded` (the per-call limit, `eval.call_timeout_s`) turns it
  into the site's error, the path a real hang takes.

Site -> outcome: tool and db -> infra_error, user -> user_sim_error, judge -> verifier_error.
With `faults=none` (the default) nothing is wrapped and no call is delayed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tbx.config import FaultsConfig
from tbx.config.values import FAULT_SITES
from tbx.errors import InfraError
from tbx.grading.judge import Judge, JudgeVerdict
from tbx.messages import Message
from tbx.process.waits import bounded
from tbx.tasks.model import JudgeRule
from tbx.users.base import Opening, UserSession, UserTurn

SITES = FAULT_SITES
SITE_OUTCOMES = {"tool": "infra_error", "db": "infra_error", "user": "user_sim_error", "judge": "verifier_error"}

class InjectedFault(ConnectionError):
    """Raised by an injected failure (a connection-like error, as a real client would raise)."""


def _uniforms(seed: int, episode_seed: int, site: str, index: int) -> tuple[float, float]:
    digest = hashlib.sha256(f"{seed}|{episode_seed}|{site}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64, int.from_bytes(digest[8:16], "little") / 2**64


def draw(cfg: FaultsConfig, episode_seed: int, site: str, index: int) -> str | None:
    """The fault for call `index` at `site` of the episode seeded `episode_seed`: "fail", "hang" or None."""
    rate = getattr(cfg, site)
    if rate <= 0.0:
        return None
    hit, kind = _uniforms(cfg.seed, episode_seed, site, index)
    if hit >= rate:
        return None
    return "hang" if kind < cfg.hang else "fail"


class EpisodeFaults:
    """One episode's injector; inert when `cfg` is None or every rate is 0."""

    def __init__(self, cfg: FaultsConfig | None, episode_seed: int):
        self.cfg, self.episode_seed = cfg, episode_seed
        self.calls: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []  # {"site", "kind", "call"} per injected fault

    def active(self, site: str) -> bool:
        return self.cfg is not None and getattr(self.cfg, site) > 0.0

    async def hit(self, site: str) -> None:
        """Count one call at `site`; fail or hang it when drawn."""
        if not self.active(site):
            return
        index = self.calls[site]
        self.calls[site] += 1
        kind = draw(self.cfg, self.episode_seed, site, index)
        if kind is None:
            return
        self.events.append({"site": site, "kind": kind, "call": index})
        if kind == "hang":
            if self.cfg.hang_s is None:
                await asyncio.Event().wait()  # until the caller's bound cancels it
            await asyncio.sleep(self.cfg.hang_s)
            raise InjectedFault(f"injected fault: {site} call {index} hung for {self.cfg.hang_s:g} s")
        raise InjectedFault(f"injected fault: {site} call {index} failed")

    async def connect(self, timeout_s: float | None) -> None:
        """In front of one harness DB connection: an injected failure, or a hang bounded by `timeout_s`."""
        if self.active("db"):
            await bounded(self.hit("db"), timeout_s, InfraError, "the database server")

    def tool_gate(self) -> Callable[[str], Awaitable[None]] | None:
        """For `build_server`: runs before each tool's body; a failure is a tool crash (`InfraError`)."""
        if not self.active("tool"):
            return None

        async def gate(name: str) -> None:
            try:
                await self.hit("tool")
            except InjectedFault as exc:
                raise InfraError(f"tool {name} crashed: {exc}") from exc

        return gate

    def user(self, session: UserSession) -> UserSession:
        return _FaultyUserSession(session, self) if self.active("user") else session

    def judge(self, judge: Judge | None) -> Judge | None:
        return _FaultyJudge(judge, self) if judge is not None and self.active("judge") else judge


class _FaultyUserSession(UserSession):
    def __init__(self, inner: UserSession, faults: EpisodeFaults):
        self.inner, self.faults = inner, faults

    def opening(self) -> str:
        return self.inner.opening()

    async def start(self) -> Opening:
        return await self.inner.start()

    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        await self.faults.hit("user")
        return await self.inner.reply(conversation)


class _FaultyJudge(Judge):
    def __init__(self, inner: Judge, faults: EpisodeFaults):
        self.inner, self.faults = inner, faults
        self.name, self.model_name = inner.name, inner.model_name

    async def decide(self, rule: JudgeRule, transcript: Sequence[Message]) -> JudgeVerdict:
        await self.faults.hit("judge")
        return await self.inner.decide(rule, transcript)

    async def aclose(self) -> None:
        await self.inner.aclose()
