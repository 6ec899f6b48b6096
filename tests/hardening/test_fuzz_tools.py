"""Hostile tool input: every tool of every bundled domain, fuzzed with hypothesis.

Over 10,000 direct calls (`runtime.invoke` on a cloned SQLite episode database) and a few hundred
through a real MCP session. Each call must end in an answer, never an exception: a bad call
(wrong type, missing or unknown argument, NUL or lone surrogate, not a mapping) in a short error
that names the argument, anything else in a result or a tool error. A refused call and a read
leave the episode database byte-identical; nothing outside the episode's own database changes
(template, a sibling clone, the working directory). The run is derandomized, so CI replays the
same calls; `benchmarks/fuzz_tools.py` runs a longer random one.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import Counter
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from tbx.domains import domain_names, get_domain
from tbx.errors import InfraError
from tbx.messages import ToolCall
from tbx.tools.arguments import validate_arguments
from tbx.tools.declare import ToolSpec, tool
from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session
from tbx.tools.runtime import invoke
from tests.hardening import Arena, FuzzCall, answer_problems, domain_call, sqlite_file, value_pool

BUNDLED = {"travel", "retail", "auto_insurance", "neobank", "consulting", "helpdesk", "hr_payroll", "clinic"}
DOMAINS = domain_names()  # the bundled ones and the tiny mock domain
CALLS_PER_DOMAIN = 1_250  # x 9 domains = 11,250 direct calls
CALLS_PER_EXAMPLE = 5  # hypothesis draws calls in small batches: its per-example overhead is most of the cost
MCP_BATCHES, MCP_BATCH = 8, 8  # x 9 domains = 576 MCP calls, each also made directly on a twin
FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


def _shown(call: FuzzCall) -> str:
    return f"{call.tool.name}({call.arguments!r:.300}) [{call.fault}]"


@pytest.fixture
def arena(request, tmp_path, monkeypatch):
    """The domain's arena, with the working directory moved to an empty folder that must stay
    empty (an injected ATTACH DATABASE 'x' would create its file there)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    made = Arena(tmp_path / "backend", get_domain(request.param))
    before = made.outside()
    yield made
    try:
        assert made.outside() == before, "a file outside the episode databases was written, created or removed"
        assert list(cwd.iterdir()) == [], "a tool call created a file in the working directory"
    finally:
        made.close()


def test_every_bundled_domain_is_fuzzed():
    assert BUNDLED <= set(DOMAINS)
    assert {get_domain(name).split for name in BUNDLED} == {"bench", "train"}
    assert all(get_domain(name).tools for name in DOMAINS)


def _play_directly(arena: Arena, call: FuzzCall, tally: Counter[str]) -> None:
    """One call through `invoke`: it must answer, and answer right."""
    episode = sqlite_file(arena.episode)
    state = episode.read_bytes()
    try:
        result = invoke(call.tool, arena.episode.engine, call.arguments)
    except Exception as exc:  # any exception escaping invoke is a harness crash
        raise AssertionError(f"harness crash: {_shown(call)} raised {exc!r:.400}") from exc
    tally["calls"] += 1
    tally[call.fault] += 1
    tally["error" if result.is_error else "answered"] += 1
    tally[f"tool:{call.tool.name}"] += 1
    problems = answer_problems(call, result.text, result.is_error)
    if (result.is_error or call.tool.kind == "read") and episode.read_bytes() != state:
        problems.append(f"a {'refused' if result.is_error else 'read'} call changed the episode database")
    assert not problems, f"{_shown(call)} -> {result.text[:300]!r}: {problems}"


