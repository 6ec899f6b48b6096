"""One training episode for the verl agent loop, run by tbx's own episode loop (no verl import).

A training episode is an ordinary tbx episode (`tbx.episodes.run_episode`: database clone, MCP
tool session, simulated user, terminal-state verdict), played by a `TokenAgent`, so the reward
is the same verdict that probing and evaluation use. What this module adds:

- `WorkerWorld`: what every episode of one worker process shares: the tbx config and the episode
  world (`tbx.episodes.EpisodeWorld`: backend, user simulator, judge, limits, faults, and the pool's
  runtimes, each prepared on its first episode), built once per process from the resolved tbx config
  file the launcher wrote. Seeds come from `tbx.episodes.seeds` (`rollout_seed`, `verl_fault_seed`).
- Error outcomes are re-run: an episode that ends in `infra_error`, `user_sim_error` or
  `verifier_error` is played again with a fresh database, user and seed, up to
  `max_error_retries` times; the errored tries are kept for accounting. If every try errors,
  `EpisodeErrored` is raised — an error is never turned into a reward of 0.
- The response budget: when the agent's token stream is full, `BudgetUser` ends the
  conversation (instead of asking the real user) and the terminal state is graded as it is.
- `EpisodeRecorder`: every try is stored in the run's results store (`stage=train` rows, the step in
  the attempt number as native training stores them), so `stage=report` reads verl runs too.
- `check_pool_prompts`, run before launching verl: a setup error that every episode would hit
  (first prompt too long, a chat template that rewrites history) fails there, at launch, instead
  of failing every group inside verl (which would keep replacing them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tbx.backend import Backend
from tbx.campaign.components import build_backend, build_world
from tbx.catalog import TaskRuntime, load_manifest, manifest_tasks, prepare_task, resolve_tasks
from tbx.config import Config
from tbx.episodes import ERROR_OUTCOMES, EpisodeResult, EpisodeWorld, Outcome, run_episode
from tbx.episodes.seeds import rollout_seed, verl_fault_seed
from tbx.episodes.state import Runtime
from tbx.errors import ConfigError, InfraError
from tbx.messages import Message, ToolSchema
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.process.preemption import run_loop
from tbx.tasks.model import Task, UserScenario
from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session
from tbx.users.base import Opening, UserSession, UserSimulator, UserTurn
from tbx.verl_bridge.token_agent import PromptRenderer, TokenAgent, TokenTrace


def load_config(path: str | Path) -> Config:
    """The resolved tbx config the launcher saved (`dataclasses.asdict` as YAML), typed again."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(str(path)))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


