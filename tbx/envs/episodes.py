"""tbx episodes played by another library's agent loop: the one core every adapter of `tbx.envs` shares.

A consumer (TRL's trainer, a verifiers environment, an OpenEnv server) drives an episode by calls:
read the user's opening, call the task's tools, reply to the user, stop. Each episode is
`stage=serve`'s `ServedEpisode`, so it is `run_episode` unchanged (an isolated clone of the task's
database, the domain's tools over MCP with their own answers and errors, the simulated user, the
turn limit, injected `faults`, the terminal-state verdict): the adapters only translate.

- `TaskSet.load(consumer, "tasks=travel", ...)`: a task set named as on the command line (any
  overrides; `tasks.pool=` for a pool manifest), composed and checked as `launch.py` does with
  `stage=serve serve.agent_name=<consumer>`, prepared, and with a run folder and results store
  (`store.url`, or `<run folder>/results.sqlite`): every finished episode is stored like any tbx run's,
  with the consumer's name as the agent, for `stage=report` and `stage=view`.
- Episodes run on one event loop in a thread of their own, so synchronous consumers (TRL's tool
  methods) and asynchronous ones (verifiers, OpenEnv) call the same `Episode`.
- Seeds: attempt `a` of a task is seeded as `stage=eval` seeds attempt `a`; attempts are numbered on
  from what the store already holds, so a reloaded task set continues its run.
- The end: `finish(final_text)` delivers the consumer's last message (the rollout ended without a tool
  call) to the user as a reply; if the user still has not ended the conversation, the conversation ends
  there (`ended_by=rollout_end`, an agent fault like a context overflow) and the state is graded, as
  tbx's own trainer grades a rollout whose token budget ran out. `result.reward` is 1 or 0 for a
  verdict, None for a harness error (never a 0); a result the store could not keep is raised.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import defaultdict
from collections.abc import Coroutine, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tbx.campaign import open_run
from tbx.campaign.components import episode_cost
from tbx.config import Config, register_configs
from tbx.config.checks import compose_config, config_object
from tbx.episodes import run_episode
from tbx.episodes.seeds import episode_seed
from tbx.errors import AgentFault
from tbx.messages import AssistantTurn, Message
from tbx.records import EpisodeResult
from tbx.runs.identity import record_engine
from tbx.serve.episode import Reply, ServedEpisode
from tbx.stages.environment import check_config
from tbx.tasks.model import Task
from tbx.tools.declare import ToolSpec

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose(consumer: str, overrides: Sequence[str]) -> Config:
    """The typed config of `overrides` (as on the command line) served to `consumer`; a mistake raises the
    same one-line `ConfigError` launch.py prints."""
    register_configs()
    words = ["stage=serve", f"serve.agent_name={consumer}", "logger=none", *overrides]
    dict_cfg, error = compose_config(CONF, "config", words)
    if error is not None:
        raise error
    cfg = config_object(dict_cfg)
    check_config(cfg)
    return cfg


class _Loop:
    """An event loop in a daemon thread: every episode of a task set runs here."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tbx-envs", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine) -> Any:
        """Run `coro` here and wait for it (from a thread without a running loop)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def arun(self, coro: Coroutine) -> Any:
        """Run `coro` here and await it from another event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class Episode:
    """One attempt of one task, played by the consumer's calls. Sync methods block; `a`-methods await."""

    def __init__(self, tasks: TaskSet, served: ServedEpisode):
        self.tasks, self.served = tasks, served
        self.task_id, self.attempt = served.task_id, served.attempt
        self.opening = ""
        self.steps = 0  # tool calls and replies so far

    @property
    def over(self) -> bool:
        return self.served.result is not None

    @property
    def result(self) -> EpisodeResult | None:
        return self.served.result

    async def _open(self) -> None:
        self.opening = (await self.served.user_message()).text

    async def auser_message(self) -> Reply:
        return await self.tasks.loop.arun(self.served.user_message())

    async def acall_tool(self, name: str, arguments: dict[str, Any]) -> Reply:
        self.steps += 1
        return await self.tasks.loop.arun(self.served.call_tool(name, arguments))

    async def areply(self, text: str) -> Reply:
        self.steps += 1
        return await self.tasks.loop.arun(self.served.reply_to_user(text))

    async def aturn(self, turn: AssistantTurn) -> list[Message]:
        """One agent turn as tbx's own policies return one (text, tool calls, call attempts the parser could not read),
        played as the episode loop plays theirs; the messages that answer it (tool results and parse errors, or the
        user's reply), none once the episode is over."""
        self.steps += 1

        async def play() -> list[Message]:
            await self.served._turn(turn)
            if self.over:
                return []
            messages = list(self.served._messages)  # the loop's transcript, waiting for the next turn
            last = max(i for i, m in enumerate(messages) if m.role == "assistant")
            return messages[last + 1:]

        return await self.tasks.loop.arun(play())

    async def afinish(self, final_text: str | None = None) -> EpisodeResult:
        return await self.tasks.loop.arun(self._finish(final_text))

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Reply:
        self.steps += 1
        return self.tasks.loop.run(self.served.call_tool(name, arguments))

    def reply(self, text: str) -> Reply:
        self.steps += 1
        return self.tasks.loop.run(self.served.reply_to_user(text))

    def finish(self, final_text: str | None = None) -> EpisodeResult:
        return self.tasks.loop.run(self._finish(final_text))

    async def _finish(self, final_text: str | None) -> EpisodeResult:
        served = self.served
        if served.result is None and final_text:
            await served.reply_to_user(final_text)
        if served.result is None:
            served.leave(AgentFault("rollout_end", f"the {self.tasks.consumer} rollout ended before the user "
                                    "ended the conversation"))
        assert served.task is not None  # opened: `user_message` started it
        await served.task  # raises what stopped it without a result (the store failed)
        assert served.result is not None
        return served.result


