"""Serve a domain's tools over MCP, bound to one episode's database, and talk to them.

The server is the official SDK's `MCPServer`; the agent side is an `mcp.Client` session: it lists
the tools (JSON schemas from each function's type hints and docstring) and calls them. In
process the transport is in-memory; the same server can be run over stdio or HTTP by the SDK.

Where we depart from the SDK: it would check the arguments against its own model and answer a bad
call with pydantic's multi-line report (and silently drop unknown arguments). Here it passes the
arguments through untouched and `runtime.invoke` checks them, so an MCP call and a direct call
(replay, reference solutions) answer alike; the SDK's "Error executing tool NAME: " prefix is
removed for the same reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import mcp
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import ConfigDict
from sqlalchemy import Engine

from tbx.errors import InfraError
from tbx.messages import Message, ToolCall, ToolSchema
from tbx.process.waits import off_loop
from tbx.tools.declare import ToolSpec
from tbx.tools.runtime import invoke

# The SDK logs every refused argument and tool error at INFO/ERROR with a rich traceback; for the
# harness these are normal agent mistakes, reported to the agent and counted by the episode.
for _name in ("mcp", "mcp.server", "mcp.server.mcpserver", "mcp.server.lowlevel"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


@dataclass
class InfraLog:
    """Harness faults raised inside tools, read by the episode after each call."""

    errors: list[str] = field(default_factory=list)


class _PassedThrough(ArgModelBase):
    """The SDK's argument model for every tool: accepts any arguments as sent, so the one check is
    `invoke`'s."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


_PASS_THROUGH = FuncMetadata(arg_model=_PassedThrough)


Gate = Callable[[str], Awaitable[None]]  # runs before a tool's body (injected faults, tbx.episodes.faults); may raise InfraError


@dataclass
class Binding:
    """What a server's tools act on: one episode's database, its harness-fault log and its fault gate.
    A kept session is bound again to each episode it serves (`ToolSessions`)."""

    engine: Engine | None
    infra: InfraLog
    gate: Gate | None = None


def _bind(spec: ToolSpec, binding: Binding):
    signature = inspect.signature(spec.fn)
    params = list(signature.parameters.values())[1:]

    async def call(**arguments: Any) -> str:
        engine, infra, gate = binding.engine, binding.infra, binding.gate  # the episode's, as the call starts
        try:
            if gate is not None:
                await gate(spec.name)
            # off the event loop: a tool body that hangs (a runaway query, a blocked lock) is cut by the
            # session's per-call timeout instead of freezing every episode of the process
            result = await off_loop(invoke, spec, engine, arguments)
        except InfraError as exc:
            infra.errors.append(str(exc))
            raise ToolError("internal error: the tool service failed") from exc
        if result.is_error:
            raise ToolError(result.text)
        return result.text

    call.__name__ = spec.name
    call.__doc__ = spec.description
    call.__signature__ = signature.replace(parameters=params, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": str}
    return call


@cache
def _prototype(spec: ToolSpec) -> Tool:
    """The MCP tool definition (argument model, JSON schema) of `spec`, built once per process:
    building it is most of a server's start-up cost, and only the bound function differs."""
    annotations = ToolAnnotations(read_only_hint=spec.kind == "read", destructive_hint=spec.kind == "write")
    typed = Tool.from_function(_bind(spec, Binding(None, InfraLog())), name=spec.name, description=spec.description,
                               annotations=annotations, structured_output=False)
    update: dict[str, Any] = {"fn_metadata": _PASS_THROUGH}  # the schema stays the typed one
    if spec.schema is not None:  # or the one the tool's own declaration gives (tbx/tau2)
        update["parameters"] = spec.schema
    return typed.model_copy(update=update)


def _server(name: str, specs: Iterable[ToolSpec], binding: Binding) -> MCPServer:
    tools = [_prototype(spec).model_copy(update={"fn": _bind(spec, binding)}) for spec in specs]
    return MCPServer(name, tools=tools, log_level="CRITICAL")


def build_server(name: str, specs: Iterable[ToolSpec], engine: Engine, infra: InfraLog,
                 gate: Gate | None = None) -> MCPServer:
    """An MCP server whose tools act on `engine` (one episode's database)."""
    return _server(name, specs, Binding(engine, infra, gate))


class ToolSession:
    """The agent's side: the tool schemas, and calls that return the tool message."""

    def __init__(self, client: mcp.Client, schemas: tuple[ToolSchema, ...], infra: InfraLog,
                 timeout_s: float | None = None):
        self._client = client
        self.schemas = schemas
        self.infra = infra
        self.timeout_s = timeout_s  # a call that takes longer is a harness fault (None: no limit)
        self.calls = 0
        self.errors = 0
        self.seconds = 0.0  # wall time spent in tool calls, MCP round trip included

    async def call(self, call: ToolCall) -> Message:
        self.calls += 1
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await self._client.call_tool(call.name, call.arguments)
        except TimeoutError as exc:
            raise InfraError(f"tool {call.name} did not answer within {self.timeout_s} s") from exc
        except mcp.MCPError as exc:  # protocol-level refusal (bad request): the agent's mistake
            self.errors += 1
            return Message(role="tool", content=f"Error: {exc}", tool_call_id=call.id, name=call.name, is_error=True)
        finally:
            self.seconds += time.perf_counter() - start
        if self.infra.errors:
            raise InfraError(self.infra.errors[-1])
        text = "\n".join(getattr(part, "text", "") for part in result.content)
        if result.is_error:
            self.errors += 1
            text = text.removeprefix(f"Error executing tool {call.name}: ")
            if not text.startswith("Error"):
                text = f"Error: {text}"
        return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, is_error=result.is_error)


