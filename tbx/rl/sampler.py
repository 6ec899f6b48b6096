"""The group sampler: which tasks a GRPO step trains on, and how its groups are filled.

A step needs `groups_per_step` groups of `group_size` complete, scored episodes. Tasks are drawn
from the fixed pool without replacement within an epoch (a fresh shuffle per epoch, from the
injected rng). For each drawn task the sampler runs G episodes concurrently through an injected
`run_episode(task_id, attempt_index)` coroutine, so it is testable without any model.

Two things make a drawn group unusable, and both are handled here rather than in the trainer:
- **Error episodes** (reward None: backend, simulated-user or verifier error) are not agent
  failures. They are re-run to refill their slot, at most `max_error_reruns` times per group. A
  group that still cannot be filled is dropped whole, never trained on partially (a partial
  group's mean is a different baseline; see peer-trainers.md §4, tinker-cookbook#497).
- **Zero-variance groups** (all rewards equal, e.g. all 0 or all 1) have no relative advantage.
Each unusable group is replaced by a freshly drawn task, at most `max_replacements` times per
step; past that the step is simply shorter. Every episode that ran is returned (trained or in
`discarded`) so its cost can be billed; the counts and the zero-variance rate go to the log —
a rising rate means the policy has outgrown the pool.

Determinism: slot k of a group uses attempt index k on its first try and k + r * group_size on
its r-th re-run; a task drawn again within the same step (a small pool wraps into the next
epoch) numbers its o-th repeat's attempts from o * group_size * (max_error_reruns + 1), so no two
episodes of one step share a task and attempt (nor the seed derived from them). The set of tasks
drawn is always a prefix of the epoch order, so which tasks, attempts and groups a step yields
depends on the episodes' outcomes, not on timing (only the split of a spent replacement budget
between the two causes may follow finishing order).
Groups are returned in draw order. `state_dict()` holds the epoch, the shuffled order, the
position in it and the rng state (plain JSON-able values) for an exact resume.

`run_episode` must report errors as an outcome whose `reward` is None; an exception it raises is
a bug and propagates (the step's other episodes are cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from tbx.errors import ConfigError

log = logging.getLogger(__name__)


class EpisodeOutcome(Protocol):
    """What the sampler needs from an episode: its reward, or None for an error outcome."""

    @property
    def reward(self) -> float | None: ...


OutcomeT = TypeVar("OutcomeT", bound=EpisodeOutcome)
RunEpisode = Callable[[str, int], Awaitable[OutcomeT]]


@dataclass(frozen=True)
class Group(Generic[OutcomeT]):
    """`group_size` scored episodes of one task, in slot order."""

    task_id: str
    episodes: tuple[OutcomeT, ...]

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(float(episode.reward) for episode in self.episodes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SamplerStats:
    """Counts for one step (log them under `train/sampler/`)."""

    tasks_drawn: int  # tasks taken from the pool this step, replacements included
    groups_filled: int  # groups that reached group_size scored episodes
    zero_variance_groups: int  # filled groups whose rewards were all equal
    replaced_zero_variance: int  # of those, how many got a replacement task
    zero_variance_rate: float  # zero_variance_groups / groups_filled (0 when none filled)
    error_episodes: int  # episodes with an error outcome (each one cost money)
    error_reruns: int  # re-runs started to refill a slot after an error
    dropped_groups: int  # groups that could not be filled within max_error_reruns
    replaced_dropped: int  # of those, how many got a replacement task
    episodes_run: int  # every finished episode, scored or error
    missing_groups: int  # groups_per_step minus the usable groups returned

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class StepBatch(Generic[OutcomeT]):
    groups: tuple[Group[OutcomeT], ...]  # usable groups, in draw order
    stats: SamplerStats
    discarded: tuple[OutcomeT, ...]  # episodes not trained on: errors, zero-variance and dropped groups


@dataclass
class _GroupResult(Generic[OutcomeT]):
    task_id: str
    episodes: list[OutcomeT]  # the scored episodes (all group_size slots when filled)
    errors: list[OutcomeT]
    reruns: int
    filled: bool

    @property
    def zero_variance(self) -> bool:
        rewards = [float(episode.reward) for episode in self.episodes]  # type: ignore[arg-type]
        return self.filled and max(rewards) == min(rewards)


class _Unfillable(Exception):
    """Raised inside a group when a slot errors and the group's re-run budget is spent."""


