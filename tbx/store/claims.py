"""Claims: an attempt is claimed in the results store before it runs, so however many processes work
on one run, each attempt is played by one of them and gets one verdict.

A claim is a row (run, task, attempt) naming its owner (`tbx.process.owner`: host, pid, start time) and a
heartbeat. A process plays an attempt only while it holds the claim, and stores each try only if it
still holds it (checked in the transaction that stores the try). A claim whose owner is gone can be
taken over, so a killed run resumes at once: on the same host the owner's process is looked up; an
owner on another host (a shared PostgreSQL store) counts as gone once its heartbeat, renewed every
`HEARTBEAT_S` by a thread, is older than `LEASE_S`.

Races are settled by the database: SQLite store transactions begin IMMEDIATE (one writer at a time,
`tbx.store.results`); on PostgreSQL the claim row is locked (`SELECT ... FOR UPDATE`) by whoever reads
it to take it over or to store a try under it.
"""

from __future__ import annotations

import threading
import time
from enum import Enum

from sqlalchemy import Column, Connection, Engine, Float, Integer, MetaData, String, Table, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tbx.process.owner import Owner, this_process

HEARTBEAT_S = 10.0  # how often a process renews its claims
LEASE_S = 90.0  # a claim of another host whose heartbeat is older than this is taken over
RUN_LOCK = "(run)"  # the task id of a claim on the whole run (training: one trainer per run)


class Claim(Enum):
    OURS = "ours"  # this process holds it: play the attempt
    HELD = "held"  # a live process holds it: leave the attempt to it


class ClaimLost(Exception):
    """This process no longer holds the claim it played under (taken over while it looked gone)."""


def claims_table(metadata: MetaData) -> Table:
    return Table(
        "claims", metadata,
        Column("run_id", String(64), primary_key=True),
        Column("task_id", String(200), primary_key=True),
        Column("attempt", Integer, primary_key=True),
        Column("owner", String(80), nullable=False),
        Column("heartbeat_at", Float, nullable=False),
    )


def owner_gone(tag: str, heartbeat_at: float, now: float) -> bool:
    """Whether a claim's owner no longer works on it (see the module docstring)."""
    owner = Owner.parse(tag)
    if owner is not None and owner.on_this_host():
        return owner.gone()
    return now - heartbeat_at > LEASE_S


def describe_owner(tag: str) -> str:
    owner = Owner.parse(tag)
    if owner is None:
        return f"owner {tag}"
    return f"pid {owner.pid} on {'this host' if owner.on_this_host() else 'host ' + owner.host}"


class Claims:
    """The claims of one run, taken and given back by this process."""

    def __init__(self, engine: Engine, table: Table, run_id: str):
        self.engine, self.table, self.run_id = engine, table, run_id
        self.me = this_process().tag
        self.held: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _key(self, task_id: str, attempt: int):  # a SQLAlchemy condition
        t = self.table.c
        return (t.run_id == self.run_id) & (t.task_id == task_id) & (t.attempt == attempt)

    def take(self, task_id: str, attempt: int) -> tuple[Claim, str]:
        """Claim the attempt; returns (OURS, us) or (HELD, the live owner's tag)."""
        now = time.time()
        insert = (pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert)(self.table)
        row = {"run_id": self.run_id, "task_id": task_id, "attempt": attempt, "owner": self.me, "heartbeat_at": now}
        with self.engine.begin() as conn:
            if conn.execute(insert.values(**row).on_conflict_do_nothing()).rowcount == 1:
                return self._taken(task_id, attempt)
            current = conn.execute(select(self.table.c.owner, self.table.c.heartbeat_at)
                                   .where(self._key(task_id, attempt)).with_for_update()).first()
            if current is None:  # given back between the two statements: try again later
                return Claim.HELD, ""
            if current.owner != self.me and not owner_gone(current.owner, current.heartbeat_at, now):
                return Claim.HELD, current.owner
            conn.execute(update(self.table).where(self._key(task_id, attempt))
                         .values(owner=self.me, heartbeat_at=now))
        return self._taken(task_id, attempt)

    def _taken(self, task_id: str, attempt: int) -> tuple[Claim, str]:
        self.held.add((task_id, attempt))
        self._start_heartbeat()
        return Claim.OURS, self.me

    def check(self, conn: Connection, task_id: str, attempt: int) -> None:
        """Inside the transaction that stores a try: raise `ClaimLost` unless this process holds the claim
        (the row stays locked until the try is stored, so nobody takes it over in between)."""
        owner = conn.execute(select(self.table.c.owner).where(self._key(task_id, attempt)).with_for_update()).scalar()
        if owner != self.me:
            self.held.discard((task_id, attempt))
            raise ClaimLost(f"attempt {attempt} of {task_id} was taken over by {describe_owner(owner or '?')}")

    def give_back(self, task_id: str, attempt: int, conn: Connection | None = None) -> None:
        """Delete this process's claim (in `conn`'s transaction when given); nothing to do for one it
        does not hold (given back already with the try that made the attempt final)."""
        if (task_id, attempt) not in self.held:
            return
        delete = self.table.delete().where(self._key(task_id, attempt) & (self.table.c.owner == self.me))
        if conn is not None:
            conn.execute(delete)
        else:
            with self.engine.begin() as own:
                own.execute(delete)
        self.held.discard((task_id, attempt))

    def forget_gone_owners(self) -> int:
        """Delete this run's claims whose owner is gone (left by killed processes); return how many."""
        now = time.time()
        with self.engine.begin() as conn:
            rows = conn.execute(select(self.table.c.owner, self.table.c.heartbeat_at)
                                .where(self.table.c.run_id == self.run_id)).all()
            gone = {owner for owner, beat in rows if owner != self.me and owner_gone(owner, beat, now)}
            for owner in gone:
                conn.execute(self.table.delete().where((self.table.c.run_id == self.run_id)
                                                       & (self.table.c.owner == owner)))
        return len(gone)

    def _start_heartbeat(self) -> None:
        if self._beat is None or not self._beat.is_alive():
            self._stop.clear()
            self._beat = threading.Thread(target=self._heartbeat, name="tbx-claims", daemon=True)
            self._beat.start()

    def _heartbeat(self) -> None:
        """Renew this process's claims until `stop` (a thread: a busy event loop cannot starve it)."""
        while not self._stop.wait(HEARTBEAT_S):
            try:
                with self.engine.begin() as conn:
                    conn.execute(update(self.table).where((self.table.c.run_id == self.run_id)
                                                          & (self.table.c.owner == self.me))
                                 .values(heartbeat_at=time.time()))
            except Exception:  # a missed beat is retried; the store's own calls report errors
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
