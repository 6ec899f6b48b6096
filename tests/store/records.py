"""A minimal episode record to store (the store's tests need rows, not episodes)."""

from tbx.messages import Usage
from tbx.records import EpisodeResult, Outcome


def episode(task_id: str, attempt: int, outcome: Outcome = Outcome.SUCCESS) -> EpisodeResult:
    return EpisodeResult(task_id=task_id, domain="mock", family="f", attempt=attempt, seed=0, outcome=outcome,
                         cause="", transcript=(), usage={"agent": Usage()}, counts={}, final_delta=None,
                         grade=None, hashes={"task": "t", "tools": "t", "grader": "g"}, timings={"total": 0.0})