class PreparedOnUse(Mapping[str, TaskRuntime]):
    """A pool's task runtimes, each prepared (template database, expected changes) on its first episode: a
    worker process plays some of the pool's tasks only."""

    def __init__(self, tasks: dict[str, Task], backend: Backend, pool: str):
        self.tasks, self.backend, self.pool = tasks, backend, pool
        self._prepared: dict[str, TaskRuntime] = {}

    def __getitem__(self, task_id: str) -> TaskRuntime:
        if task_id not in self._prepared:
            if task_id not in self.tasks:
                raise ConfigError("verl dataset row", "extra_info.task_id", f"'{task_id}' is not in the task set "
                                  f"of the pool {self.pool}", "write the rows from the pool manifest the training "
                                  "config names (train.pool)")
            self._prepared[task_id] = prepare_task(self.tasks[task_id], self.backend)
        return self._prepared[task_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


@dataclass
class WorkerWorld:
    """A worker process's tbx config and the episode world built from it once (`world_for`)."""

    cfg: Config
    world: EpisodeWorld

    @property
    def tasks(self) -> dict[str, Task]:
        return self.world.runtimes.tasks  # type: ignore[attr-defined]  (a PreparedOnUse)


def worker_world(cfg: Config) -> WorkerWorld:
    """The episode world of `cfg`'s pool (the task set its probe ran on, as the native trainer plays), its
    runtimes prepared on first use; every episode plays within the limits evaluation plays within."""
    found = manifest_tasks(load_manifest(cfg.train.pool, "train.pool")) if cfg.train.pool else resolve_tasks(cfg.tasks)
    backend = build_backend(cfg)
    runtimes = PreparedOnUse({task.id: task for task in found}, backend, cfg.train.pool or cfg.tasks.name)
    return WorkerWorld(cfg, build_world(cfg, backend, runtimes))


_WORLDS: dict[str, WorkerWorld] = {}


def world_for(config_path: str) -> WorkerWorld:
    """The process's world for a config file (built once; verl makes a loop object per episode)."""
    key = str(Path(config_path).resolve())
    if key not in _WORLDS:
        _WORLDS[key] = worker_world(load_config(key))
    return _WORLDS[key]


class _BudgetSession(UserSession):
    def __init__(self, inner: UserSession, trace: TokenTrace):
        self.inner, self.trace = inner, trace

    def opening(self) -> str:
        return self.inner.opening()

    async def start(self) -> Opening:
        return await self.inner.start()

    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        if self.trace.exhausted:
            return UserTurn("", done=True)
        return await self.inner.reply(conversation)


class BudgetUser(UserSimulator):
    """The real user simulator, except that it ends the conversation once the token budget is spent."""

    def __init__(self, inner: UserSimulator, trace: TokenTrace):
        self.inner, self.trace = inner, trace
        self.name = inner.name

    def session(self, scenario: UserScenario, seed: int) -> UserSession:
        return _BudgetSession(self.inner.session(scenario, seed), self.trace)


class SingleAgentPolicy(Policy):
    """Hands the episode loop the one agent made for this episode."""

    name = "verl"

    def __init__(self, agent: Agent, model_name: str = ""):
        self._agent, self.model_name = agent, model_name

    def agent(self, context: EpisodeContext) -> Agent:
        return self._agent


class EpisodeErrored(InfraError):
    """Every try of a training episode ended in an error outcome (never a reward of 0)."""

    def __init__(self, task_id: str, tries: Sequence[EpisodeResult]):
        self.task_id, self.tries = task_id, tuple(tries)
        causes = "; ".join(f"{r.outcome.value}: {r.cause[:200]}" for r in tries)
        super().__init__(f"task {task_id}: all {len(tries)} tries ended in errors ({causes})")


@dataclass(frozen=True)
class TrainingEpisode:
    """The try that counts, its token stream, and the errored tries before it."""

    result: EpisodeResult
    trace: TokenTrace
    error_tries: tuple[EpisodeResult, ...]

    @property
    def reward(self) -> float:
        assert self.result.reward is not None  # only success/failure become training episodes
        return self.result.reward

    @property
    def ended_by(self) -> str:
        return "context_limit" if self.trace.exhausted else self.result.ended_by


async def run_training_episode(worker: WorkerWorld, task_id: str, make_agent: Callable[[], TokenAgent], *,
                               uid: str, attempt: int, max_error_retries: int, stored_attempt: int | None = None,
                               on_try: Callable[[EpisodeResult], None] | None = None) -> TrainingEpisode:
    """Play `task_id` until a try ends in a verdict (success or failure), at most 1 + retries times;
    `on_try` sees every try that ended (errored ones included) as it ends. `stored_attempt` (the attempt
    number its tries are stored under) seeds the injected faults; without it they are drawn from the try's
    own seed."""
    world = worker.world
    runtime = world.runtimes[task_id]
    errored: list[EpisodeResult] = []
    for try_index in range(max_error_retries + 1):
        agent = make_agent()
        policy = SingleAgentPolicy(agent, worker.cfg.model.name)
        budgeted = dataclasses.replace(world, user=BudgetUser(world.user, agent.trace))
        faults_from = None if stored_attempt is None else verl_fault_seed(task_id, stored_attempt, try_index)
        result = await run_episode(budgeted, runtime, policy, attempt, rollout_seed(uid, attempt, try_index),
                                   fault_seed=faults_from)
        if agent.fatal is not None:
            raise agent.fatal
        if on_try is not None:
            on_try(result)
        if result.outcome is Outcome.EXCLUDED:
            raise ConfigError("pool manifest", "kept", f"task {task_id} has judge rules but no judge is "
                              "configured", "configure a judge for training or select the pool without judge tasks")
        if result.outcome not in ERROR_OUTCOMES:
            return TrainingEpisode(result, agent.trace, tuple(errored))
        errored.append(result)
    raise EpisodeErrored(task_id, errored)


async def tool_schemas(world: EpisodeWorld, runtime: Runtime) -> tuple[ToolSchema, ...]:
    """The tool schemas an episode's agent sees (listed from a real MCP session on the task's episode state: a
    clone, or a τ² environment)."""
    state = runtime.open(world.backend)
    try:
        infra = InfraLog()
        server = build_server(runtime.task.domain, runtime.tools, state.target, infra)
        async with open_tool_session(server, infra) as tools:
            return tools.schemas
    finally:
        state.close()


async def first_prompt_lengths(world: EpisodeWorld, task_ids: Sequence[str],
                               renderer: PromptRenderer) -> dict[str, int]:
    """Tokens of each task's first prompt; refuses a template that rewrites earlier turns."""
    lengths: dict[str, int] = {}
    for task_id in task_ids:
        runtime = world.runtimes[task_id]
        schemas = await tool_schemas(world, runtime)
        # a simulator that answers the agent's greeting (τ²'s) opens with a generated message: its scenario's
        # opening message stands in for its length here
        opening = world.user.session(runtime.task.user, 0).opening()
        messages = [Message("system", runtime.task.policy), Message("user", opening)]
        text = renderer.text(messages, schemas)
        later = renderer.text(messages + [Message("assistant", "ok"), Message("user", "and?")], schemas)
        if not later.startswith(text):
            raise ConfigError("verl agent loop", "prompt_style", f"the chat template renders the first "
                              f"prompt of {task_id} differently once turns are appended",
                              "use prompt_style=tbx or a template that only appends")
        lengths[task_id] = len(renderer.encode(text))
    return lengths


def check_pool_prompts(cfg: Config, task_ids: Sequence[str], tokenizer: object, max_prompt_tokens: int,
                       prompt_style: str = "tbx") -> dict[str, int]:
    """Launch-time check of every pool task's first prompt; returns the lengths, raises `ConfigError`."""
    world = worker_world(cfg).world
    try:
        renderer = PromptRenderer(tokenizer, prompt_style, cfg.model.few_shot, cfg.model.tool_format,  # type: ignore[arg-type]
                                  cfg.model.chat_template_kwargs)
        lengths = run_loop(first_prompt_lengths(world, task_ids, renderer))
    finally:
        world.backend.close()
    longest = max(lengths, key=lengths.__getitem__, default=None)
    if longest is not None and lengths[longest] > max_prompt_tokens:
        over = sum(n > max_prompt_tokens for n in lengths.values())
        raise ConfigError("grpo settings", "max_prompt_tokens", f"{over} pool tasks have a first prompt longer "
                          f"than {max_prompt_tokens} tokens (longest: {longest}, {lengths[longest]})",
                          f"raise grpo.max_prompt_tokens to at least {lengths[longest]}")
    return lengths
