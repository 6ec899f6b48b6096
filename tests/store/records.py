"""Minimal episode records to store and stored tries to read (the store's and the readers' tests need rows,
not episodes)."""

from tbx.messages import Usage
from tbx.records import EpisodeResult, Outcome, StoredTry


def episode(task_id: str, attempt: int, outcome: Outcome = Outcome.SUCCESS) -> EpisodeResult:
    return EpisodeResult(task_id=task_id, domain="mock", family="f", attempt=attempt, seed=0, outcome=outcome,
                         cause="", transcript=(), usage={"agent": Usage()}, counts={}, final_delta=None,
                         grade=None, hashes={"task": "t", "tools": "t", "grader": "g"}, timings={"total": 0.0})


def stored(task_id: str, attempt: int, outcome: Outcome | str = Outcome.SUCCESS, **fields) -> StoredTry:
    """A stored try of `task_id` in the mock domain; the fields not given are empty."""
    values = {"domain": "mock", "family": "f", "seed": 0, "cause": "", "transcript": (), "usage": {}, "counts": {},
              "final_delta": None, "grade": None, "hashes": {}, "timings": {}} | fields
    return StoredTry(task_id=task_id, attempt=attempt, outcome=Outcome(outcome), **values)
