"""verl's training episodes in tbx's results store, numbered as native training numbers them (no verl).

Every try an agent-loop worker plays (errored ones included: their cost counts) is stored in the
run's store as a `train` row, so `stage=report`, `benchmarks/compare_runs.py` and the cost figures
read verl runs as they read native ones. The step is verl's `global_steps` (1-based) minus one; the
slot is the episode's place in that step: `j * group_size + session_id` for the first `j` whose
attempt no process holds or has finished. Workers of one run (one per node or more) claim slots
in the store, so two never write the same attempt; verl may draw a task twice in a step (groups
that replace zero-variance ones), which only moves the second group to the next `j`.

A resumed run discards the attempts of every step after verl's newest checkpoint before verl
starts (`tbx.verl_bridge.launch`), so a step replayed after a kill is stored once. In verl's
asynchronous mode the checkpoint also keeps the groups that were in flight, and the resumed run
re-issues them under its first step with their prompt uid: each re-issued session's first try has the
seed of the one the killed process played, and `discard_interrupted` deletes that one's stored tries
(stored under its first dispatch step, never trained on) before the replay is stored.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tbx.config import Config
from tbx.errors import InfraError
from tbx.records import EpisodeResult
from tbx.store import ResultStore, open_store
from tbx.store.claims import Claim
from tbx.store.training import STEP_STRIDE, first_attempt_of, training_attempt


class EpisodeRecorder:
    """One process's writer of training episodes into the run's results store."""

    def __init__(self, store: ResultStore, cfg: Config, group_size: int, max_error_retries: int,
                 resumed_after_step: int = 0):
        self.store, self.cfg = store, cfg
        self.group_size, self.max_error_retries = group_size, max_error_retries
        self.resumed_after_step = resumed_after_step  # verl's checkpoint this start resumed from (0: none)

    @classmethod
    def open(cls, cfg: Config, run_dir: str, run_id: str, group_size: int, max_error_retries: int,
             resumed_after_step: int = 0) -> EpisodeRecorder:
        store = open_store(cfg.store.url, Path(run_dir), run_id, "train", cfg.store.timeout_s, read_tries=False)
        return cls(store, cfg, group_size, max_error_retries, resumed_after_step)

    def discard_interrupted(self, task_id: str, step: int, first_seed: int) -> int:
        """Before a session of the resumed run's first step (0-based `step`) is played: delete the tries a
        killed process stored for the same session (the same `first_seed`) under an earlier step; return
        how many. Only verl's asynchronous mode re-issues a session; elsewhere nothing matches."""
        if not self.resumed_after_step or step != self.resumed_after_step:
            return 0
        return self.store.discard_seeded(task_id, first_seed, first_attempt_of(step))

    def claim_slot(self, task_id: str, step: int, session_id: int) -> int:
        """Claim the stored attempt number of session `session_id` of a group of `task_id` in `step`
        (0-based); held until its last try is stored."""
        for group in range(STEP_STRIDE // self.group_size):
            attempt = training_attempt(step, group * self.group_size + session_id)
            if (task_id, attempt) in self.store.claims.held:  # another episode of this process plays it
                continue
            state, _owner = self.store.claim(task_id, attempt, self.max_error_retries)
            if state is Claim.OURS:
                return attempt
        raise InfraError(f"no free attempt number for {task_id} in step {step + 1}: more than "
                         f"{STEP_STRIDE // self.group_size} groups of it")

    def record(self, result: EpisodeResult, attempt: int) -> None:
        """Store one try under the claimed attempt; the try that settles it gives the claim back."""
        from tbx.campaign.components import episode_cost

        self.store.append(replace(result, attempt=attempt), episode_cost(self.cfg, result.usage),
                          self.max_error_retries)

    def release(self, task_id: str, attempt: int) -> None:
        """Give back an attempt that will store nothing more (a setup error ended the episode)."""
        self.store.release(task_id, attempt)

    def close(self) -> None:
        self.store.close()
