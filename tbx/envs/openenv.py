"""OpenEnv: tbx tasks as an OpenEnv `Environment` of MCP actions, served by its `create_app` (openenv-core 0.3).

    python -m tbx.envs.openenv tasks=travel serve.port=8000      # http://127.0.0.1:8000, OpenEnv's routes

    from openenv import GenericEnvClient
    async with GenericEnvClient(base_url="http://127.0.0.1:8000") as env:
        first = await env.reset(task_id="travel/rebook_flight/s0-00")   # no task_id: the next task in order
        step = await env.step({"type": "call_tool", "tool_name": "find_bookings", "arguments": {"employee_id": 7}})

What maps to what:
- task -> `reset(task_id=...)`: a new episode on its own database clone; the observation is the user's
  opening (`result`), with the task's policy (the agent's instructions) in `metadata["instructions"]`.
- tool -> OpenEnv's MCP actions: `list_tools` lists the domain's tools as `stage=serve` lists them (names,
  JSON schemas, descriptions), `call_tool` calls one; its answer (tool errors included, as over MCP) is the
  observation's `result`.
- user -> the tools `get_user_message` and `reply_to_user` of `stage=serve`.
- verdict -> the observation that ends the episode (`done`) carries `reward` 1.0 / 0.0 and the outcome in
  `metadata`; a harness error ends it with `reward` None and `metadata["train"]` False (never a 0).
  An episode a client leaves open ends when it resets or disconnects (`rollout_end`, state graded).
Each WebSocket session has its own environment (`SUPPORTS_CONCURRENT_SESSIONS`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from typing import Any

from tbx.envs.episodes import Episode, TaskSet
from tbx.process.preemption import run_loop
from tbx.records import ERROR_OUTCOMES
from tbx.serve.server import GET_USER_MESSAGE, REPLY_TO_USER, USER_TOOLS, domain_tools

CONSUMER = "openenv"


def load(*overrides: str, consumer: str = CONSUMER) -> TaskSet:
    return TaskSet.load(consumer, *overrides)


def _observation(name: str, text: str, episode: Episode, **more: Any) -> Any:
    """A `CallToolObservation` of `text`: the verdict's reward and outcome once the episode is over."""
    from openenv.core.env_server import CallToolObservation

    result = episode.result
    metadata = {"task_id": episode.task_id, "attempt": episode.attempt} | more
    if result is None:
        return CallToolObservation(tool_name=name, result=text, done=False, metadata=metadata)
    metadata |= {"outcome": result.outcome.value, "train": result.outcome not in ERROR_OUTCOMES}
    return CallToolObservation(tool_name=name, result=text, done=True, reward=result.reward, metadata=metadata)


class _Session:
    """One OpenEnv session's episodes over a task set. `environment_factory` mixes it into OpenEnv's
    `Environment` (imported only then) and binds the class attributes below, which the sessions of one
    server share."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    tasks: TaskSet
    order: Iterator[str]  # the task a reset without task_id opens
    listings: dict[str, list[Any]]  # each domain's tools as OpenEnv `Tool`s, listed once

    def __init__(self) -> None:
        super().__init__()
        self.episode: Episode | None = None

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          task_id: str | None = None, **_: Any) -> Any:
        await self._end()
        self.episode = await self.tasks.aopen(task_id or next(self.order))
        instructions = self.tasks.task(self.episode.task_id).policy
        return _observation(GET_USER_MESSAGE, self.episode.opening, self.episode, instructions=instructions)

    async def step_async(self, action: Any, timeout_s: float | None = None, **_: Any) -> Any:
        from openenv.core.env_server import CallToolAction, ListToolsAction, ListToolsObservation

        if self.episode is None:
            raise RuntimeError("reset() opens an episode before any step")
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=await self._listing(self.episode.task_id))
        if not isinstance(action, CallToolAction):
            raise TypeError(f"tbx takes list_tools and call_tool actions, not {type(action).__name__}")
        name, arguments = action.tool_name, dict(action.arguments)
        if name == GET_USER_MESSAGE:
            reply = await self.episode.auser_message()
        elif name == REPLY_TO_USER:
            reply = await self.episode.areply(str(arguments.get("text", "")))
        else:
            reply = await self.episode.acall_tool(name, arguments)
        return _observation(name, reply.text, self.episode)

    async def _listing(self, task_id: str) -> list[Any]:
        from openenv.core.env_server import Tool

        domain = self.tasks.task(task_id).domain
        if domain not in self.listings:
            listed = [*await domain_tools(domain, self.tasks.tools(task_id)), *USER_TOOLS]
            self.listings[domain] = [Tool(name=t.name, description=t.description or "",
                                          input_schema=t.input_schema) for t in listed]
        return self.listings[domain]

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **_: Any) -> Any:
        return run_loop(self.reset_async(seed, episode_id, task_id))

    def step(self, action: Any, timeout_s: float | None = None, **_: Any) -> Any:
        return run_loop(self.step_async(action, timeout_s))

    @property
    def state(self) -> Any:
        from openenv.core.env_server import State

        episode = self.episode
        if episode is None:
            return State()
        outcome = episode.result.outcome.value if episode.result is not None else None
        return State(episode_id=f"{episode.task_id}#{episode.attempt}", step_count=episode.steps,
                     task_id=episode.task_id, outcome=outcome)

    async def _end(self) -> None:
        if self.episode is not None and not self.episode.over:
            await self.episode.afinish()

    def close(self) -> None:
        if self.episode is not None and not self.episode.over:
            self.episode.finish()


def environment_factory(tasks: TaskSet):  # a class of openenv's Environment
    """The `Environment` class create_app instantiates per session, bound to `tasks`."""
    from openenv.core.env_server import Environment

    bound = {"tasks": tasks, "order": itertools.cycle(tasks.task_ids), "listings": {}}
    return type("TbxEnvironment", (_Session, Environment), bound)


def app(tasks: TaskSet):  # a FastAPI app
    """OpenEnv's server (`create_app`) over `tasks`: its HTTP and WebSocket routes."""
    from openenv.core.env_server import CallToolAction, CallToolObservation, create_app

    return create_app(environment_factory(tasks), CallToolAction, CallToolObservation, env_name="tbx",
                      max_concurrent_envs=max(1, tasks.cfg.eval.concurrency))


def main(argv: list[str]) -> None:
    import uvicorn

    tasks = load(*argv)
    try:
        print(f"openenv: {len(tasks.task_ids)} task(s) of {tasks.cfg.tasks.name} at "
              f"http://{tasks.cfg.serve.host}:{tasks.cfg.serve.port} -> {tasks.run_dir}", flush=True)
        uvicorn.run(app(tasks), host=tasks.cfg.serve.host, port=tasks.cfg.serve.port, log_level="warning")
    finally:
        tasks.close()


if __name__ == "__main__":
    main(sys.argv[1:])
