"""MCP sessions kept across a campaign's episodes (`ToolSessions`, what a campaign uses): each episode's
tools act on that episode's own database, the episodes equal those with a server and session of their
own, one session serves them one after another, and a session whose tools failed is closed, not reused.
On SQLite and PostgreSQL (the `backend` fixture)."""

import asyncio

from tbx.catalog import prepare_task
from tbx.config import FaultsConfig
from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks.loader import load_task
from tbx.tools.mcp_server import ToolSessions
from tbx.users.scripted import ScriptedUser
from tests.helpers.episodes import world_of

MOCK = get_domain("mock")
SAME = ("outcome", "final_delta", "transcript", "counts", "grade")


def as_data(result) -> dict:
    record = result.to_dict()
    return {key: record[key] for key in SAME}


def test_kept_sessions_give_each_episode_its_own_database_and_the_same_episodes(backend):
    runtimes = [prepare_task(load_task(data, f"mock#{i}", MOCK.policy), backend)
                for i, data in enumerate(MOCK.generate_tasks(0))]
    user = ScriptedUser()

    async def play(sessions):  # oracle then null on every task, twice over
        results = []
        for policy in (OraclePolicy(), NullPolicy(), OraclePolicy()):
            for runtime in runtimes:
                results.append(await run_episode(world_of(backend, user, sessions=sessions), runtime, policy, 0, 0))
        return results

    async def kept():
        sessions = ToolSessions()
        try:
            return await play(sessions), len(sessions._open)
        finally:
            await sessions.aclose()

    (results, opened), own = asyncio.run(kept()), asyncio.run(play(None))
    assert [r.outcome for r in results] == [Outcome.SUCCESS] * 3 + [Outcome.FAILURE] * 3 + [Outcome.SUCCESS] * 3
    assert [as_data(r) for r in results] == [as_data(r) for r in own]
    assert opened == len({tuple(spec.name for spec in rt.tools) for rt in runtimes})  # one per tool set


def test_a_session_whose_tools_failed_is_closed_not_reused(backend):
    runtime = prepare_task(load_task(MOCK.generate_tasks(0)[0], "mock#0", MOCK.policy), backend)
    faults = FaultsConfig(tool=1.0, hang=0.0)

    async def play():
        sessions = ToolSessions()
        try:
            failed = await run_episode(world_of(backend, faults=faults, sessions=sessions), runtime, OraclePolicy(), 0, 0)
            left_open = len(sessions._open)
            passed = await run_episode(world_of(backend, sessions=sessions), runtime, OraclePolicy(), 0, 0)
            return failed, left_open, passed
        finally:
            await sessions.aclose()

    failed, left_open, passed = asyncio.run(play())
    assert failed.outcome is Outcome.INFRA_ERROR and left_open == 0
    assert passed.outcome is Outcome.SUCCESS
