"""An async client for OpenAI-compatible chat-completions endpoints (vLLM or any provider).

The policy, the LLM user and the LLM judge all talk to such endpoints; this module is their one
HTTP seam. httpx carries the requests (timeouts; at most `endpoint.concurrency` in flight, as its
connection pool) and tenacity retries them (bounded, exponential backoff with full jitter, a server's
`Retry-After` honoured up to the cap). tbx's own part: which failures are worth another try
(timeouts, connection errors, unreadable bodies, 429, 5xx) and how each is named, the token counts
of each reply, and the API key, read from an environment variable at call time (never stored, logged
or shown in an error) and masked (`***`) in everything the endpoint sends back: a reply that repeats
the key (a misbehaving or hostile provider) reaches the transcript, the tools, the store, the tables
and the logs without it, as an error body does. Our messages go out through `tbx.llm.wire`; what
comes back is read by `tbx.llm.parsing`.

After the retries are spent it raises `EndpointError` (an `InfraError`) naming the endpoint and the
cause; callers that are not the agent's endpoint (user, judge) re-raise it as their own error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import tenacity

from tbx.errors import ConfigError, InfraError
from tbx.messages import Usage

if TYPE_CHECKING:
    from tbx.config import EndpointConfig

logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise (Hydra logs INFO)
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 30.0


class EndpointError(InfraError):
    """The endpoint did not answer usefully after the allowed attempts.

    `status` is the last HTTP status (None for a timeout, a connection error or an unreadable
    body); `attempts` is how many requests were sent; `body` a key-free excerpt of the refusal's
    body (what the agent's policy reads to tell a context overflow from other refusals).
    """

    def __init__(self, message: str, status: int | None = None, attempts: int = 0, body: str = ""):
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.body = body


@dataclass(frozen=True)
class ChatResult:
    message: dict[str, Any]  # the choice's `message` object as the server sent it
    usage: Usage
    finish_reason: str | None


class _RetryableError(Exception):
    """One attempt failed in a way worth another try (internal to the retry loop)."""

    def __init__(self, cause: str, status: int | None = None, retry_after_s: float | None = None):
        super().__init__(cause)
        self.cause, self.status, self.retry_after_s = cause, status, retry_after_s


class ChatClient:
    """Chat-completions over one endpoint; one instance is shared by all episodes of a run.

    The `httpx.AsyncClient` is created on first use inside the running event loop (its connections
    belong to that loop), so a client built at config time works in whatever loop later uses it.
    `backoff_s` is the first retry's backoff window and `max_backoff_s` caps every wait, a server's
    `Retry-After` included (tests shorten both).
    """

    def __init__(self, endpoint: EndpointConfig, *, role: str = "endpoint", backoff_s: float = 0.5,
                 max_backoff_s: float = MAX_BACKOFF_S):
        if not endpoint.base_url:
            raise ConfigError("config", f"{role}.endpoint.base_url", "is not set",
                              "set it to the server's /v1 URL, e.g. http://127.0.0.1:8000/v1")
        if endpoint.max_retries < 0 or endpoint.concurrency < 1 or endpoint.timeout_s <= 0:
            raise ConfigError("config", f"{role}.endpoint", "needs max_retries >= 0, concurrency >= 1, timeout_s > 0",
                              f"got max_retries={endpoint.max_retries}, concurrency={endpoint.concurrency}, "
                              f"timeout_s={endpoint.timeout_s}")
        self.endpoint = endpoint
        self.role = role
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"
        self._max_backoff_s = max_backoff_s
        self._backoff = tenacity.wait_random_exponential(multiplier=backoff_s, max=max_backoff_s)
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._api_key()  # fail at build time, not mid-run, when the variable is missing

    def __repr__(self) -> str:
        return f"ChatClient(role={self.role!r}, url={self.url!r}, model={self.endpoint.model!r})"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   **overrides: Any) -> ChatResult:
        """One chat completion. `overrides` replace or add request fields (temperature, seed, ...)."""
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages,
            "temperature": self.endpoint.temperature,
            "max_tokens": self.endpoint.max_tokens,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        body.update(overrides)
        return await self._post_with_retries(body)

    async def aclose(self) -> None:
        """Close the connections; those of an event loop that is gone are dropped (they cannot be awaited)."""
        if self._http is not None and self._loop is asyncio.get_running_loop():
            await self._http.aclose()
        self._http = None

    async def _post_with_retries(self, body: dict[str, Any]) -> Any:
        """`body` posted to `self.url` until an answer reads (`_read_result`), a failure is not worth
        another try, or `max_retries` retries are spent. A fresh `AsyncRetrying` per request: its
        state is per call, and concurrent requests share this client."""
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.endpoint.max_retries + 1), wait=self._wait,
            retry=tenacity.retry_if_exception_type(_RetryableError), retry_error_callback=self._give_up,
        )
        return await retrying(self._post_once, body)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """The server's Retry-After when it sent one (capped), else exponential backoff with full jitter."""
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, _RetryableError) and error.retry_after_s is not None:
            return min(error.retry_after_s, self._max_backoff_s)
        return self._backoff(state)

    def _give_up(self, state: tenacity.RetryCallState) -> NoReturn:
        error = state.outcome.exception() if state.outcome is not None else None
        assert isinstance(error, _RetryableError), error  # tenacity retries nothing else
        raise EndpointError(
            f"{self.role} endpoint {self.url} (model {self.endpoint.model!r}) failed after "
            f"{state.attempt_number} attempt(s): {error.cause}", status=error.status, attempts=state.attempt_number,
        ) from None

    async def _post_once(self, body: dict[str, Any]) -> Any:
        http = self._client()
        try:
            response = await http.post(self.url, json=body, headers=self._headers())
        except httpx.TimeoutException:
            raise _RetryableError(f"timed out after {self.endpoint.timeout_s} s") from None
        except httpx.TransportError as error:
            raise _RetryableError(f"connection error ({type(error).__name__})") from None
        except httpx.RequestError as error:  # a body that cannot be decoded, too many redirects
            raise _RetryableError(f"request failed ({type(error).__name__})") from None
        if response.status_code in RETRY_STATUS:
            raise _RetryableError(f"HTTP {response.status_code}: {self._snippet(response.text)}",
                                  status=response.status_code, retry_after_s=_retry_after(response))
        if response.status_code >= 400:
            raise EndpointError(
                f"{self.role} endpoint {self.url} (model {self.endpoint.model!r}) rejected the request with "
                f"HTTP {response.status_code} (not retried): {self._snippet(response.text)}",
                status=response.status_code, attempts=1, body=self._snippet(response.text, 1000),
            )
        return self._read_result(response)

    def _read_result(self, response: httpx.Response) -> ChatResult:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
            message = mask_secret(message, self._known_key())
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise _RetryableError(f"unreadable response body ({error}): {self._snippet(response.text)}",
                                  status=response.status_code) from None
        usage = data.get("usage") or {}
        return ChatResult(
            message=message,
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            finish_reason=choice.get("finish_reason"),
        )

    def _client(self) -> httpx.AsyncClient:
        """This event loop's connections: a new loop gets new ones (those of the old loop are dropped).
        At most `concurrency` connections, so at most that many requests in flight; a request waits for
        one without a time limit (`pool=None`), as the episode's own limits bound it."""
        loop = asyncio.get_running_loop()
        if self._http is None or loop is not self._loop:
            limits = httpx.Limits(max_connections=self.endpoint.concurrency,
                                  max_keepalive_connections=self.endpoint.concurrency)
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.endpoint.timeout_s, pool=None), limits=limits)
            self._loop = loop
        return self._http

    def _headers(self) -> dict[str, str]:
        key = self._api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _api_key(self) -> str | None:
        """Read at call time so a rotated key is picked up and the key never lives on the object."""
        if not self.endpoint.api_key_env:
            return None
        key = os.environ.get(self.endpoint.api_key_env)
        if not key:
            raise ConfigError("config", f"{self.role}.endpoint.api_key_env",
                              f"environment variable {self.endpoint.api_key_env} is empty or unset",
                              f"export {self.endpoint.api_key_env}=<key>, or set api_key_env: null for a keyless server")
        return key

    def _known_key(self) -> str | None:
        """The key as it stands now (None when there is none), to mask; never an error."""
        return os.environ.get(self.endpoint.api_key_env) if self.endpoint.api_key_env else None

    def _snippet(self, text: str, limit: int = 300) -> str:
        """A short, key-free excerpt of a response body for error messages."""
        text = " ".join(mask_secret(text, self._known_key()).split())
        return text[:limit] + ("..." if len(text) > limit else "")


def mask_secret(value: Any, secret: str | None) -> Any:
    """`value` (a string, or lists and mappings of them, as JSON reads) with every copy of `secret` replaced
    by `***`, raw or as it reads inside a JSON string (a tool call's arguments); other values as they are."""
    if not secret:
        return value
    if isinstance(value, str):
        for form in dict.fromkeys((secret, json.dumps(secret)[1:-1])):
            value = value.replace(form, "***")
        return value
    if isinstance(value, dict):
        return {key: mask_secret(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secret(item, secret) for item in value]
    return value


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a `Retry-After` header asks for (a number, or an HTTP date: its distance from now);
    None when there is none or it does not read."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, by RFC 5322
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())