def _first_error(errors: BaseExceptionGroup) -> BaseException:
    """The first leaf of nested task-group errors: a failing `run_episode` surfaces as itself."""
    error: BaseException = errors
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@dataclass
class _StepState:
    """Mutable bookkeeping of one `sample_step` call."""

    results: dict[int, _GroupResult] = field(default_factory=dict)  # by draw index
    drawn: int = 0
    replaced_zero_variance: int = 0
    replaced_dropped: int = 0
    repeats: Counter = field(default_factory=Counter)  # draws of each task so far in this step

    @property
    def replacements(self) -> int:
        return self.replaced_zero_variance + self.replaced_dropped


class GroupSampler(Generic[OutcomeT]):
    """Draws tasks and fills GRPO groups for each training step (see the module docstring).

    Give it an rng of its own (e.g. `np.random.default_rng(seed)`): anything else drawing from the
    same generator would shift the epoch shuffles and break exact resume.
    """

    def __init__(self, pool_task_ids: Sequence[str], group_size: int, groups_per_step: int,
                 rng: np.random.Generator, max_replacements: int, max_error_reruns: int,
                 max_concurrent_episodes: int | None = None):
        source = "group sampler"
        if not pool_task_ids:
            raise ConfigError(source, "pool_task_ids", "is empty", "select a non-empty training pool first")
        duplicates = sorted(task for task, count in Counter(pool_task_ids).items() if count > 1)
        if duplicates:
            raise ConfigError(source, "pool_task_ids", f"has duplicates {duplicates[:5]}",
                              "list each task once")
        if group_size < 2:
            raise ConfigError(source, "group_size", f"is {group_size}; one episode has no group baseline",
                              "use 2 or more (the reference uses 8)")
        for name, value, least in (("groups_per_step", groups_per_step, 1),
                                   ("max_replacements", max_replacements, 0),
                                   ("max_error_reruns", max_error_reruns, 0)):
            if value < least:
                raise ConfigError(source, name, f"is {value}", f"use an integer >= {least}")
        if max_concurrent_episodes is not None and max_concurrent_episodes < 1:
            raise ConfigError(source, "max_concurrent_episodes", f"is {max_concurrent_episodes}",
                              "use an integer >= 1, or null for no limit")
        self.pool_task_ids = tuple(pool_task_ids)
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.max_replacements = max_replacements
        self.max_error_reruns = max_error_reruns
        self.max_concurrent_episodes = max_concurrent_episodes
        self._rng = rng
        self._epoch = 0  # number of shuffles so far; the current epoch's order is _order
        self._order: list[int] = []  # permutation of pool indices
        self._position = 0  # next index into _order

    # --- drawing and resume -------------------------------------------------------------------
    def draw_task(self) -> str:
        """The next task of the current epoch; starts a new, reshuffled epoch when it is used up."""
        if self._position >= len(self._order):
            self._order = [int(i) for i in self._rng.permutation(len(self.pool_task_ids))]
            self._position = 0
            self._epoch += 1
        task_id = self.pool_task_ids[self._order[self._position]]
        self._position += 1
        return task_id

    @property
    def epoch(self) -> int:
        return self._epoch

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: resuming from it reproduces every later draw exactly."""
        return {"pool_task_ids": list(self.pool_task_ids), "epoch": self._epoch, "order": list(self._order),
                "position": self._position, "rng_state": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; the pool must be the one the state was saved with."""
        if list(state["pool_task_ids"]) != list(self.pool_task_ids):
            raise ConfigError("group sampler checkpoint", "pool_task_ids",
                              "differs from this run's pool, so the saved order would name other tasks",
                              "resume with the same frozen pool manifest, or start the sampler afresh")
        if state["rng_state"]["bit_generator"] != type(self._rng.bit_generator).__name__:
            raise ConfigError("group sampler checkpoint", "rng_state",
                              f"is for {state['rng_state']['bit_generator']} but the rng is "
                              f"{type(self._rng.bit_generator).__name__}",
                              "build the rng with the same bit generator")
        order = [int(i) for i in state["order"]]
        is_permutation = sorted(order) in ([], list(range(len(self.pool_task_ids))))
        if not is_permutation or not 0 <= state["position"] <= len(order):
            raise ConfigError("group sampler checkpoint", "order/position",
                              "is not a permutation of the pool with a position inside it",
                              "use a state saved by GroupSampler.state_dict()")
        self._epoch = int(state["epoch"])
        self._order = order
        self._position = int(state["position"])
        self._rng.bit_generator.state = state["rng_state"]

    # --- one step -----------------------------------------------------------------------------
    async def sample_step(self, run_episode: RunEpisode) -> StepBatch[OutcomeT]:
        """Run episodes until `groups_per_step` usable groups exist or the replacement budget is spent."""
        limiter = asyncio.Semaphore(self.max_concurrent_episodes) if self.max_concurrent_episodes else None
        step = _StepState()

        async def run_slot(draw_index: int, task_id: str, first_attempt: int) -> None:
            result = await self._fill_group(task_id, run_episode, limiter, first_attempt)
            step.results[draw_index] = result
            self._log_unusable(result)
            if (result.zero_variance or not result.filled) and step.replacements < self.max_replacements:
                if result.filled:
                    step.replaced_zero_variance += 1
                else:
                    step.replaced_dropped += 1
                launch()

        def launch() -> None:
            draw_index, step.drawn = step.drawn, step.drawn + 1
            task_id = self.draw_task()
            first_attempt = step.repeats[task_id] * self.group_size * (self.max_error_reruns + 1)
            step.repeats[task_id] += 1
            tasks.create_task(run_slot(draw_index, task_id, first_attempt))

        try:
            async with asyncio.TaskGroup() as tasks:  # replacements join the group while it runs
                for _ in range(self.groups_per_step):
                    launch()
        except ExceptionGroup as errors:
            raise _first_error(errors) from errors
        return self._assemble(step)

    async def _fill_group(self, task_id: str, run_episode: RunEpisode, limiter: asyncio.Semaphore | None,
                          first_attempt: int = 0) -> _GroupResult:
        """Run group_size slots concurrently; re-run a slot after an error while the budget lasts."""
        size = self.group_size
        scored: list[OutcomeT | None] = [None] * size
        result = _GroupResult(task_id, [], [], 0, False)

        async def run_once(attempt: int) -> OutcomeT:
            if limiter is None:
                return await run_episode(task_id, attempt)
            async with limiter:
                return await run_episode(task_id, attempt)

        async def run_slot(slot: int) -> None:
            for rerun in range(self.max_error_reruns + 1):
                attempt = first_attempt + slot + rerun * size
                outcome = await run_once(attempt)
                reward = outcome.reward
                if reward is not None:
                    if not math.isfinite(reward):
                        raise ValueError(f"task {task_id} attempt {attempt}: reward {reward} "
                                         "is not finite; report an error outcome as reward None")
                    scored[slot] = outcome
                    return
                result.errors.append(outcome)
                if result.reruns >= self.max_error_reruns:
                    raise _Unfillable
                result.reruns += 1

        filled = True
        try:
            async with asyncio.TaskGroup() as slots:  # an unfillable slot cancels its siblings
                for slot in range(size):
                    slots.create_task(run_slot(slot))
        except* _Unfillable:
            filled = False
        result.episodes = [outcome for outcome in scored if outcome is not None]
        result.filled = filled
        return result

    def _log_unusable(self, result: _GroupResult) -> None:
        if not result.filled:
            log.warning("dropped group for task %s: %d error episodes, %d re-runs (max_error_reruns=%d); "
                        "it is not trained on", result.task_id, len(result.errors), result.reruns,
                        self.max_error_reruns)
        elif result.zero_variance:
            log.info("zero-variance group for task %s (all rewards %s)", result.task_id,
                     result.episodes[0].reward)

    def _assemble(self, step: _StepState) -> StepBatch[OutcomeT]:
        groups: list[Group[OutcomeT]] = []
        discarded: list[OutcomeT] = []
        filled = zero_variance = dropped = error_episodes = reruns = episodes_run = 0
        for draw_index in sorted(step.results):
            result = step.results[draw_index]
            error_episodes += len(result.errors)
            reruns += result.reruns
            episodes_run += len(result.errors) + len(result.episodes)
            discarded.extend(result.errors)
            filled += result.filled
            dropped += not result.filled
            zero_variance += result.zero_variance
            if result.filled and not result.zero_variance:
                groups.append(Group(result.task_id, tuple(result.episodes)))
            else:
                discarded.extend(result.episodes)
        stats = SamplerStats(
            tasks_drawn=step.drawn, groups_filled=filled, zero_variance_groups=zero_variance,
            replaced_zero_variance=step.replaced_zero_variance,
            zero_variance_rate=zero_variance / filled if filled else 0.0, error_episodes=error_episodes,
            error_reruns=reruns, dropped_groups=dropped, replaced_dropped=step.replaced_dropped,
            episodes_run=episodes_run, missing_groups=self.groups_per_step - len(groups))
        if stats.missing_groups:
            log.warning("step is %d group(s) short of %d: replacement budget (%d) spent; stats %s",
                        stats.missing_groups, self.groups_per_step, self.max_replacements, stats.as_dict())
        return StepBatch(groups=tuple(groups), stats=stats, discarded=tuple(discarded))
