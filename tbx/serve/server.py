"""The MCP server of one session: its task's domain tools plus the user channel.

Built on the SDK's low-level `Server`, one per session, so each session's `instructions` are its
task's agent-facing policy and its handlers reach nothing but its own episode. The domain tools are
listed exactly as the in-process server lists them (the same `MCPServer` tool definitions, listed
by the SDK), and a call's answer is the tool message an in-process agent reads: the same text, the
same errors. Two tools are added: `get_user_message` and `reply_to_user`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.lowlevel import Server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from tbx.serve.campaign import Seat
from tbx.serve.episode import CLOSE, Reply
from tbx.tools.declare import ToolSpec
from tbx.tools.mcp_server import InfraLog, build_server

GET_USER_MESSAGE = "get_user_message"
REPLY_TO_USER = "reply_to_user"
USER_TOOLS = (
    Tool(name=GET_USER_MESSAGE,
         description="Read the user's latest message: at first, the message the user opened the conversation "
                     "with. Reading it again changes nothing.",
         input_schema={"type": "object", "properties": {}}),
    Tool(name=REPLY_TO_USER,
         description="Send the user a message (a question, or your answer when the work is done) and return the "
                     "user's reply. When the user ends the conversation, the reply says so and the episode is over.",
         input_schema={"type": "object", "properties": {"text": {"type": "string",
                                                                 "description": "Your message to the user."}},
                       "required": ["text"]}),
)
USER_TOOL_NAMES = frozenset(t.name for t in USER_TOOLS)


async def domain_tools(domain: str, specs: Sequence[ToolSpec]) -> tuple[Tool, ...]:
    """The MCP listing of `specs` as the in-process episode server gives it (no database needed)."""
    listed = await build_server(domain, specs, None, InfraLog()).list_tools()  # type: ignore[arg-type]
    clash = {t.name for t in listed} & USER_TOOL_NAMES
    if clash:
        raise ValueError(f"domain {domain} has tools named like the user channel: {sorted(clash)}")
    return tuple(listed)


NO_ATTEMPT = f"Error: no attempt is left for this session to play (others took them). {CLOSE}"


async def dispatch(seat: Seat, name: str, arguments: dict[str, Any]) -> Reply:
    """One client call: the user channel, or a domain tool (one turn of the episode). The first of
    them claims the session's episode."""
    if name in USER_TOOL_NAMES:
        extra = sorted(set(arguments) - ({"text"} if name == REPLY_TO_USER else set()))
        if extra:
            return Reply(f"Error: unknown argument(s) {', '.join(extra)} for {name}", is_error=True)
        if name == REPLY_TO_USER and not isinstance(arguments.get("text"), str):
            return Reply("Error: reply_to_user needs the argument text, a string", is_error=True)
    episode = seat.take()
    if episode is None:
        return Reply(NO_ATTEMPT, is_error=True)
    if name == GET_USER_MESSAGE:
        return await episode.user_message()
    if name == REPLY_TO_USER:
        return await episode.reply_to_user(arguments["text"])
    return await episode.call_tool(name, arguments)  # unknown names too: the episode's own server answers


def episode_server(seat: Seat, version: str = "") -> Server:
    """A low-level MCP server for one session: its view, and its episode once claimed."""
    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[*seat.view.tools, *USER_TOOLS])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        reply = await dispatch(seat, params.name, dict(params.arguments or {}))
        return CallToolResult(content=[TextContent(type="text", text=reply.text)], is_error=reply.is_error)

    return Server("tbx", version=version, title="tbx episode", instructions=seat.view.instructions,
                  on_list_tools=list_tools, on_call_tool=call_tool)
