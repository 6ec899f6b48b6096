"""Claims (tbx/store/claims.py): an attempt held by a live process is left to it; one held by a process
that is gone is taken over at once on this host, and after the heartbeat lease on another; a try is
stored only by the process that holds the attempt. Real processes stand for the owners."""

import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine

from tbx.errors import ConfigError
from tbx.process.owner import Owner, host_tag, this_process
from tbx.store.claims import LEASE_S, Claim, ClaimLost
from tbx.store.results import ResultStore, claims, open_store


def owner_of(proc: subprocess.Popen) -> str:
    import psutil

    return Owner(host_tag(), proc.pid, int(psutil.Process(proc.pid).create_time())).tag


def plant(store: ResultStore, owner: str, task: str = "t", attempt: int = 0, beat: float | None = None) -> None:
    with store.engine.begin() as conn:
        conn.execute(claims.insert().values(run_id=store.run_id, task_id=task, attempt=attempt, owner=owner,
                                            heartbeat_at=time.time() if beat is None else beat))


@pytest.fixture
def store(tmp_path):
    made = open_store(None, tmp_path, "run", "eval")
    yield made
    made.close()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_owner_keeps_its_attempt_a_gone_one_loses_it(store, sleeper):
    plant(store, owner_of(sleeper))
    assert store.claim("t", 0, 2) == (Claim.HELD, owner_of(sleeper))
    sleeper.kill()
    sleeper.wait()  # reaped: its pid no longer runs
    assert store.claim("t", 0, 2) == (Claim.OURS, this_process().tag)


def test_a_killed_but_unreaped_owner_is_gone(store, sleeper):
    plant(store, owner_of(sleeper))
    sleeper.kill()
    time.sleep(0.2)  # a zombie until waited for: it runs nothing any more
    assert store.claim("t", 0, 2)[0] is Claim.OURS


def test_a_reused_pid_is_not_the_owner(store, sleeper):
    other = Owner(host_tag(), sleeper.pid, int(time.time()) - 10_000)  # same pid, started at another time
    plant(store, other.tag)
    assert store.claim("t", 0, 2)[0] is Claim.OURS


def test_another_hosts_claim_lasts_while_its_heartbeat_is_fresh(store):
    elsewhere = Owner("ffffff" if host_tag() != "ffffff" else "eeeeee", 1, 1).tag
    plant(store, elsewhere, "fresh")
    plant(store, elsewhere, "stale", beat=time.time() - LEASE_S - 1)
    assert store.claim("fresh", 0, 2)[0] is Claim.HELD
    assert store.claim("stale", 0, 2)[0] is Claim.OURS


def test_a_try_is_stored_only_under_its_claim(store, sleeper):
    from tests.store.records import episode

    assert store.claim("t", 0, 2)[0] is Claim.OURS
    with store.engine.begin() as conn:  # taken over while this process looked gone
        conn.execute(claims.update().values(owner=owner_of(sleeper)))
    with pytest.raises(ClaimLost, match="taken over by pid"):
        store.append(episode("t", 0))
    assert store.records == [] and ResultStore(store.engine, "run", "eval").records == []


def test_a_final_attempt_is_not_claimed_again(store):
    from tests.store.records import episode

    assert store.claim("t", 0, 2)[0] is Claim.OURS
    store.append(episode("t", 0))
    store.release("t", 0)
    assert store.claim("t", 0, 2) == (None, "")  # a verdict is stored: nothing to play


def test_a_second_trainer_on_a_run_stops_with_one_line(store, sleeper):
    plant(store, owner_of(sleeper), "(run)", -1)
    with pytest.raises(ConfigError, match=f"is being trained by another process \\(pid {sleeper.pid} on this host\\)"):
        store.lock_run("outputs/train-x")
    sleeper.kill()
    sleeper.wait()
    store.lock_run("outputs/train-x")  # a killed trainer's run is taken over


def test_claims_of_gone_owners_are_forgotten_at_open(tmp_path, sleeper):
    first = open_store(None, tmp_path, "run", "eval")
    plant(first, owner_of(sleeper), "a")
    plant(first, Owner(host_tag(), 1, 1).tag, "b")  # pid 1 never started at t=1: gone
    first.close()
    engine = create_engine(f"sqlite:///{tmp_path / 'results.sqlite'}")
    second = open_store(None, tmp_path, "run", "eval")
    with engine.connect() as conn:
        assert [row.task_id for row in conn.execute(claims.select())] == ["a"]
    second.close()
    engine.dispose()
