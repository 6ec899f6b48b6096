"""One episode: clone the task's database, serve its tools over MCP, let the agent and the
simulated user talk until the user ends it or the turn limit is hit, then grade the terminal
state through a separate connection.

Every way an episode can break maps to one typed outcome; an error is never a failure. An agent
may also leave (`AgentLeft`: a served agent's session ended before the user ended the
conversation): the state it left is graded for the record, and the outcome is `abandoned`.
"""

from __future__ import annotations

import importlib
import time
from functools import cache

from tbx.backend import Backend, dump_state
from tbx.backend.state import state_delta
from tbx.catalog import TaskRuntime, source_hash
from tbx.config import FaultsConfig
from tbx.episodes.record import EpisodeResult, Outcome
from tbx.errors import AgentLeft, InfraError, UserSimError, VerifierError
from tbx.faults import EpisodeFaults, bounded
from tbx.grading import grade_state
from tbx.grading.judge import Judge
from tbx.messages import Message, Usage
from tbx.policies.base import EpisodeContext, Policy
from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session
from tbx.users.base import UserSimulator


@cache
def tools_hash(domain: str) -> str:
    package = f"tbx.domains.{domain}"
    return source_hash(importlib.import_module(f"{package}.tools"), importlib.import_module(f"{package}.schema"))


@cache
def grader_hash() -> str:
    from tbx.backend import state
    from tbx.grading import diff, verdict

    return source_hash(diff, verdict, state)


class _Transcript:
    """The conversation plus the counters the episode reports."""

    def __init__(self, system: str, opening: str):
        self.messages: list[Message] = [Message("system", system), Message("user", opening)]
        self.usage = {"agent": Usage(), "user": Usage(), "judge": Usage()}
        self.counts = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "malformed_calls": 0}


async def _converse(runtime: TaskRuntime, tools, agent, user, log: _Transcript,  # noqa: ANN001
                    max_turns: int | None, timeout_s: float | None) -> str:
    """Run the dialogue; return what ended it (user_stop | turn_limit | agent_left)."""
    limit = runtime.task.turn_limit if max_turns is None else min(runtime.task.turn_limit, max_turns)
    for _ in range(limit):
        log.counts["turns"] += 1
        try:
            turn = await agent.act(log.messages, tools.schemas)
        except AgentLeft:
            return "agent_left"
        except InfraError:
            raise
        except Exception as exc:  # a policy crash is the harness's fault, not the agent's
            raise InfraError(f"policy failed: {exc!r}") from exc
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
            reply = await bounded(user.reply(log.messages), timeout_s, UserSimError, "the user simulator")
        except UserSimError:
            raise
        except Exception as exc:
            raise UserSimError(f"user simulator failed: {exc!r}") from exc
        log.usage["user"] += reply.usage
        log.messages.append(Message("user", reply.text))
        if reply.done:
            return "user_stop"
    return "turn_limit"


async def _judge(runtime: TaskRuntime, judge: Judge | None, log: _Transcript, timeout_s: float | None):  # noqa: ANN202
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


async def run_episode(runtime: TaskRuntime, backend: Backend, policy: Policy, user_sim: UserSimulator,
                      judge: Judge | None, attempt: int, seed: int, max_turns: int | None = None,
                      call_timeout_s: float | None = None, faults: FaultsConfig | None = None,
                      fault_seed: int | None = None) -> EpisodeResult:
    """Play one attempt of a task. `max_turns` caps the task's own turn limit (small CPU runs);
    `call_timeout_s` bounds each tool call, DB connection, user reply and judge call (None: no limit);
    `faults` injects failures and hangs (`tbx.faults`; None: none), drawn from `fault_seed` (default
    `seed`; a re-run of an attempt keeps its `seed` and passes another `fault_seed`)."""
    task = runtime.task
    timings: dict[str, float] = {}
    start = time.perf_counter()
    chaos = EpisodeFaults(faults, seed if fault_seed is None else fault_seed)
    user, judge = chaos.user(user_sim.session(task.user, seed)), chaos.judge(judge)
    log = _Transcript(task.policy, user.opening())
    outcome, cause, ended_by, grade, delta = Outcome.INFRA_ERROR, "", "error", None, None
    db = None
    try:
        try:
            await chaos.connect(call_timeout_s)
            db = backend.clone(runtime.template)
        except Exception as exc:
            raise InfraError(f"could not clone the task database: {exc}") from exc
        timings["clone"] = time.perf_counter() - start
        infra = InfraLog()
        server = build_server(task.domain, runtime.tools, db.engine, infra, chaos.tool_gate())
        agent = policy.agent(EpisodeContext(task, attempt, seed))
        async with open_tool_session(server, infra, call_timeout_s) as tools:
            timings["session"] = time.perf_counter() - start - timings["clone"]
            ended_by = await _converse(runtime, tools, agent, user, log, max_turns, call_timeout_s)
            timings["tools"] = tools.seconds
        timings["loop"] = time.perf_counter() - start - timings["clone"]
        mark = time.perf_counter()
        reader = backend.open_reader(db)
        try:
            await chaos.connect(call_timeout_s)
            final = dump_state(reader, runtime.domain.metadata)
        except Exception as exc:
            raise InfraError(f"could not read the terminal state: {exc}") from exc
        finally:
            reader.dispose()
        delta = state_delta(runtime.initial, final)
        verdicts = await _judge(runtime, judge, log, call_timeout_s)
        result = grade_state(runtime.initial, final, runtime.expected, runtime.volatile, task.checks.loose,
                             task.checks.judge, verdicts)
        grade = result.to_dict()
        outcome = Outcome.EXCLUDED if result.passed is None else Outcome.SUCCESS if result.passed else Outcome.FAILURE
        cause = result.explain()
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
        if db is not None:
            backend.drop(db)
    timings["total"] = time.perf_counter() - start
    return EpisodeResult(
        task_id=task.id, domain=task.domain, family=task.family, attempt=attempt, seed=seed,
        outcome=outcome, cause=cause, transcript=tuple(log.messages), usage=log.usage, counts=log.counts,
        final_delta=delta, grade=grade,
        hashes={"task": task.content_hash, "tools": tools_hash(task.domain), "grader": grader_hash(),
                "initial_state": runtime.initial_hash},
        timings=timings, ended_by=ended_by,
        extra={"policy": getattr(policy, "name", ""), "user": getattr(user_sim, "name", "")}
        | ({"faults": chaos.events} if chaos.events else {}),
    )
