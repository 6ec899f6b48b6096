"""Bounded staleness for asynchronous GRPO (`grpo.max_staleness`): how old a turn's weights are, which
turns a step may train on, and how busy the sampler and the trainer were.

A turn's staleness is the number of weight updates between the weights that sampled it and the weights
the step trains: the trainer at step k holds version k (`<run>:step_k`, the base model being version 0),
and a turn sampled by version v is k - v versions old. A step trains on turns at most `max_staleness`
versions old; older ones are dropped and counted (`stale_turns_dropped`), never trained on. A turn that
a weight swap fell into (vLLM pauses generation for a swap, so this only happens across a pause) counts
as old as its oldest weights.

The busy clock measures what asynchronous play is for: the seconds in which at least one episode was
being played (the inference server had work) and the seconds in which the trainer was updating, over the
same wall-clock span; their idle fractions are what the overlap removes (docs/training.md).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

_STEP = re.compile(r":step_(\d+)$")


class VersionedTurn(Protocol):
    @property
    def weight_versions(self) -> tuple[str, ...]: ...


T = TypeVar("T", bound="VersionedTurn")


def version_step(version: str) -> int:
    """The training step whose weights a version label names (`<run>:step_N` -> N); the base model's
    label (anything without a step) -> 0."""
    match = _STEP.search(version)
    return int(match.group(1)) if match else 0


def turn_staleness(turn: VersionedTurn, current_step: int) -> int:
    """Versions between the oldest weights that sampled `turn` and the trained weights (`current_step`)."""
    if not turn.weight_versions:
        return 0  # a turn with no label was sampled by the only weights the server had
    return current_step - min(version_step(v) for v in turn.weight_versions)


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


def fresh_turns(episodes: Sequence[Sequence[T]], current_step: int,
                                  max_staleness: int) -> tuple[list[list[T]], StalenessStats]:
    """Each episode's turns that are at most `max_staleness` versions old (in order), and the counts."""
    kept: list[list[T]] = []
    ages: Counter[int] = Counter()
    dropped = dropped_episodes = 0
    for turns in episodes:
        fresh = []
        for turn in turns:
            age = turn_staleness(turn, current_step)
            if age > max_staleness:
                dropped += 1
            else:
                ages[age] += 1
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
        spans: Iterable[tuple[float, float]] = self._spans + ([(self._since, end)] if self._open else [])
        return sum(max(0.0, min(stop, end) - max(start, begin)) for start, stop in spans)
