"""Every seed an episode is played with, derived in one place: a hash of the parts that name the try, so
no global generator and no clock decide it, and a stored run's seeds can be derived again.

Two derivations, because they start from different keys, and both values are part of stored runs (the
seeds of their episodes, the faults they injected), so neither may change:

- `episode_seed(run_seed, task_id, attempt, try_index)`: tbx's own campaigns (eval, probe, serve, `tbx.envs`)
  and the native trainer, keyed by the run's `seed`;
- `rollout_seed(uid, session, try_index)`: the verl bridge's episodes, keyed by verl's prompt uid and session
  index (verl numbers the rollouts; the run's seed is not part of its key). `verl_fault_seed` draws the
  faults of a verl try from its task and stored attempt instead, so a replayed step injects the same faults.
"""

from __future__ import annotations

import hashlib


def _hashed(*parts: object) -> int:
    """The first four bytes (little-endian) of SHA-256 over the parts joined by `|`."""
    digest = hashlib.sha256("|".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def episode_seed(run_seed: int, task_id: str, attempt: int, try_index: int) -> int:
    """The seed of try `try_index` of attempt `attempt` of `task_id` in a run seeded `run_seed`."""
    return _hashed(run_seed, task_id, attempt, try_index)


def try_seeds(run_seed: int, task_id: str, attempt: int, tries: int) -> tuple[int, int]:
    """The episode seed and fault seed of the next try of an attempt that has `tries` stored tries. A re-run
    keeps the attempt's seed, so errors cannot bias which outcomes survive (an error more likely on long,
    successful episodes would otherwise swap a success for a fresh draw); only the injected faults are drawn
    anew per try."""
    return episode_seed(run_seed, task_id, attempt, 0), episode_seed(run_seed, task_id, attempt, tries)


def training_seed(run_seed: int, task_id: str, step: int, attempt: int) -> int:
    """The seed of a native training episode: attempt `attempt` of `task_id` at step `step` (a re-run is
    another attempt, with its own seed and faults)."""
    return episode_seed(run_seed, f"{task_id}@step{step}", attempt, 0)


def rollout_seed(uid: str, session: int, try_index: int) -> int:
    """The seed of a verl rollout's try, from verl's prompt uid and session index (sampling and the user)."""
    return _hashed(uid, session, try_index)


def verl_fault_seed(task_id: str, stored_attempt: int, try_index: int) -> int:
    """The faults of a verl try: from the task and the stored attempt number (its step and slot), not from
    verl's random prompt uid, so the same run, and a killed step replayed, injects the same faults."""
    return rollout_seed(f"{task_id}@{stored_attempt}", 0, try_index)
