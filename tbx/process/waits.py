"""Bounded waits: every call an episode makes on something that can hang ends within its limit.

- `bounded` awaits with a deadline and turns the timeout into the caller's error type (a hung tool
  call or database is an `InfraError`, a hung user a `UserSimError`, a hung judge a `VerifierError`).
- `off_loop` runs a blocking call (a tool body's SQL, a state dump, a clone) in a thread, so the event
  loop stays free and `bounded` can cut it: a synchronous hang on the loop itself could not be cut
  by anything. The threads are daemons of a small pool of our own (asyncio's default executor has a
  handful of workers that hung calls would use up, and anyio's and concurrent.futures' workers are
  joined at exit, so one hang in a tool body would keep the process from ever exiting). What the
  thread was doing is stopped by the database where it can be: PostgreSQL's `statement_timeout`,
  SQLite's `interrupt()` when the episode database is dropped (`tbx.backend`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], timeout_s: float | None, error: type[Exception], what: str) -> T:
    """Await `awaitable` for at most `timeout_s` (None: no limit); a longer wait raises `error`."""
    if timeout_s is None:
        return await awaitable
    try:
        async with asyncio.timeout(timeout_s):  # cancels this task at the deadline; no extra task
            return await awaitable
    except TimeoutError as exc:
        raise error(f"{what} did not answer within {timeout_s:g} s") from exc


class _Workers:
    """Daemon threads reused for blocking calls: an idle one takes the next call, a new one starts when
    none is idle (so a call that hangs keeps its own thread and never holds up the others), and one
    idle for `IDLE_S` ends. A thread per call would add its start to every tool call."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="tbx-blocking-call", daemon=True).start()
        inbox.put(job)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            try:
                job = inbox.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle and inbox.empty():
                        self._idle.remove(inbox)
                        return
                continue
            job()
            with self._lock:
                self._idle.append(inbox)


_workers = _Workers()


def _settle(future: asyncio.Future, value: Any, failed: bool) -> None:
    if not future.done():
        if failed:
            future.set_exception(value)
        else:
            future.set_result(value)


async def off_loop(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a daemon thread; awaiting it can be cancelled (the thread is then left to
    finish or hang on its own, its result dropped)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            value, failed = function(*args), False
        except BaseException as exc:  # handed to the awaiting task as is
            value, failed = exc, True
        try:
            loop.call_soon_threadsafe(_settle, future, value, failed)
        except RuntimeError:  # the event loop is closed: nobody waits any more
            pass

    _workers.submit(work)
    return await future
