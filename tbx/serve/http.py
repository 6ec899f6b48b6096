"""Episodes over streamable HTTP: one MCP session plays one episode, on its own server.

The SDK's `StreamableHTTPSessionManager` serves every session from one server, and tells the server
neither which session a request belongs to before `initialize` nor when a session ends. A served
episode needs both: its `instructions` are its task's policy, and a session that ends early is
recorded. So `EpisodeSessions` does the manager's stateful part with a server per session and
otherwise the SDK's own pieces: each session is a `StreamableHTTPServerTransport` (the protocol,
SSE, DELETE, the idle timeout) driven by `serve_loop` (the handshake and the handlers); when the loop
returns (the client's DELETE, `idle_timeout_s` without a request in flight after a client died, a
crash) the session is over. Bearer authentication is the SDK's middleware with a fixed token.

A session needs the initialize handshake (protocol versions up to 2025-11-25): a request announcing
a 2026-07-28 per-request envelope gets `UNSUPPORTED_PROTOCOL_VERSION` naming those versions, which
the SDK clients' `mode="auto"` answers by falling back to the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import uuid4

import anyio
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION, ErrorData, JSONRPCError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from tbx.process.listen import start_listening
from tbx.serve import LOOPBACK
from tbx.serve.campaign import Campaign, Seat
from tbx.serve.server import episode_server

PATH = "/mcp"


class FixedToken:
    """The SDK's `TokenVerifier` for one bearer token (read from the environment, kept in memory only)."""

    def __init__(self, token: str):
        self._token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token.encode()):
            return AccessToken(token="***", client_id="bearer", scopes=[])
        return None


def _error(status: int, code: int, message: str, data: Any = None) -> Response:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message, data=data))
    return Response(body.model_dump_json(by_alias=True, exclude_none=True), status_code=status,
                    media_type="application/json")


class EpisodeSessions:
    """The ASGI app at /mcp: routes each request to its session; a request without one opens a
    session on the next pending attempt."""

    def __init__(self, campaign: Campaign, idle_timeout_s: float, security: TransportSecuritySettings | None,
                 version: str = ""):
        self.campaign, self.idle_timeout_s, self.security, self.version = campaign, idle_timeout_s, security, version
        self.sessions: dict[str, StreamableHTTPServerTransport] = {}
        self._group: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                self._group = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Request(scope).headers
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is not None:
            transport = self.sessions.get(session_id)
            if transport is None:
                await _error(404, INVALID_REQUEST, "Session not found")(scope, receive, send)
            else:
                await transport.handle_request(scope, receive, send)
            return
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _error(400, UNSUPPORTED_PROTOCOL_VERSION,
                         "one MCP session is one episode: open it with the initialize handshake",
                         {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version})(scope, receive, send)
            return
        view = self.campaign.next_view()
        if view is None:
            await _error(503, INTERNAL_ERROR, f"no attempt left to serve ({len(self.campaign.in_flight)} still "
                                              "being played)")(scope, receive, send)
            return
        await self._open(Seat(self.campaign, view), scope, receive, send)

    async def _open(self, seat: Seat, scope: Scope, receive: Receive, send: Send) -> None:
        """Start a session and let its transport answer the request that opens it; a refused opening
        (not an initialize, a bad header) leaves nothing behind."""
        session_id = uuid4().hex
        transport = StreamableHTTPServerTransport(mcp_session_id=session_id, is_json_response_enabled=False,
                                                  event_store=None, security_settings=self.security,
                                                  idle_timeout=self.idle_timeout_s)
        server = episode_server(seat, self.version)

        async def run_session(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            try:
                async with transport.connect() as (read_stream, write_stream):
                    task_status.started()
                    with transport.idle_scope or anyio.CancelScope():
                        async with server.lifespan(server) as state:
                            await serve_loop(server, read_stream, write_stream, lifespan_state=state,
                                             session_id=session_id)
            except Exception as exc:  # a broken session ends like a closed one
                print(f"serve: session {session_id} failed: {exc!r}", file=sys.stderr)
            finally:
                self.sessions.pop(session_id, None)
                if not transport.is_terminated:
                    with anyio.CancelScope(shield=True):
                        await transport.terminate()
                seat.end()

        assert self._group is not None, "EpisodeSessions.run() is not entered"
        self.sessions[session_id] = transport
        await self._group.start(run_session)
        status = await _answer_with_status(transport, scope, receive, send)
        if status is None or status >= 400:
            with anyio.CancelScope(shield=True):
                await transport.terminate()

    async def close_all(self) -> None:
        for transport in list(self.sessions.values()):
            with anyio.CancelScope(shield=True):
                await transport.terminate()


async def _answer_with_status(transport: StreamableHTTPServerTransport, scope: Scope, receive: Receive,
                              send: Send) -> int | None:
    status: int | None = None

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await transport.handle_request(scope, receive, watch)
    return status


def http_app(sessions: EpisodeSessions, token: str | None) -> Starlette:
    """The Starlette app: /mcp, behind a bearer token when one is given."""
    endpoint: Any = sessions
    middleware = []
    if token is not None:
        endpoint = RequireAuthMiddleware(sessions, required_scopes=[])
        middleware = [Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(FixedToken(token)))]
    return Starlette(routes=[Route(PATH, endpoint=endpoint)], middleware=middleware,
                     lifespan=lambda app: sessions.run())


def transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection on a loopback address, as the SDK's own app sets it."""
    if host not in LOOPBACK:
        return None
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


async def serve_http(campaign: Campaign, host: str, port: int, token: str | None, idle_timeout_s: float,
                     announce: Callable[[str], None], version: str = "", grace_s: float = 10.0) -> None:
    """Serve until every attempt is final (then give the last clients `grace_s` to close their
    sessions) or the process is stopped. `announce` gets the URL once the port is bound."""
    sessions = EpisodeSessions(campaign, idle_timeout_s, transport_security(host), version)
    server, serving, base = await start_listening(
        uvicorn.Config(http_app(sessions, token), host=host, port=port, log_level="warning", lifespan="on",
                       timeout_graceful_shutdown=5), "conf/stage/serve.yaml", "serve.port")
    announce(f"{base}{PATH}")
    finished = asyncio.create_task(campaign.done.wait())
    try:
        await asyncio.wait({serving, finished}, return_when=asyncio.FIRST_COMPLETED)
        if finished.done():
            with anyio.move_on_after(grace_s):
                while sessions.sessions:
                    await asyncio.sleep(0.05)
            await sessions.close_all()
            server.should_exit = True
        await serving
    finally:
        finished.cancel()
