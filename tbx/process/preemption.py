"""A job's preemption signal, taken where the stage's event loop can unwind.

submitit's handler for the preemption signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise;
Slurm sends it before preempting a job or at its time limit) checkpoints the job and raises
SystemExit(144) for a requeue, wherever the main thread is at that moment. Our stages spend their
time in an asyncio event loop, so the exit lands inside whichever callback is running: inside an
MCP session's task group, say, from which some tasks can then never finish, and `asyncio.run`
waits for them forever on its way out (seen in the local requeue test, about one run in ten: the
job stayed in asyncio's `_cancel_all_tasks` until the test's wait ran out, and was never requeued).

So a job runs its stage through `call_preemptible`. While an event loop started by `run_loop` is
running, the signal cancels the loop's main task instead, as Ctrl-C does for `asyncio.run`: every
`finally` and `async with` of the stage unwinds, the loop closes, and then the handler that was
installed before (submitit's: checkpoint, requeue) runs. When no such loop runs, the signal goes to
that handler at once, as before. Outside a job (no handler installed) nothing changes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Deferral:
    """This process's state (signal handlers run in the main thread only): the event loops
    `run_loop` is in, innermost last, each [loop, main task] (None until the loop runs), and
    whether a deferred signal was caught."""

    loops: list[list[Any]] = []
    caught: bool = False


def preemption_signal() -> signal.Signals | None:
    """The signal submitit treats as preemption (its own rule: "SIG" + SUBMITIT_PREEMPT_SIGNAL,
    USR2 by default); None for a name this platform lacks."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, name, None)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with its main task where `call_preemptible`'s handler can cancel it.
    The loop stays registered until `asyncio.run` has closed it, so a signal during its shutdown
    is deferred too; after a deferred signal a new loop does not start."""
    entry: list[Any] = [None, None]

    async def root() -> T:
        entry[:] = [asyncio.get_running_loop(), asyncio.current_task()]
        return await main

    _Deferral.loops.append(entry)
    try:
        if _Deferral.caught:
            main.close()
            raise asyncio.CancelledError("preempted before this event loop started")
        return asyncio.run(root())
    finally:
        _Deferral.loops.remove(entry)


def _defer(number: int, frame: Any, previous: Callable[[int, Any], Any]) -> None:
    if not _Deferral.loops:  # plain code, no event loop: as submitit would
        previous(number, frame)
        return
    if _Deferral.caught:  # already unwinding: one cancellation, one requeue
        return
    _Deferral.caught = True
    loop, task = _Deferral.loops[-1]
    if task is not None and not task.done():
        loop.call_soon_threadsafe(task.cancel)  # safe in a signal handler: it queues and wakes the loop


def call_preemptible(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)`, with the preemption signal deferred to the end of the event loop it runs.

    A signal caught while a `run_loop` loop runs cancels that loop's main task; when `function`
    then raises the cancellation, the handler installed before runs (submitit's exits the job for
    its requeue). If `function` returns, its result is returned: its work was done. Only in the
    main thread, and only where a handler is installed (inside a submitit job)."""
    signum = preemption_signal()
    if signum is None or threading.current_thread() is not threading.main_thread():
        return function(*args)
    previous = signal.getsignal(signum)
    if not callable(previous):  # not a job: the default or ignored; leave it so
        return function(*args)
    _Deferral.caught = False
    signal.signal(signum, lambda number, frame: _defer(number, frame, previous))
    try:
        return function(*args)
    except asyncio.CancelledError:
        if not _Deferral.caught:
            raise
        signal.signal(signum, previous)
        previous(signum, None)  # the event loop has closed: checkpoint and requeue now
        raise
    finally:
        signal.signal(signum, previous)
        _Deferral.caught = False
