"""The preemption signal inside a job waits for the stage's event loop to unwind (tbx.process.preemption).

A stand-in for submitit's handler records when it runs and exits as submitit's does
(SystemExit 144); the signal is really sent to this process, from inside the event loop."""

import asyncio
import os
import signal

import anyio
import pytest

from tbx.process.preemption import call_preemptible, preemption_signal, run_loop

SIGNAL = preemption_signal()


@pytest.fixture
def submitit_handler():
    """Install a handler like submitit's (checkpoint, then SystemExit(144)); yield its call log."""
    calls: list[str] = []

    def requeue(signum, frame):
        calls.append("requeue")
        raise SystemExit(144)

    before = signal.signal(SIGNAL, requeue)
    try:
        yield calls, requeue
    finally:
        signal.signal(SIGNAL, before)


def preempt() -> None:
    os.kill(os.getpid(), SIGNAL)


def test_the_signal_cancels_the_loop_and_requeues_after_every_task_unwound(submitit_handler):
    calls, requeue = submitit_handler

    async def worker(name: str) -> None:
        try:
            await anyio.sleep(30)
        finally:
            with anyio.CancelScope(shield=True):  # cleanup that awaits, as MCP's does
                await asyncio.sleep(0)
            calls.append(f"{name} unwound")

    async def stage() -> None:
        try:
            async with anyio.create_task_group() as group:  # as an MCP session holds its tasks
                group.start_soon(worker, "a")
                group.start_soon(worker, "b")
                await asyncio.sleep(0.05)
                preempt()
                await asyncio.sleep(30)
        finally:
            calls.append("stage unwound")

    with pytest.raises(SystemExit) as exited:
        call_preemptible(lambda: run_loop(stage()))
    assert exited.value.code == 144
    assert sorted(calls[:2]) == ["a unwound", "b unwound"] and calls[2:] == ["stage unwound", "requeue"]
    assert signal.getsignal(SIGNAL) is requeue  # the job's own handler is back


def test_a_second_signal_while_unwinding_neither_cuts_the_cleanup_nor_requeues_twice(submitit_handler):
    calls, _ = submitit_handler

    async def stage() -> None:
        try:
            preempt()
            await asyncio.sleep(30)
        finally:
            preempt()  # Slurm may signal again
            await asyncio.sleep(0.05)  # a cleanup that takes a while: not cancelled again
            calls.append("cleanup done")

    with pytest.raises(SystemExit):
        call_preemptible(lambda: run_loop(stage()))
    assert calls == ["cleanup done", "requeue"]


def test_after_a_deferred_signal_no_new_event_loop_starts(submitit_handler):
    calls, _ = submitit_handler
    ran: list[str] = []

    async def first() -> None:
        preempt()
        await asyncio.sleep(30)

    async def second() -> None:
        ran.append("second")

    def stage() -> None:
        try:
            run_loop(first())
        except asyncio.CancelledError:
            ran.append("first cancelled")
        run_loop(second())  # e.g. the pipeline's next stage

    with pytest.raises(SystemExit):
        call_preemptible(stage)
    assert ran == ["first cancelled"] and calls == ["requeue"]


def test_outside_an_event_loop_the_signal_goes_to_the_job_handler_at_once(submitit_handler):
    calls, _ = submitit_handler

    def stage() -> None:
        preempt()
        calls.append("after the signal")  # not reached: the handler exits where the code is

    with pytest.raises(SystemExit):
        call_preemptible(stage)
    assert calls == ["requeue"]


def test_a_stage_that_finishes_returns_its_result_and_outside_a_job_nothing_changes():
    async def stage() -> int:
        await asyncio.sleep(0)
        return 7

    before = signal.signal(SIGNAL, signal.SIG_DFL)
    try:
        assert call_preemptible(lambda: run_loop(stage())) == 7
        assert signal.getsignal(SIGNAL) is signal.SIG_DFL  # launch.py's own process: untouched
    finally:
        signal.signal(SIGNAL, before)


def test_every_event_loop_in_tbx_starts_through_run_loop():
    """A loop started by `asyncio.run` directly would take the signal mid-task-group again (the hang
    this module fixes); every call site in the package goes through `run_loop`."""
    import ast
    from pathlib import Path

    import tbx

    direct = []
    for path in sorted(Path(tbx.__file__).parent.rglob("*.py")):
        if path.name == "preemption.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "asyncio"):
                direct.append(f"{path.name}:{node.lineno}")
    assert not direct, f"asyncio.run outside tbx/process/preemption.py (use run_loop): {direct}"
