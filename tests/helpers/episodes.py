"""What episode tests share: the default limits every run plays within, a world on a backend (`world_of`), mock
tasks (as files hold them and loaded), a policy that plays scripted turns, and a tool that blocks until a test releases it (added to a task's domain by `with_tool`)."""

from __future__ import annotations

import dataclasses
import json
import threading

from tbx.config import Config
from tbx.domains import get_domain
from tbx.episodes import EpisodeWorld, episode_limits
from tbx.policies.base import Policy
from tbx.policies.reference import ScriptAgent
from tbx.tasks import load_task
from tbx.tools.declare import tool
from tbx.users.scripted import ScriptedUser

MOCK = get_domain("mock")
LIMITS = episode_limits(Config())  # the defaults every run plays within


def world_of(backend, user=None, judge=None, limits=LIMITS, faults=None, sessions=None) -> EpisodeWorld:
    """An episode world on `backend` (runtimes passed to `run_episode` directly): the scripted user unless
    `user`, no judge unless `judge`, the default limits unless `limits`, no faults unless `faults`."""
    return EpisodeWorld(backend=backend, runtimes={}, user=user or ScriptedUser(), judge=judge, limits=limits,
                        faults=faults, sessions=sessions)


def mock_tasks() -> list[dict]:
    return json.loads(json.dumps(get_domain("mock").generate_tasks(0)))


def nickname_task() -> dict:
    return next(t for t in mock_tasks() if t["family"] == "nickname")


def mock_task(index=0, **changes):
    data = dict(MOCK.generate_tasks(0)[index]) | changes
    return load_task(data, "mock-test", MOCK.policy)


class ScriptPolicy(Policy):
    name = "script"

    def __init__(self, turns):
        self.turns = turns

    def agent(self, context):
        return ScriptAgent(self.turns)


released = threading.Event()  # set by a test's teardown only: until then `blocking` never returns


@tool("read")
def blocking(db) -> str:
    """Wait for an answer that never comes."""
    released.wait()
    return "released"


def with_tool(runtime, spec):  # a TaskRuntime whose domain has one more tool
    return dataclasses.replace(runtime, domain=dataclasses.replace(runtime.domain, tools=(*runtime.domain.tools, spec)))
