"""How training episodes are numbered in the results store (native trainer and verl alike).

A training episode is stored as an ordinary attempt whose number carries the step:
`attempt = step * STEP_STRIDE + slot`, step counted from 0 and slot the episode's place in that
step. (step, slot) is unique, a resumed run discards the attempts of the steps after its
checkpoint (`first_attempt_of`), and `stage=report` reads training runs like any other.
"""

from __future__ import annotations

from dataclasses import replace

from tbx.records import EpisodeResult

STEP_STRIDE = 100_000  # more episodes than any step plays


def training_attempt(step: int, slot: int) -> int:
    """The stored attempt number of episode `slot` of step `step` (0-based)."""
    if not 0 <= slot < STEP_STRIDE:
        raise ValueError(f"slot {slot} is outside 0..{STEP_STRIDE - 1}")
    return step * STEP_STRIDE + slot


def first_attempt_of(step: int) -> int:
    """The first attempt number of `step`: every attempt from here on belongs to it or a later one."""
    return step * STEP_STRIDE


def step_of(attempt: int) -> int:
    return attempt // STEP_STRIDE


def as_training_attempt(result: EpisodeResult, step: int) -> EpisodeResult:
    """The result numbered for the store: its sampler attempt index becomes the slot of `step`."""
    return replace(result, attempt=training_attempt(step, result.attempt))
