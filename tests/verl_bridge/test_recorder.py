"""verl's training episodes in tbx's results store (no verl needed): slots, tries, claims, resume.

A real SQLite results store; a second agent-loop worker is a second process holding a claim.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tbx.config import Config
from tbx.episodes import EpisodeResult, Outcome
from tbx.episodes.seeds import rollout_seed
from tbx.store import open_store
from tbx.store.training import STEP_STRIDE, first_attempt_of, step_of, training_attempt
from tbx.verl_bridge.recorder import EpisodeRecorder

GROUP = 4


def result(task_id: str, outcome: Outcome, seed: int = 0) -> EpisodeResult:
    return EpisodeResult(task_id=task_id, domain="mock", family="a", attempt=0, seed=seed, outcome=outcome,
                         cause="", transcript=(), usage={}, counts={}, final_delta=None, grade=None,
                         hashes={"task": "t", "tools": "u", "grader": "g"}, timings={})


@pytest.fixture
def recorder(tmp_path):
    made = EpisodeRecorder.open(Config(), str(tmp_path), "run1", GROUP, max_error_retries=1)
    yield made
    made.close()


def test_numbering_carries_the_step():
    assert training_attempt(0, 3) == 3 and training_attempt(2, 5) == 2 * STEP_STRIDE + 5
    assert step_of(training_attempt(7, 99)) == 7 and first_attempt_of(3) == 3 * STEP_STRIDE
    with pytest.raises(ValueError):
        training_attempt(1, STEP_STRIDE)


def test_sessions_of_a_group_get_their_slots_and_a_second_group_of_the_task_the_next(recorder):
    first = [recorder.claim_slot("mock/a", 1, session) for session in range(GROUP)]
    assert first == [STEP_STRIDE + s for s in range(GROUP)]  # step 2 (index 1), slots 0..3
    again = [recorder.claim_slot("mock/a", 1, session) for session in range(GROUP)]  # a replacement group
    assert again == [STEP_STRIDE + GROUP + s for s in range(GROUP)]
    assert recorder.claim_slot("mock/b", 1, 0) == STEP_STRIDE  # another task starts at slot 0


def test_every_try_is_stored_and_the_settling_try_frees_nothing_for_reuse(recorder, tmp_path):
    attempt = recorder.claim_slot("mock/a", 0, 2)
    recorder.record(result("mock/a", Outcome.INFRA_ERROR, seed=1), attempt)
    recorder.record(result("mock/a", Outcome.SUCCESS, seed=2), attempt)
    store = open_store(None, tmp_path, "run1", "train")
    tries = [(r.attempt, r.try_index, r.outcome, r.stage) for r in store.records]
    assert tries == [(2, 0, "infra_error", "train"), (2, 1, "success", "train")]  # the error try's cost counts
    store.close()
    assert ("mock/a", 2) not in recorder.store.claims.held  # given back with the settling try
    assert recorder.claim_slot("mock/a", 0, 2) == GROUP + 2  # a final attempt is never handed out again


def test_a_slot_held_by_another_live_worker_is_passed_over(recorder, tmp_path):
    # a second worker process claims session 0's first slot and holds it while we claim ours
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert recorder.claim_slot("mock/a", 0, 0) == GROUP  # the next group's slot for session 0
        assert recorder.claim_slot("mock/a", 0, 1) == 1  # other sessions are free
    finally:
        holder.communicate("", timeout=60)


HOLDER = """
import sys
from pathlib import Path
from tbx.store import open_store
store = open_store(None, Path(sys.argv[1]), "run1", "train", read_tries=False)
store.claim("mock/a", 0, 1)
print("held", flush=True)
sys.stdin.read()
store.close()
"""


def test_a_resumed_run_discards_the_steps_after_its_checkpoint(recorder, tmp_path):
    for step in range(3):
        attempt = recorder.claim_slot("mock/a", step, 0)
        recorder.record(result("mock/a", Outcome.FAILURE), attempt)
    store = open_store(None, tmp_path, "run1", "train")
    assert store.discard_from(first_attempt_of(1)) == 2  # checkpoint after step 1: steps 2 and 3 replay
    assert [step_of(r.attempt) for r in store.records] == [0]
    store.close()


def test_a_resumed_asynchronous_run_stores_a_reissued_session_once(tmp_path):
    """verl's asynchronous checkpoint keeps the groups in flight and the resumed run re-issues them under its
    first step with the same prompt uid: the killed process's tries of such a session (same first seed, an
    earlier step) are deleted before the replay is stored; a trained group's tries and later steps' stay."""
    killed = EpisodeRecorder.open(Config(), str(tmp_path), "run1", GROUP, max_error_retries=1)
    interrupted = killed.claim_slot("mock/a", 0, 1)  # dispatched at step 1, in flight at the checkpoint
    killed.record(result("mock/a", Outcome.INFRA_ERROR, seed=rollout_seed("u-old", 1, 0)), interrupted)
    killed.record(result("mock/a", Outcome.FAILURE, seed=rollout_seed("u-old", 1, 1)), interrupted)
    trained = killed.claim_slot("mock/a", 0, 0)
    killed.record(result("mock/a", Outcome.SUCCESS, seed=rollout_seed("u-trained", 0, 0)), trained)
    killed.close()

    resumed = EpisodeRecorder.open(Config(), str(tmp_path), "run1", GROUP, max_error_retries=1, resumed_after_step=1)
    try:
        assert resumed.discard_interrupted("mock/a", 2, rollout_seed("u-old", 1, 0)) == 0  # not the resumed step
        assert resumed.discard_interrupted("mock/a", 1, rollout_seed("u-new", 1, 0)) == 0  # a fresh group
        assert resumed.discard_interrupted("mock/a", 1, rollout_seed("u-old", 1, 0)) == 2  # both tries
        again = resumed.claim_slot("mock/a", 1, 1)
        resumed.record(result("mock/a", Outcome.FAILURE, seed=rollout_seed("u-old", 1, 0)), again)
    finally:
        resumed.close()
    store = open_store(None, tmp_path, "run1", "train")
    stored = [(step_of(r.attempt), r.attempt % STEP_STRIDE, r.try_index, r.outcome) for r in store.records]
    store.close()
    assert stored == [(0, 0, 0, "success"), (1, 1, 0, "failure")]


def test_a_fresh_start_discards_nothing(recorder):
    attempt = recorder.claim_slot("mock/a", 0, 0)
    recorder.record(result("mock/a", Outcome.FAILURE, seed=rollout_seed("u", 0, 0)), attempt)
    assert recorder.discard_interrupted("mock/a", 0, rollout_seed("u", 0, 0)) == 0
