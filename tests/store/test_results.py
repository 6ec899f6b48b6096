"""The results store's bookkeeping of tries (the rest is tested through the stages that use it)."""

from tbx.records import EpisodeResult, Outcome
from tbx.store import open_store


def result(task_id, attempt, outcome):
    return EpisodeResult(task_id, "mock", "f", attempt, 0, outcome, "", (), {}, {}, None, None,
                         {"task": "t", "tools": "t", "grader": "g"}, {})


def test_asking_about_an_attempt_never_stored_leaves_final_records_as_they_were(tmp_path):
    log = open_store(None, tmp_path, "run", "serve")
    log.append(result("a", 0, Outcome.SUCCESS))
    # a served run asks about every pending attempt but stores only the ones played (before: an empty
    # entry per question, and final_records raised IndexError)
    assert not log.is_final("b", 0, 2) and log.tries("b", 1) == 0
    assert [(r["task_id"], r["attempt"]) for r in log.final_records()] == [("a", 0)]
    log.close()