@pytest.mark.parametrize("arena", DOMAINS, indirect=True)
def test_direct_calls_to_every_tool_survive_hostile_arguments(arena: Arena):
    tally: Counter[str] = Counter()

    @settings(FUZZ, max_examples=CALLS_PER_DOMAIN // CALLS_PER_EXAMPLE)
    @given(calls=st.lists(domain_call(arena.domain, arena.pool), min_size=CALLS_PER_EXAMPLE,
                          max_size=CALLS_PER_EXAMPLE))
    def play(calls: list[FuzzCall]) -> None:
        for call in calls:
            _play_directly(arena, call, tally)

    play()
    assert tally["calls"] >= CALLS_PER_DOMAIN, tally
    assert all(tally[f"tool:{spec.name}"] >= 10 for spec in arena.domain.tools), tally  # every tool, many times
    assert all(tally[fault] >= 50 for fault in ("valid", "hostile", "wrong_type", "missing", "extra")), tally
    assert tally["answered"] >= 0.05 * tally["calls"], tally  # the fuzz reaches tool bodies, not only refusals


async def _play_over_mcp(arena: Arena, twin, calls: list[FuzzCall]) -> list[str]:
    """Each call over MCP on the arena's episode and directly on its twin; the differences."""
    infra = InfraLog()
    server = build_server(arena.domain.name, arena.domain.tools, arena.episode.engine, infra)
    differences = []
    async with open_tool_session(server, infra) as session:
        for i, call in enumerate(calls):
            try:
                message = await session.call(ToolCall(call.tool.name, call.arguments, id=str(i)))
            except Exception as exc:
                raise AssertionError(f"harness crash over MCP: {_shown(call)} raised {exc!r:.400}") from exc
            direct = invoke(call.tool, twin.engine, call.arguments)
            problems = answer_problems(call, message.content, message.is_error)
            if (message.content, message.is_error) != (direct.text, direct.is_error):
                problems.append(f"direct call answered {direct.text[:200]!r}")
            differences += [f"{_shown(call)} -> {message.content[:200]!r}: {p}" for p in problems]
    return differences


@pytest.mark.parametrize("arena", DOMAINS, indirect=True)
def test_mcp_calls_answer_like_direct_calls(arena: Arena):
    twin = arena.own_clone()
    played = Counter()

    @settings(FUZZ, max_examples=MCP_BATCHES)
    @given(calls=st.lists(domain_call(arena.domain, arena.pool, json_only=True), min_size=MCP_BATCH,
                          max_size=MCP_BATCH))
    def play(calls: list[FuzzCall]) -> None:
        calls = [FuzzCall(c.tool, json.loads(json.dumps(c.arguments)), c.fault, c.named) for c in calls]
        assert asyncio.run(_play_over_mcp(arena, twin, calls)) == []
        played["calls"] += len(calls)

    play()
    assert played["calls"] >= MCP_BATCHES * MCP_BATCH
    assert sqlite_file(arena.episode).read_bytes() == sqlite_file(twin).read_bytes()  # same calls, same database


def test_mcp_names_an_unknown_tool_and_keeps_the_typed_schema(tmp_path):
    arena = Arena(tmp_path, get_domain("travel"))

    async def play() -> tuple:
        infra = InfraLog()
        async with open_tool_session(build_server("travel", arena.domain.tools, arena.episode.engine, infra),
                                     infra) as session:
            message = await session.call(ToolCall("drop_all_tables", {"x": 1}, id="1"))
            return message, {s.name: s.parameters for s in session.schemas}

    try:
        message, schemas = asyncio.run(play())
    finally:
        arena.close()
    assert message.is_error and message.content.startswith("Error") and "drop_all_tables" in message.content
    # The agent still sees the typed schema, although the SDK no longer checks arguments itself.
    assert schemas["find_bookings"]["properties"]["employee_id"]["type"] == "integer"
    assert schemas["find_bookings"]["required"] == ["employee_id"]


def test_a_wrong_typed_direct_call_is_a_tool_error_not_a_harness_crash(tmp_path):
    # The known bug: last_name=5 reached the body, whose `last_name.strip()` raised AttributeError,
    # which invoke reported as InfraError (a harness fault) instead of the agent's mistake.
    arena = Arena(tmp_path, get_domain("travel"))
    try:
        spec = arena.domain.tool("verify_identity")
        result = invoke(spec, arena.episode.engine, {"employee_id": 1, "last_name": 5})
    finally:
        arena.close()
    assert result.is_error
    assert result.text == ("Error: invalid arguments for verify_identity: last_name: input should be a valid "
                           "string (given 5)")


@tool("write")
def _buggy(db, account_id: int) -> str:
    """A tool with a bug in its body: a TypeError that mentions an argument, which the old invoke took
    for a bad call from the agent."""
    return len(account_id, "takes one argument")  # type: ignore[call-arg]


@tool("read")
def _broken_lookup(db, key: str) -> str:
    """A tool with a bug in its body: a KeyError."""
    return {}[key]


@pytest.mark.parametrize("spec, arguments", [
    (_buggy.__tbx_tool__, {"account_id": 1}), (_broken_lookup.__tbx_tool__, {"key": "k"})], ids=["TypeError", "KeyError"])
def test_a_bug_inside_a_tool_body_is_still_an_infra_error(tmp_path, spec: ToolSpec, arguments: dict):
    arena = Arena(tmp_path, get_domain("mock"))

    async def over_mcp() -> None:
        infra = InfraLog()
        async with open_tool_session(build_server("mock", [spec], arena.episode.engine, infra), infra) as session:
            await session.call(ToolCall(spec.name, arguments, id="1"))

    try:
        with pytest.raises(InfraError, match=f"tool {spec.name} crashed"):
            invoke(spec, arena.episode.engine, arguments)
        with pytest.raises(InfraError, match=f"tool {spec.name} crashed"):
            asyncio.run(over_mcp())
        # ... while a bad call to the same tool is the agent's mistake, answered before the body runs.
        assert invoke(spec, arena.episode.engine, {}).is_error
    finally:
        arena.close()


@pytest.mark.parametrize("arguments, problem", [
    ({}, "employee_id: required argument is missing"),
    ({"employee_id": 1, "db": 2}, "'db': unknown argument (takes employee_id)"),
    (["employee_id", 1], "arguments must be an object of name: value (given ['employee_id', 1])"),
    ({"employee_id": 2**63}, "employee_id: input should be less than or equal to 9223372036854775807"),
    ({"employee_id": float("nan")}, "employee_id: input should be a finite number (given nan)"),
    ({"employee_id": "x" * 1000}, "(given 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (1002 characters))"),
])
def test_refusals_name_the_argument_and_the_problem(tmp_path, arguments, problem: str):
    arena = Arena(tmp_path, get_domain("travel"))
    try:
        result = invoke(arena.domain.tool("find_bookings"), arena.episode.engine, arguments)
    finally:
        arena.close()
    assert result.is_error and result.text.startswith("Error: invalid arguments for find_bookings: ")
    assert problem in result.text


def test_a_tool_error_echoing_a_huge_argument_is_cut_short(tmp_path):
    arena = Arena(tmp_path, get_domain("travel"))
    try:
        result = invoke(arena.domain.tool("get_booking"), arena.episode.engine, {"confirmation_code": "Q" * 100_000})
    finally:
        arena.close()
    assert result.is_error and result.text.startswith("Error: no booking with confirmation code 'QQQ")
    assert len(result.text) < 600 and result.text.endswith("characters)")


PG_CALLS_PER_DOMAIN = 150


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_postgres_answers_hostile_calls_without_crashing(pg_url: str, name: str):
    """The same fuzz on a PostgreSQL clone, where types are stricter (INTEGER is 32 bits, VARCHAR
    has a length, NUMERIC a precision): what the database refuses must come back as a tool error."""
    from tbx.backend.postgres import PostgresBackend

    domain, backend = get_domain(name), PostgresBackend(pg_url)
    db = backend.clone(backend.ensure_template(f"fuzz_{name}", domain.metadata, domain.base_rows()))
    pool = value_pool(db.engine, domain.metadata)
    played = Counter()

    @settings(FUZZ, max_examples=PG_CALLS_PER_DOMAIN // CALLS_PER_EXAMPLE)
    @given(calls=st.lists(domain_call(domain, pool), min_size=CALLS_PER_EXAMPLE, max_size=CALLS_PER_EXAMPLE))
    def play(calls: list[FuzzCall]) -> None:
        for call in calls:
            try:
                result = invoke(call.tool, db.engine, call.arguments)
            except Exception as exc:
                raise AssertionError(f"harness crash: {_shown(call)} raised {exc!r:.400}") from exc
            played["calls"] += 1
            assert answer_problems(call, result.text, result.is_error) == [], (_shown(call), result.text[:300])

    try:
        play()
    finally:
        backend.drop(db)
        backend.close()
    assert played["calls"] >= PG_CALLS_PER_DOMAIN


@cache
def _sdk_model(spec: ToolSpec):  # the SDK's FuncMetadata
    return func_metadata(spec.fn, skip_names=["db"], structured_output=False)


VALID_CALL = st.one_of([domain_call(get_domain(name), {}, json_only=True, faults=("valid",)) for name in sorted(BUNDLED)])


@given(call=VALID_CALL)
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
def test_valid_arguments_are_coerced_as_the_mcp_sdk_coerces_them(call: FuzzCall):
    """Within the limits the SDK does not set, our check accepts what the SDK's own argument model
    accepts and hands the tool the same values ("5" becomes 5, 5.0 stays 5.0 for a float, ...)."""
    assert validate_arguments(call.tool, call.arguments) == _sdk_model(call.tool).validate_arguments(call.arguments)


def _plain_arguments(spec: ToolSpec, pool: dict[str, tuple], huge: float) -> dict:
    """Required arguments from the first matching database value (1 or "x" when none), with `huge`
    for every number of dollars, hours or percent."""
    arguments = {}
    for p in list(inspect.signature(spec.fn, eval_str=True).parameters.values())[1:]:
        if p.annotation is float:
            arguments[p.name] = huge
        elif p.default is inspect.Parameter.empty:
            fallback = 1 if p.annotation is int else "x"
            arguments[p.name] = next((v for v in pool.get(p.name, ()) if type(v) is type(fallback)), fallback)
    return arguments


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_huge_amounts_are_refused_not_crashed_on(tmp_path, name: str):
    # Found by the fuzz: Decimal.quantize() raised InvalidOperation on 1e26 and more in the money
    # helpers of six domains (travel, retail, auto_insurance, neobank, consulting, hr_payroll).
    arena = Arena(tmp_path, get_domain(name))
    try:
        for spec in arena.domain.tools:
            for huge in (1e26, 1e308, 1.7976931348623157e308):
                arguments = _plain_arguments(spec, arena.pool, huge)
                if huge in arguments.values():
                    result = invoke(spec, arena.episode.engine, arguments)  # raised InfraError before the fix
                    assert result.is_error or name == "clinic", (spec.name, arguments, result.text)
    finally:
        arena.close()


@pytest.mark.parametrize("last_name", ["%", "_______", "é" * 30_000])
def test_consultant_search_is_not_a_like_pattern(tmp_path, last_name: str):
    # Found by the fuzz: find_consultants used ILIKE, so "%" listed every consultant and a pattern
    # over 50,000 bytes made SQLite raise OperationalError (a harness crash).
    arena = Arena(tmp_path, get_domain("consulting"))
    try:
        result = invoke(arena.domain.tool("find_consultants"), arena.episode.engine, {"last_name": last_name})
        exact = invoke(arena.domain.tool("find_consultants"), arena.episode.engine, {"last_name": " alvarez "})
    finally:
        arena.close()
    assert (result.is_error, result.text) == (False, "[]")
    assert {row["last_name"] for row in json.loads(exact.text)} == {"Alvarez"}  # still case-insensitive