async def listed_schemas(client: mcp.Client) -> tuple[ToolSchema, ...]:
    """The tools a session lists, as the agent is shown them."""
    listed = await client.list_tools()
    return tuple(ToolSchema(t.name, t.description or "", t.input_schema) for t in listed.tools)


@asynccontextmanager
async def open_tool_session(server: MCPServer, infra: InfraLog,
                            timeout_s: float | None = None) -> AsyncIterator[ToolSession]:
    error: Exception | None = None
    async with mcp.Client(server) as client:
        schemas = await listed_schemas(client)
        try:
            yield ToolSession(client, schemas, infra, timeout_s)
        except Exception as exc:  # re-raised below, outside the client's task group, which would wrap it
            error = exc
    if error is not None:
        raise error


@dataclass
class _Kept:
    """An open session of a kept server: its binding, client, listed schemas, and the task holding it."""

    binding: Binding
    client: mcp.Client
    schemas: tuple[ToolSchema, ...]
    stop: asyncio.Event
    holder: asyncio.Task

    async def close(self) -> None:
        self.stop.set()
        try:
            await self.holder
        except Exception:  # a session that failed is simply gone
            pass


async def _hold(server: MCPServer, ready: asyncio.Future, stop: asyncio.Event) -> None:
    """Open a session on `server` and keep it open until `stop` (the SDK's client must be closed by
    the task that opened it)."""
    try:
        async with mcp.Client(server) as client:
            ready.set_result((client, await listed_schemas(client)))
            await stop.wait()
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc)
        raise


class ToolSessions:
    """MCP sessions kept open across one process's episodes: one episode at a time each, bound again to
    that episode's database, fault log and gate (setting a session up is a large part of a short episode).
    The agent's side is the same MCP session and call path as a fresh one; what differs is only that
    the server and client outlive the episode. A session whose episode raised or whose tools failed is
    closed, never handed to another episode. Close them with `aclose` in the loop that opened them."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, tuple[str, ...]], list[_Kept]] = {}
        self._open: list[_Kept] = []

    @asynccontextmanager
    async def session(self, name: str, specs: Iterable[ToolSpec], engine: Engine, infra: InfraLog,
                      gate: Gate | None = None, timeout_s: float | None = None) -> AsyncIterator[ToolSession]:
        specs = tuple(specs)
        idle = self._idle.setdefault((name, tuple(spec.name for spec in specs)), [])
        kept = idle.pop() if idle else await self._start(name, specs)
        kept.binding.engine, kept.binding.infra, kept.binding.gate = engine, infra, gate
        reusable = False
        try:
            yield ToolSession(kept.client, kept.schemas, infra, timeout_s)
            reusable = not infra.errors
        finally:
            kept.binding.engine, kept.binding.infra, kept.binding.gate = None, InfraLog(), None
            if reusable:
                idle.append(kept)
            else:
                self._open.remove(kept)
                await kept.close()

    async def _start(self, name: str, specs: tuple[ToolSpec, ...]) -> _Kept:
        binding, stop = Binding(None, InfraLog()), asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        holder = asyncio.create_task(_hold(_server(name, specs, binding), ready, stop))
        client, schemas = await ready
        kept = _Kept(binding, client, schemas, stop, holder)
        self._open.append(kept)
        return kept

    async def aclose(self) -> None:
        kept, self._open, self._idle = self._open, [], {}
        for item in kept:
            await item.close()