class TaskSet:
    """A prepared tbx task set with its run folder and store, handing out episodes to one consumer."""

    def __init__(self, cfg: Config, consumer: str):
        self.cfg, self.consumer = cfg, consumer
        self._stack = ExitStack()
        self.run = self._stack.enter_context(open_run(cfg, "serve"))
        self.world = self.run.world
        record_engine(self.run.run_dir, {"name": consumer, "agent": consumer, "transport": "tbx.envs"})
        taken: dict[str, int] = defaultdict(lambda: -1)
        for record in self.run.log.records:
            taken[record.task_id] = max(taken[record.task_id], record.attempt)
        self._attempts = {task_id: itertools.count(taken[task_id] + 1) for task_id in self.world.runtimes}
        self._lock = threading.Lock()
        self.loop = _Loop()

    @classmethod
    def load(cls, consumer: str, *overrides: str) -> TaskSet:
        return cls(compose(consumer, overrides), consumer)

    @property
    def task_ids(self) -> list[str]:
        return list(self.world.runtimes)

    def task(self, task_id: str) -> Task:
        return self.world.runtimes[task_id].task

    def tools(self, task_id: str) -> tuple[ToolSpec, ...]:
        return self.world.runtimes[task_id].tools

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    def _served(self, task_id: str) -> ServedEpisode:
        if task_id not in self.world.runtimes:
            raise KeyError(f"task {task_id!r} is not in the task set {self.cfg.tasks.name} (its tasks: "
                           f"{', '.join(self.task_ids[:5])}{', ...' if len(self.task_ids) > 5 else ''})")
        with self._lock:
            attempt = next(self._attempts[task_id])
        seed = episode_seed(self.cfg.seed, task_id, attempt, 0)  # as stage=eval seeds this attempt's first try

        def play(agent: ServedEpisode) -> Any:
            return run_episode(self.world, task_id, agent, attempt, seed, fault_seed=seed)

        return ServedEpisode(task_id, attempt, play, self._record, name=self.consumer)

    def _record(self, episode: ServedEpisode, result: EpisodeResult | None) -> None:
        if result is not None:
            self.run.log.append(result, episode_cost(self.cfg, result.usage))

    def open(self, task_id: str) -> Episode:
        """A new episode of `task_id`, started: its `opening` is the user's first message."""
        episode = Episode(self, self._served(task_id))
        self.loop.run(episode._open())
        return episode

    async def aopen(self, task_id: str) -> Episode:
        episode = Episode(self, self._served(task_id))
        await self.loop.arun(episode._open())
        return episode

    def close(self) -> None:
        """Stop the episodes still running (unrecorded), close the world's user and judge, the store and backend."""
        async def stop() -> None:
            running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await self.world.aclose()

        self.loop.run(stop())
        self.loop.close()
        self._stack.close()

    def __enter__(self) -> TaskSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
