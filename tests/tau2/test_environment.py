"""A τ² episode's state: τ²'s tool schemas and error texts through tbx's MCP session, environments put back
exactly as db.json gives them, an injected fault is an error (never a 0), and τ² tasks are chosen by split."""

from __future__ import annotations

import asyncio

import pytest

from tbx.config import FaultsConfig, TasksConfig
from tbx.episodes import Outcome
from tbx.errors import ConfigError
from tbx.policies.reference import OraclePolicy
from tbx.tau2.environment import call_tool, tau2_domain
from tbx.tau2.tasks import tau2_tasks
from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session

from .conftest import _fresh, play, runtimes


def _session_call(runtime, name, arguments):
    async def main():
        state = runtime.open()
        infra = InfraLog()
        try:
            async with open_tool_session(build_server("t", runtime.tools, state.target, infra), infra) as tools:
                from tbx.messages import ToolCall

                schemas = {schema.name: schema for schema in tools.schemas}
                return schemas, await tools.call(ToolCall(name, arguments, "c1"))
        finally:
            state.close()
    return asyncio.run(main())


def test_the_agent_sees_tau2s_schemas_and_reads_tau2s_errors():
    runtime = next(iter(runtimes("tau2_airline").values()))
    schemas, message = _session_call(runtime, "get_reservation_details", {"reservation_id": "NOPE00"})
    environment = _fresh("airline")
    declared = {tool.name: tool.openai_schema["function"] for tool in environment.get_tools()}
    assert set(schemas) == set(declared)
    for name, schema in schemas.items():
        assert schema.parameters == declared[name]["parameters"] and schema.description == declared[name]["description"]
    from tau2.data_model.message import ToolCall

    expected = environment.get_response(ToolCall(id="c1", name="get_reservation_details",
                                                 arguments={"reservation_id": "NOPE00"}))
    assert message.is_error and expected.error and message.content == expected.content  # "Error: Reservation ..."
    _, bad = _session_call(runtime, "book_reservation", {"user_id": "x"})  # missing arguments: τ²'s TypeError text
    assert bad.is_error and bad.content.startswith("Error: ")


def test_a_put_back_environment_hashes_like_a_fresh_one():
    domain = tau2_domain("retail")
    fresh_hash = _fresh("retail").get_db_hash()
    environment = domain.acquire()
    order = next(iter(domain.document["orders"]))
    user = domain.document["orders"][order]["user_id"]
    call_tool(environment, "cancel_pending_order", {"order_id": order, "reason": "no longer needed"})
    call_tool(environment, "modify_user_address", {"user_id": user, "address1": "1 Main St", "address2": "",
                                                   "city": "X", "state": "NY", "country": "USA", "zip": "10001"})
    assert environment.get_db_hash() != fresh_hash
    domain.release(environment)
    assert domain.acquire() is environment and environment.get_db_hash() == fresh_hash


def test_every_environment_is_put_back_after_the_gold_actions_of_every_task():
    for source, name in (("tau2_airline", "airline"), ("tau2_retail", "retail")):
        play([(runtime, 0) for runtime in runtimes(source).values()], OraclePolicy())
        fresh_hash = _fresh(name).get_db_hash()
        idle = tau2_domain(name).idle
        assert idle and all(environment.get_db_hash() == fresh_hash for environment in idle)


def test_an_injected_tool_fault_is_an_error_never_a_zero():
    tasks = [rt for rt in runtimes("tau2_retail").values() if rt.task.reference and rt.task.reference[0].tool][:4]
    results = play([(runtime, 0) for runtime in tasks], OraclePolicy(), faults=FaultsConfig(tool=1.0, hang=0.0))
    assert [r.outcome for r in results] == [Outcome.INFRA_ERROR] * 4
    assert all(r.grade is None and "internal error" not in r.cause for r in results)


def test_splits_and_a_wrong_split_is_one_line():
    assert {len(tau2_tasks("tau2_airline", s)) for s in ("train", "test")} == {30, 20}
    assert len(tau2_tasks("tau2_airline", None)) == 50
    with pytest.raises(ConfigError, match="tasks.split"):
        tau2_tasks("tau2_airline", "bench")
    with pytest.raises(ConfigError, match="telecom"):
        tau2_tasks("tau2_telecom", "base")
    from tbx.catalog import resolve_tasks

    ids = [t.id for t in resolve_tasks(TasksConfig(name="tau2_retail", domains=["tau2_retail"], split="test"))]
    assert len(ids) == 40 and ids[0].startswith("tau2_retail/") and len(set(ids)) == 40
