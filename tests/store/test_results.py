"""The results store's bookkeeping of tries (the rest is tested through the stages that use it)."""

import signal
import subprocess
import sys
from pathlib import Path

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
    assert [(r.task_id, r.attempt) for r in log.final_records()] == [("a", 0)]
    log.close()


WRITER_KILLED_AFTER_ONE_TRY = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from records import episode
from tbx.store import open_store
store = open_store(None, Path({run!r}), "run", "train", 5, read_tries=False)
store.claim("t", 0, 0)
store.append(episode("t", 0), 0.0, 0)
os.kill(os.getpid(), signal.SIGKILL)  # as Ray ends verl's agent-loop workers: no close, the try is in the WAL
"""


def test_a_store_opened_twice_in_one_process_keeps_what_another_process_wrote(tmp_path):
    """verl's job process held the run's store open, opened it a second time (discarding unsaved steps)
    and closed that one; verl's workers then stored their tries and were killed. Checking the second
    store's file by open()/close() had dropped the process's locks on it, so a connection believed
    itself the last one and deleted the WAL file the workers wrote to: the run ended with no tries."""
    holder = open_store(None, tmp_path, "run", "train", 5, read_tries=False)
    holder.lock_run(str(tmp_path))
    open_store(None, tmp_path, "run", "train", 5, read_tries=False).close()
    code = WRITER_KILLED_AFTER_ONE_TRY.format(tests=str(Path(__file__).parent), run=str(tmp_path))
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == -signal.SIGKILL
    holder.close()
    store = open_store(None, tmp_path, "run", "train", 5)
    assert [(r.task_id, r.attempt) for r in store.final_records()] == [("t", 0)]
    store.close()
