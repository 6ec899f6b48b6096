"""One served episode: an outside agent's MCP calls drive the ordinary episode loop.

The agent under test is not a `Policy` in this process but a client somewhere else. `ServedEpisode`
stands in for it: it is the episode's agent (`act` waits for the client's next call), so the
episode itself (clone, tools over MCP, the simulated user and its audit, the turn limit, grading,
typed outcomes, faults) is `run_episode` unchanged, and a served episode is graded exactly as an
in-process one.

Each call the client makes is one agent turn: a domain tool call becomes a turn with that one tool
call (its answer is the tool message the in-process agent would read), and `reply_to_user(text)` a
turn of text (its answer is the user's next message). `get_user_message()` reads the latest user
message and is no turn. The reference policy takes one step a turn too, so a reference solution
played through the server uses the same turns as the in-process oracle. An agent that ends its
session before the user ended the conversation `leave`s: the loop records `abandoned`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tbx.errors import AgentFault, AgentLeft
from tbx.messages import AssistantTurn, Message, ToolCall, ToolSchema
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.records import ERROR_OUTCOMES, EpisodeResult

CLOSE = "Close this session."  # ends every answer after which the session has nothing left to do
USER_ENDED = f"[tbx] The user has ended the conversation: the episode is over. {CLOSE}"
TURN_LIMIT = f"[tbx] The turn limit of this task is reached: the episode is over. {CLOSE}"
HARNESS_ERROR = f"[tbx] The episode stopped on a harness fault ({{outcome}}), not counted against you. {CLOSE}"
OVER = f"Error: the episode is over; a new session plays the next one. {CLOSE}"


@dataclass(frozen=True)
class Reply:
    """What one MCP call returns to the client."""

    text: str
    is_error: bool = False


Play = Callable[[Policy], Awaitable[EpisodeResult]]  # run_episode of this attempt, with this agent


class ServedEpisode(Policy, Agent):
    """One claimed (task, attempt), played by a client's calls. It is both the policy and the agent
    of its one episode; `play` runs the episode, `record` stores the result (before the client's
    last call is answered, so an answered end is a stored one), or gets None when the episode ended
    without a result (the store failed, the server stopped)."""

    def __init__(self, task_id: str, attempt: int, play: Play,
                 record: Callable[[ServedEpisode, EpisodeResult | None], None], name: str = "served"):
        self.task_id, self.attempt, self.name = task_id, attempt, name
        self._play, self._record = play, record
        self._inbox: asyncio.Queue[tuple[AssistantTurn, asyncio.Future[Reply]] | AgentFault | None] = asyncio.Queue()
        self._waiting: asyncio.Future[Reply] | None = None  # the call whose turn the loop is playing
        self._ready = asyncio.Event()  # the loop asked for the first turn, or the episode is over
        self._messages: Sequence[Message] = ()
        self._call_ids = itertools.count()
        self.task: asyncio.Task[None] | None = None
        self.result: EpisodeResult | None = None

    # --- the client's side -------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.task is not None

    async def user_message(self) -> Reply:
        """The user's latest message (the opening at first); starts the episode."""
        self._start()
        await self._ready.wait()
        if self.result is not None:
            return Reply(_join(_last_user(self.result.transcript), _end_note(self.result)))
        return Reply(_last_user(self._messages))

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Reply:
        """One turn with one call of the task's tool `name`; the tool's answer."""
        call = ToolCall(name, dict(arguments), f"call_{next(self._call_ids)}")
        return await self._turn(AssistantTurn(tool_calls=(call,)))

    async def reply_to_user(self, text: str) -> Reply:
        """One turn of text to the user; the user's next message."""
        next(self._call_ids)  # a text turn takes a step number too, as in the reference policy's call ids
        return await self._turn(AssistantTurn(content=text))

    def leave(self, ending: AgentFault | None = None) -> bool:
        """The client's session ended. False when the episode never started (nothing to record: the
        attempt can go to another session); True otherwise (the loop records `abandoned` unless the
        episode is over already). With `ending` (tbx.envs: a consumer's rollout ended), the conversation
        ends as that agent fault instead, and the state is graded."""
        if not self.started:
            return False
        if self.result is None:
            self._inbox.put_nowait(ending)
        return True

    async def _turn(self, turn: AssistantTurn) -> Reply:
        if self.result is not None:
            return Reply(OVER, is_error=True)
        self._start()
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait((turn, answer))
        return await answer

    def _start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name=f"episode {self.task_id}#{self.attempt}")

    async def _run(self) -> None:
        try:
            result = await self._play(self)
            self._record(self, result)
            self.result = result
            last = _answer_of(result.transcript)
            self._answer(_join(last.text, _end_note(result)), last)
        finally:  # also when the store failed or the server stops: no call waits forever
            if self.result is None:
                self._record(self, None)  # the attempt stays unrecorded: another session may play it
            self._ready.set()
            self._answer(OVER, Reply("", is_error=True))
            late = Reply(OVER, is_error=True)
            if self.result is not None and self.result.outcome in ERROR_OUTCOMES:
                late = Reply(_end_note(self.result), is_error=True)
            while not self._inbox.empty():  # calls sent after the last turn was taken
                item = self._inbox.get_nowait()
                if isinstance(item, tuple) and not item[1].done():
                    item[1].set_result(late)

    def _answer(self, text: str, of: Reply) -> None:
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(Reply(text, of.is_error))
        self._waiting = None

    # --- the episode loop's side -------------------------------------------------------------------------

    def agent(self, context: EpisodeContext) -> Agent:
        return self

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        self._messages = messages
        if self._waiting is not None:
            answer = _answer_of(messages)
            self._answer(answer.text, answer)
        self._ready.set()
        item = await self._inbox.get()
        if item is None:
            raise AgentLeft(f"the session of {self.task_id} attempt {self.attempt} ended")
        if isinstance(item, AgentFault):
            raise item
        turn, self._waiting = item
        return turn


def _answer_of(messages: Sequence[Message]) -> Reply:
    """What answers the agent's last turn: the last message after it (a tool's result, the user's reply)."""
    for message in reversed(messages):
        if message.role == "assistant":
            return Reply("")
        if message.role in ("tool", "user"):
            return Reply(message.content, message.is_error)
    return Reply("")


def _last_user(messages: Sequence[Message]) -> str:
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


def _end_note(result: EpisodeResult) -> str:
    if result.outcome in ERROR_OUTCOMES:
        return HARNESS_ERROR.format(outcome=result.outcome.value)
    return {"user_stop": USER_ENDED, "turn_limit": TURN_LIMIT}.get(result.ended_by, "")


def _join(text: str, note: str) -> str:
    return f"{text}\n\n{note}" if text and note else text or note
