"""Bounded staleness for asynchronous GRPO (`grpo.max_staleness`): how old a turn's weights are, which
turns a step may train on, and how busy the sampler and the trainer were.

A turn's staleness is the number of weight syncs between the weights that sampled it and the weights the
step trains: the trained policy lists the versions it has served, oldest first (the base model's label,
then one per sync; a step with no update syncs nothing), and a turn sampled by the i-th of n versions is
n - 1 - i syncs old. A step trains on turns at most `max_staleness` syncs old; older ones, and turns of a
version the policy never served (a label left by a failed reload, another run's), are dropped and counted
(`stale_turns_dropped`), never trained on. A turn that a swap fell into (vLLM pauses generation for a swap,
so this only happens across a pause) counts as old as its oldest weights. A turn without a version label
cannot be placed and is refused: the server tbx starts labels every turn.

The busy clock measures what asynchronous play is for: the seconds in which at least one episode was
being played (the inference server had work) within a step's span on the trainer.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from tbx.errors import InfraError


class VersionedTurn(Protocol):
    @property
    def weight_versions(self) -> tuple[str, ...]: ...


T = TypeVar("T", bound="VersionedTurn")


def turn_staleness(turn: VersionedTurn, served: Sequence[str]) -> float:
    """Syncs between the oldest weights that sampled `turn` and the last of `served` (the versions the policy
    served, oldest first); infinite for a version it never served."""
    if not turn.weight_versions:
        raise InfraError("a sampled turn carries no weight version, so its age is unknown; asynchronous "
                         "training (grpo.max_staleness >= 1) needs the server to label every turn")
    position = {version: index for index, version in enumerate(served)}
    ages = [len(served) - 1 - position[v] if v in position else math.inf for v in turn.weight_versions]
    return max(ages)


@dataclass(frozen=True)
class StalenessStats:
    """What one step trained on, by age, and what it dropped for being too old."""

    turns_by_staleness: dict[int, int]  # staleness -> trained turns
    dropped_turns: int  # turns older than max_staleness: not trained on
    dropped_episodes: int  # episodes all of whose turns were dropped

    def as_metrics(self) -> dict[str, float]:
        trained = sum(self.turns_by_staleness.values())
        mean = sum(age * n for age, n in self.turns_by_staleness.items()) / trained if trained else 0.0
        return ({f"staleness/{age}": float(n) for age, n in sorted(self.turns_by_staleness.items())}
                | {"staleness_mean": mean, "stale_turns_dropped": float(self.dropped_turns),
                   "stale_episodes_dropped": float(self.dropped_episodes)})


def fresh_turns(episodes: Sequence[Sequence[T]], served: Sequence[str],
                max_staleness: int) -> tuple[list[list[T]], StalenessStats]:
    """Each episode's turns that are at most `max_staleness` syncs old (in order), and the counts; `served`
    lists the versions the trained policy served, oldest first (the last is the one the step trains)."""
    kept: list[list[T]] = []
    ages: Counter[int] = Counter()
    dropped = dropped_episodes = 0
    for turns in episodes:
        fresh = []
        for turn in turns:
            age = turn_staleness(turn, served)
            if age > max_staleness:
                dropped += 1
            else:
                ages[int(age)] += 1
                fresh.append(turn)
        dropped_episodes += bool(turns) and not fresh
        kept.append(fresh)
    return kept, StalenessStats(dict(ages), dropped, dropped_episodes)


@dataclass
class BusyClock:
    """Seconds during which some work of one kind was running (nested or overlapping spans count once)."""

    clock: Callable[[], float] = time.perf_counter
    _open: int = 0
    _since: float = 0.0
    _spans: list[tuple[float, float]] = field(default_factory=list)

    def start(self) -> None:
        if self._open == 0:
            self._since = self.clock()
        self._open += 1

    def stop(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._spans.append((self._since, self.clock()))

    def busy_between(self, begin: float, end: float) -> float:
        """The busy seconds that fall within [begin, end] (a span still open counts up to `end`)."""
        spans = self._spans + ([(self._since, end)] if self._open else [])
        return sum(max(0.0, min(stop, end) - max(start, begin)) for start, stop in spans)

    def forget_before(self, moment: float) -> None:
        """Drop the closed spans that ended before `moment` (no later question reaches back past it)."""
        self._spans = [span for span in self._spans if span[1] >= moment]
