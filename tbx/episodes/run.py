"""One episode: clone the task's database, serve its tools over MCP, let the agent and the
simulated user talk until the user ends it or the turn limit is hit, then grade the terminal
state through a separate connection.

Every way an episode can end maps to one typed outcome (the table is in docs/guarantees.md). What the
agent's own turn causes (`AgentFault`: a context overflow, a request of its messages the endpoint
refuses, a provider's filter, a turn past `turn_timeout_s`) ends the conversation like the turn limit
and the state is graded; what the harness, the network or a server causes is an error outcome, never
a failure. Every wait is bounded by the world's `EpisodeLimits` (tbx/episodes/limits.py), the whole
conversation included; blocking database work runs off the event loop (`tbx.process.waits`).
An agent may also leave (`AgentLeft`: a served agent's session ended before the user ended the
conversation): the state it left is graded for the record, and the outcome is `abandoned`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from tbx.backend import Backend, State
from tbx.episodes.faults import EpisodeFaults
from tbx.episodes.limits import EpisodeLimits
from tbx.episodes.state import EpisodeState, Runtime
from tbx.episodes.world import EpisodeWorld
from tbx.errors import AgentFault, AgentLeft, InfraError, UserSimError, VerifierError
from tbx.grading.judge import Judge
from tbx.messages import Message, Usage
from tbx.policies.base import EpisodeContext, Policy
from tbx.process.waits import bounded, off_loop
from tbx.records import EpisodeResult, Grade, Outcome
from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session


class _Transcript:
    """The conversation plus the counters the episode reports."""

    def __init__(self, system: str):
        self.messages: list[Message] = [Message("system", system)]
        self.usage = {"agent": Usage(), "user": Usage(), "judge": Usage()}
        self.counts = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "malformed_calls": 0}
        self.user_end = ""  # why the user ended it: completed | cannot_help | patience | user
        self.ending = ""  # how the agent's own turn ended the conversation, when it did (AgentFault)


async def _agent_turn(agent, log: _Transcript, schemas, turn_timeout_s: float | None):
    """The agent's next turn, bounded by `turn_timeout_s`. Raises `AgentFault` for an end the agent's
    turn caused; a first-turn refusal is the harness's (the request held nothing of the agent's yet)."""
    limit = asyncio.timeout(turn_timeout_s)
    try:
        async with limit:
            return await agent.act(log.messages, schemas)
    except TimeoutError as exc:
        if not limit.expired():
            raise InfraError(f"policy failed: {exc!r}") from exc
        raise AgentFault("turn_timeout", f"the agent's turn took longer than {turn_timeout_s:g} s") from None
    except AgentFault as fault:
        if fault.reason == "request_refused" and log.counts["turns"] == 1:
            raise InfraError(f"the model endpoint refused the harness's first request (system prompt, tools and "
                             f"opening only; check the model settings): {fault.detail}") from fault
        raise
    except (InfraError, AgentLeft):
        raise
    except Exception as exc:  # a policy crash is the harness's fault, not the agent's
        raise InfraError(f"policy failed: {exc!r}") from exc


async def _open_talk(user, log: _Transcript, timeout_s: float | None) -> None:
    """The conversation's first messages after the system prompt: the user's opening (after the agent's fixed
    greeting where the user's simulator answers one, as τ²-bench's does)."""
    try:
        opening = await bounded(user.start(), timeout_s, UserSimError, "the user simulator")
    except UserSimError:
        raise
    except Exception as exc:
        raise UserSimError(f"user simulator failed: {exc!r}") from exc
    log.usage["user"] += opening.usage
    log.messages.extend(opening.messages)


async def _converse(runtime: Runtime, tools, agent, user, log: _Transcript,
                    limits: EpisodeLimits) -> str:
    """Run the dialogue; return what ended it (user_stop | turn_limit | agent_left | an `AgentFault` reason)."""
    task_limit = runtime.task.turn_limit
    limit = task_limit if limits.max_turns is None else min(task_limit, limits.max_turns)
    for _ in range(limit):
        log.counts["turns"] += 1
        try:
            turn = await _agent_turn(agent, log, tools.schemas, limits.turn_timeout_s)
        except AgentFault as fault:
            log.ending = fault.detail
            return fault.reason
        except AgentLeft:
            return "agent_left"
        log.usage["agent"] += turn.usage
        log.messages.append(turn.as_message())
        for raw in turn.malformed:
            log.counts["malformed_calls"] += 1
            log.messages.append(Message("tool", f"Error: could not parse this tool call: {raw[:200]}",
                                        name="parse_error", is_error=True))
        if turn.tool_calls:
            for call in turn.tool_calls:
                log.messages.append(await tools.call(call))
            log.counts["tool_calls"], log.counts["tool_errors"] = tools.calls, tools.errors
            continue
        if turn.malformed:
            continue
        try:
            reply = await bounded(user.reply(log.messages), limits.call_timeout_s, UserSimError, "the user simulator")
        except UserSimError:
            raise
        except Exception as exc:
            raise UserSimError(f"user simulator failed: {exc!r}") from exc
        log.usage["user"] += reply.usage
        log.messages.append(Message("user", reply.text))
        if reply.done:
            log.user_end = reply.reason or "user"
            return "user_stop"
    return "turn_limit"


async def _judge(runtime: Runtime, judge: Judge | None, log: _Transcript, timeout_s: float | None):
    rules = runtime.task.checks.judge
    if not rules or judge is None:
        return None
    verdicts = []
    for rule in rules:
        try:
            verdict = await bounded(judge.decide(rule, log.messages), timeout_s, VerifierError,
                                    f"the judge on rule {rule.id}")
        except VerifierError:
            raise
        except Exception as exc:
            raise VerifierError(f"judge failed on rule {rule.id}: {exc!r}") from exc
        log.usage["judge"] += verdict.usage
        verdicts.append(verdict)
    return verdicts


async def _final_state(state: EpisodeState, chaos: EpisodeFaults, timeout_s: float | None) -> State:
    """The terminal state, read off the event loop within `timeout_s` (a SQL state through the grader's own
    connection)."""
    try:
        await chaos.connect(timeout_s)
        return await bounded(off_loop(state.terminal), timeout_s, InfraError, "the terminal-state dump")
    except Exception as exc:
        raise InfraError(f"could not read the terminal state: {exc}") from exc


async def _verdict(runtime: Runtime, state: EpisodeState, final: State, judge: Judge | None, log: _Transcript,
                   ended_by: str, timeout_s: float | None) -> tuple[Outcome, str, Grade]:
    verdicts = await _judge(runtime, judge, log, timeout_s)
    result = state.grade(final, log.messages, verdicts, ended_by)
    outcome = Outcome.EXCLUDED if result.passed is None else Outcome.SUCCESS if result.passed else Outcome.FAILURE
    cause = f"{log.ending}; {result.explain()}" if log.ending else result.explain()
    return outcome, cause, result


async def _conversation(world: EpisodeWorld, runtime: Runtime, state: EpisodeState, agent, user, log: _Transcript,
                        chaos: EpisodeFaults, timings: dict[str, float]) -> str:
    """The task's tools served on the episode's database (over the world's kept sessions when it has them), and
    the dialogue over them; what ended it."""
    task, infra, began = runtime.task, InfraLog(), time.perf_counter()
    limits, sessions = world.limits, world.sessions
    if sessions is None:
        opened = open_tool_session(build_server(task.domain, runtime.tools, state.target, infra, chaos.tool_gate()),
                                   infra, limits.call_timeout_s)
    else:
        opened = sessions.session(task.domain, runtime.tools, state.target, infra, chaos.tool_gate(),
                                  limits.call_timeout_s)
    async with opened as tools:
        timings["session"] = time.perf_counter() - began
        ended_by = await _converse(runtime, tools, agent, user, log, limits)
        timings["tools"] = tools.seconds
    return ended_by


async def _clone(runtime: Runtime, backend: Backend, chaos: EpisodeFaults, call_timeout_s: float) -> EpisodeState:
    """The episode's own state (a clone of the task's template database), within `call_timeout_s`."""
    try:
        await chaos.connect(call_timeout_s)
        return await bounded(off_loop(runtime.open, backend), call_timeout_s, InfraError, "the database server")
    except Exception as exc:
        raise InfraError(f"could not clone the task database: {exc}") from exc


async def _within_episode_timeout(conversation: Coroutine[Any, Any, str], episode_timeout_s: float) -> str:
    """How the conversation ended, or an InfraError when it outlasts `episode_timeout_s`."""
    deadline = asyncio.timeout(episode_timeout_s)
    try:
        async with deadline:
            return await conversation
    except TimeoutError:
        if not deadline.expired():
            raise
        raise InfraError(f"the episode did not end within {episode_timeout_s:g} s "
                         "(eval.episode_timeout_s)") from None


async def run_episode(world: EpisodeWorld, task_or_runtime: str | Runtime, policy: Policy, attempt: int, seed: int, *,
                      fault_seed: int | None = None) -> EpisodeResult:
    """Play one attempt of `task_or_runtime` (a task id of `world`, or a prepared runtime) in `world`, within its limits:
    `call_timeout_s` bounds each tool call, DB connection, clone, state dump, user reply and judge call,
    `turn_timeout_s` each turn of the agent, `episode_timeout_s` the conversation (the tool session and every
    turn); the world's faults inject failures and hangs (`tbx.episodes.faults`), drawn from `fault_seed`
    (default `seed`; a re-run of an attempt keeps its `seed` and passes another `fault_seed`); the world's
    kept MCP sessions, when it has them, are bound to this episode's database (else a server and session of
    its own)."""
    runtime, limits = world.runtime(task_or_runtime), world.limits
    task = runtime.task
    user_sim, backend = world.user, world.backend
    timings: dict[str, float] = {}
    start = time.perf_counter()
    chaos = EpisodeFaults(world.faults, seed if fault_seed is None else fault_seed)
    user, judge = chaos.user(user_sim.session(task.user, seed)), chaos.judge(world.judge)
    log = _Transcript(task.policy)
    outcome, cause, ended_by, grade, delta = Outcome.INFRA_ERROR, "", "error", None, None
    state = None
    call_timeout_s = limits.call_timeout_s
    try:
        state = await _clone(runtime, backend, chaos, call_timeout_s)
        timings["clone"] = time.perf_counter() - start
        await _open_talk(user, log, call_timeout_s)
        agent = policy.agent(EpisodeContext(task, attempt, seed))
        ended_by = await _within_episode_timeout(
            _conversation(world, runtime, state, agent, user, log, chaos, timings), limits.episode_timeout_s)
        timings["loop"] = time.perf_counter() - start - timings["clone"]
        mark = time.perf_counter()
        final = await _final_state(state, chaos, call_timeout_s)
        delta = state.delta(final)
        outcome, cause, grade = await _verdict(runtime, state, final, judge, log, ended_by, call_timeout_s)
        if ended_by == "agent_left":  # the state is graded for the record; the verdict is that it left
            outcome, cause = Outcome.ABANDONED, f"the agent left before the user ended the conversation ({cause})"
        timings["grade"] = time.perf_counter() - mark
    except InfraError as exc:
        outcome, cause, ended_by = Outcome.INFRA_ERROR, str(exc), "error"
    except UserSimError as exc:
        outcome, cause, ended_by = Outcome.USER_SIM_ERROR, str(exc), "error"
    except VerifierError as exc:
        outcome, cause = Outcome.VERIFIER_ERROR, str(exc)
    finally:
        if state is not None:
            state.close()
    timings["total"] = time.perf_counter() - start
    return EpisodeResult(
        task_id=task.id, domain=task.domain, family=task.family, attempt=attempt, seed=seed,
        outcome=outcome, cause=cause, transcript=tuple(log.messages), usage=log.usage, counts=log.counts,
        final_delta=delta, grade=grade,
        hashes={"task": task.content_hash} | runtime.versions,
        timings=timings, ended_by=ended_by,
        extra={"policy": getattr(policy, "name", ""), "user": getattr(user_sim, "name", "")}
        | ({"user_end": log.user_end} if log.user_end else {}) | ({"faults": chaos.events} if chaos.events else {}),
    )
