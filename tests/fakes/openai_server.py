"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions API, scripted by tests.

It serves `/v1/chat/completions`, `/v1/models` and `/health` on an ephemeral port from a thread
(stdlib `http.server`), answers chat requests from a queue of scripted replies (text, native tool
calls, hermes text, delays, error statuses, malformed bodies) and records every request, so
tests exercise the real client, retries and timeouts over a real socket.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Scripted:
    """One scripted answer to a chat request."""

    status: int = 200
    body: Any = None  # sent as JSON
    raw: bytes | None = None  # sent verbatim instead of `body` (malformed replies)
    delay_s: float = 0.0  # wait before answering (client timeouts)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None


def completion(message: dict[str, Any], usage: tuple[int, int] = (11, 7), finish_reason: str = "stop") -> Scripted:
    return Scripted(body={
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    })


def text_reply(text: str, usage: tuple[int, int] = (11, 7)) -> Scripted:
    return completion({"role": "assistant", "content": text}, usage)


def tool_call_reply(name: str, arguments: dict[str, Any], call_id: str = "call_1",
                    usage: tuple[int, int] = (11, 7)) -> Scripted:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return completion({"role": "assistant", "content": None, "tool_calls": [call]}, usage, "tool_calls")


def hermes_reply(name: str, arguments: dict[str, Any], usage: tuple[int, int] = (11, 7)) -> Scripted:
    """A tool call written as hermes text in `content` (a server without a tool-call parser)."""
    payload = json.dumps({"name": name, "arguments": arguments})
    return text_reply(f"<tool_call>\n{payload}\n</tool_call>", usage)


def status_reply(status: int, message: str = "scripted error") -> Scripted:
    return Scripted(status=status, body={"error": {"message": message, "code": status}})


def malformed_reply() -> Scripted:
    return Scripted(raw=b'{"choices": [{"message": ')


def delayed(reply: Scripted, delay_s: float) -> Scripted:
    return Scripted(reply.status, reply.body, reply.raw, delay_s, reply.headers)


class FakeOpenAIServer:
    """`with FakeOpenAIServer() as server:` then `server.script(...)`, `server.base_url`, `server.requests`."""

    def __init__(self, models: Sequence[str] = ("fake-model",), default: Scripted | None = None,
                 host: str = "127.0.0.1", port: int = 0, answer: Callable[[Any], Scripted] | None = None):
        self.models = list(models)
        self.default = default  # answer when the queue is empty; None: a 500 that names the problem
        # answers each chat request from its body instead of the queue (a scripted agent); not named
        # `respond`, which subclasses such as tests/fakes/responding.RespondingServer use behind _next_reply
        self.answer = answer
        self.requests: list[Recorded] = []
        self.in_flight = 0  # chat requests being answered now
        self.max_in_flight = 0  # the most at once, to check a client's concurrency limit
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def script(self, *replies: Scripted) -> None:
        with self._lock:
            self._queue.extend(replies)

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that are sleeping through a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        """Serve in the calling thread (the stand-in vLLM executable uses this)."""
        self._httpd.serve_forever(poll_interval=0.05)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next_reply(self) -> Scripted:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default or status_reply(500, "fake server: no scripted reply left")

    def _count_in_flight(self, step: int) -> None:
        with self._lock:
            self.in_flight += step
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
                pass

            def do_GET(self) -> None:  # stdlib name
                server.requests.append(Recorded("GET", self.path, self._headers(), None))
                if self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/v1/models":
                    data = [{"id": m, "object": "model", "owned_by": "fake"} for m in server.models]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:  # stdlib name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                server.requests.append(Recorded("POST", self.path, self._headers(), body))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                reply = server.answer(body) if server.answer is not None else server._next_reply()
                server._count_in_flight(+1)  # counted until the answer is sent, so no race with the client
                try:
                    stopped = bool(reply.delay_s) and server._stopping.wait(reply.delay_s)
                finally:
                    server._count_in_flight(-1)
                if stopped:
                    return
                if isinstance(body, dict) and body.get("stream") and reply.status == 200 and reply.raw is None:
                    self._send(200, _event_stream(reply.body), {"content-type": "text/event-stream"})
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self._send(reply.status, payload, reply.headers)

            def _headers(self) -> dict[str, str]:
                return {name.lower(): value for name, value in self.headers.items()}

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    headers = {"content-type": "application/json"} | (headers or {})
                    self.send_header("content-length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test); nothing to answer

        return Handler


def _event_stream(body: dict[str, Any]) -> bytes:
    """A scripted completion as a chat-completions stream (`"stream": true`): one chunk with the whole
    message, one with the finish reason and usage, then `[DONE]`."""
    choice = body["choices"][0]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body.get("created", 0), "model": body["model"]}
    chunks = [base | {"choices": [{"index": 0, "delta": choice["message"], "finish_reason": None}]},
              base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                      "usage": body.get("usage")}]
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + b"data: [DONE]\n\n"
