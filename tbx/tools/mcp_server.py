"""Serve a domain's tools over MCP, bound to one episode's database, and talk to them.

The server is the official SDK's `MCPServer`; the agent side is an `mcp.Client` session: it lists
the tools (JSON schemas from each function's type hints and docstring) and calls them. In
process the transport is in-memory; the same server can be run over stdio or HTTP by the SDK.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import mcp
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from sqlalchemy import Engine

from tbx.errors import InfraError
from tbx.messages import Message, ToolCall, ToolSchema
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


def _bind(spec: ToolSpec, engine: Engine | None, infra: InfraLog):  # noqa: ANN202
    signature = inspect.signature(spec.fn)
    params = list(signature.parameters.values())[1:]

    async def call(**arguments: Any) -> str:
        try:
            result = invoke(spec, engine, arguments)
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
    return Tool.from_function(_bind(spec, None, InfraLog()), name=spec.name, description=spec.description,
                              annotations=annotations, structured_output=False)


def build_server(name: str, specs: Iterable[ToolSpec], engine: Engine, infra: InfraLog) -> MCPServer:
    """An MCP server whose tools act on `engine` (one episode's database)."""
    tools = [_prototype(spec).model_copy(update={"fn": _bind(spec, engine, infra)}) for spec in specs]
    return MCPServer(name, tools=tools, log_level="CRITICAL")


class ToolSession:
    """The agent's side: the tool schemas, and calls that return the tool message."""

    def __init__(self, client: mcp.Client, schemas: tuple[ToolSchema, ...], infra: InfraLog):
        self._client = client
        self.schemas = schemas
        self.infra = infra
        self.calls = 0
        self.errors = 0
        self.seconds = 0.0  # wall time spent in tool calls, MCP round trip included

    async def call(self, call: ToolCall) -> Message:
        self.calls += 1
        start = time.perf_counter()
        try:
            result = await self._client.call_tool(call.name, call.arguments)
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
            if not text.startswith("Error"):
                text = f"Error: {text}"
        return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, is_error=result.is_error)


@asynccontextmanager
async def open_tool_session(server: MCPServer, infra: InfraLog) -> AsyncIterator[ToolSession]:
    error: Exception | None = None
    async with mcp.Client(server) as client:
        listed = await client.list_tools()
        schemas = tuple(ToolSchema(t.name, t.description or "", t.input_schema) for t in listed.tools)
        try:
            yield ToolSession(client, schemas, infra)
        except Exception as exc:  # re-raised below, outside the client's task group, which would wrap it
            error = exc
    if error is not None:
        raise error
