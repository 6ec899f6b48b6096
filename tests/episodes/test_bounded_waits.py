"""Every wait of an episode is bounded: a tool whose synchronous body hangs (in Python, or in a query
that never ends) is cut at the per-call limit and the episode is an infra_error, while other episodes
go on; the query itself is stopped by the database (SQLite's interrupt when the episode database is
dropped; on PostgreSQL the forced drop, and statement_timeout on every connection). Injected hangs
under `faults=chaos` last seconds, not 300.
Each episode runs in a thread of its own that the test waits for with a deadline: before the tool
bodies ran off the event loop, such a hang froze the loop, so no timeout could fire."""

import asyncio
import dataclasses
import threading
import time

import pytest
from sqlalchemy import text

from tbx.catalog import prepare_task
from tbx.episodes import Outcome, run_episode
from tbx.messages import AssistantTurn, ToolCall
from tbx.store.results import read_records
from tbx.tools.declare import tool
from tests.helpers.episodes import LIMITS, ScriptPolicy, mock_task, with_tool, world_of

LIMIT_S = 0.5
CUT = dataclasses.replace(LIMITS, call_timeout_s=LIMIT_S)
stopped = threading.Event()  # set when a hung tool body finally returns or is interrupted


@tool("read")
def sleepy(db) -> str:
    """Take a long time in Python."""
    time.sleep(4)
    return "slept"


@tool("read")
def endless(db) -> str:
    """Run a query that never ends (SQLite) or sleeps a minute on the server (PostgreSQL)."""
    try:
        if db.dialect.name == "sqlite":
            db.execute(text("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"))
        else:
            db.execute(text("SELECT pg_sleep(60)"))
        return "done"
    finally:
        stopped.set()


def play_in_thread(runtime, backend, name: str, deadline_s: float = 20.0):
    """Play one episode that calls tool `name`; (result, seconds), or (None, deadline) if it never ended."""
    turns = [AssistantTurn(tool_calls=(ToolCall(name, {}, "call_0"),))]
    box: list = []

    def episode() -> None:
        box.append(asyncio.run(run_episode(world_of(backend, limits=CUT), runtime, ScriptPolicy(turns), 0, 0)))

    began = time.perf_counter()
    worker = threading.Thread(target=episode, daemon=True)
    worker.start()
    worker.join(deadline_s)
    return (box[0] if box else None), time.perf_counter() - began


@pytest.mark.parametrize("spec", [sleepy.__tbx_tool__, endless.__tbx_tool__], ids=["python", "query"])
def test_a_hung_synchronous_tool_body_is_cut_at_the_call_limit(backend, spec):
    stopped.clear()
    runtime = with_tool(prepare_task(mock_task(), backend), spec)
    result, seconds = play_in_thread(runtime, backend, spec.name)
    assert result is not None, "the episode never ended: the hang blocked the event loop"
    assert result.outcome is Outcome.INFRA_ERROR and seconds < 3.5, (result.cause, seconds)
    assert "did not answer within 0.5 s" in result.cause or "canceling statement" in result.cause, result.cause
    if spec.name == "endless":  # the database stopped the query: nothing runs on behind the episode
        assert stopped.wait(5), "the query still runs"


class SilentPolicy(ScriptPolicy):
    """An agent whose turn never ends (a model call that never answers)."""

    def __init__(self):
        super().__init__([])

    def agent(self, context):
        class Silent:
            async def act(self, messages, tools):
                await asyncio.Event().wait()

        return Silent()


def test_the_episode_deadline_bounds_turns_that_no_other_limit_does(backend):
    # eval.turn_timeout_s=null: only the episode's deadline ends the wait, as an infra_error
    runtime = prepare_task(mock_task(), backend)
    limits = dataclasses.replace(LIMITS, turn_timeout_s=None, episode_timeout_s=LIMIT_S)
    began = time.perf_counter()
    result = asyncio.run(run_episode(world_of(backend, limits=limits), runtime, SilentPolicy(), 0, 0))
    assert result.outcome is Outcome.INFRA_ERROR and time.perf_counter() - began < 3, result.cause
    assert result.cause == "the episode did not end within 0.5 s (eval.episode_timeout_s)"


def test_other_episodes_go_on_while_one_tool_hangs(backend):
    runtime = with_tool(prepare_task(mock_task(), backend), sleepy.__tbx_tool__)

    async def both():
        hung = run_episode(world_of(backend, limits=dataclasses.replace(LIMITS, call_timeout_s=10.0)), runtime,
                           ScriptPolicy([AssistantTurn(tool_calls=(ToolCall("sleepy", {}),))]), 0, 0)
        from tbx.policies.reference import OraclePolicy

        began = time.perf_counter()
        fine = asyncio.ensure_future(run_episode(world_of(backend), runtime, OraclePolicy(), 1, 0))
        slow = asyncio.ensure_future(hung)
        good = await fine
        took = time.perf_counter() - began
        await slow
        return good, took

    good, took = asyncio.run(both())
    assert good.outcome is Outcome.SUCCESS and took < 3.0, took  # it did not wait for the 4 s tool body


def test_an_injected_hang_under_chaos_costs_its_short_limit(tmp_path):
    from tests.helpers.stage import make_cfg, run

    began = time.perf_counter()
    summary = run(make_cfg(tmp_path, "tasks=mock", "tasks.limit=1", "policy=oracle", "faults=chaos", "faults.tool=0",
                           "faults.db=0", "faults.judge=0", "faults.user=1.0", "faults.hang=1.0",
                           "eval.max_error_retries=0"))  # every user reply hangs: the preset's 5 s, not 300 s
    record = read_records(summary.run_dir)[0]
    assert record.outcome == "user_sim_error" and "hung for 5 s" in record.cause, record.cause
    assert time.perf_counter() - began < 60


@pytest.mark.integration
def test_postgres_connections_carry_the_statement_timeout(tmp_path, pg_url):
    from sqlalchemy.exc import OperationalError

    from tbx.backend import make_backend

    # 2 s: long enough for the template clone (itself a statement) on a loaded machine, far below the sleep
    backend = make_backend("postgres", pg_url, str(tmp_path), statement_timeout_s=2.0)
    try:
        db = backend.clone(prepare_task(mock_task(), backend).template)
        reader = backend.open_reader(db)
        for engine in (db.engine, reader, backend.admin):
            with engine.connect() as conn:
                assert conn.execute(text("SHOW statement_timeout")).scalar() == "2s"
        began = time.perf_counter()
        with pytest.raises(OperationalError, match="statement timeout"), db.engine.connect() as conn:
            conn.execute(text("SELECT pg_sleep(30)"))
        assert time.perf_counter() - began < 15
        reader.dispose()
        backend.drop(db)
    finally:
        backend.close()
