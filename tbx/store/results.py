"""One row per try of an attempt, through SQLAlchemy: a SQLite file by default, PostgreSQL by URL
(many Slurm jobs can write one campaign at once).

Writes are idempotent: the key is (run, task, attempt, try) and a row that exists is kept, so a
re-sent or re-run write never duplicates. A killed run resumes from what is here: an attempt is
final when its last try reached a verdict or used up its error retries; nothing final runs again.
Several processes may work on one run: an attempt is claimed here before it runs (`claims.py`), and
a try is stored only under its claim. The full episode (transcript, terminal-state delta, grade,
hashes) is kept as JSON beside the columns that reports and resumption query; readers get it back as a
`tbx.records.StoredTry`, whatever release wrote it.

Every wait is bounded: SQLite waits at most `timeout_s` for the write lock; PostgreSQL connections
time out and carry `statement_timeout`. A store that cannot be reached or written at start, or a disk
that fills up, is a `ConfigError` naming `store.url` or the run folder (one line, exit status 2).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    make_url,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)

from tbx.errors import ConfigError, InfraError
from tbx.process.durable import ensure_folder
from tbx.records import ERROR_OUTCOMES, EpisodeResult, Outcome, StoredTry
from tbx.store.claims import RUN_LOCK, Claim, Claims, claims_table, describe_owner


def settled(last_outcome: Outcome, tries: int, max_error_retries: int) -> bool:
    """Whether an attempt is final after `tries` tries, the last ending in `last_outcome`: a verdict,
    or an error with no re-run left."""
    return last_outcome not in ERROR_OUTCOMES or tries > max_error_retries


metadata = MetaData()

attempts = Table(
    "attempts", metadata,
    Column("run_id", String(64), primary_key=True),
    Column("task_id", String(200), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("try_index", Integer, primary_key=True),
    Column("stage", String(32), nullable=False),
    Column("domain", String(64), nullable=False),
    Column("family", String(100), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("reward", Float),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("task_hash", String(32), nullable=False),
    Column("tools_hash", String(32), nullable=False),
    Column("grader_hash", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("record", Text, nullable=False),
)


claims = claims_table(metadata)


DAMAGED_FIX = ("start over with another run_dir (or delete that folder); its tries cannot all be read back, "
               "so nothing resumes from it")


def check_store_file(path: Path) -> None:
    """Refuse a results.sqlite that is not one: not a SQLite file (replaced by text), damaged pages, or
    another tool's database (tables of its own, or an `attempts` table of another shape), before anything
    reads or writes it."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    # Only through SQLite, never open()/close() of the file: closing any descriptor of a database file
    # drops every POSIX lock this process holds on it, so a store already open in this process would no
    # longer count as open, and the next connection to close would take the WAL file (and the tries other
    # processes had written to it) away with it (sqlite.org/howtocorrupt.html, 2.2).
    try:
        with closing(sqlite3.connect(path, timeout=5)) as conn:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {row[1] for row in conn.execute("PRAGMA table_info(attempts)")}
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB":
            raise ConfigError(str(path), "run_dir", "is not a SQLite results store", DAMAGED_FIX) from None
        raise ConfigError(str(path), "run_dir", f"is a damaged results store ({exc})", DAMAGED_FIX) from None
    if problems != ["ok"]:
        first = " ".join(problems[0].replace("*** in database main ***", "").split())
        raise ConfigError(str(path), "run_dir", f"is a damaged results store ({first})", DAMAGED_FIX)
    ours = set(metadata.tables)
    if tables and (not tables & ours or (columns and columns != set(attempts.c.keys()))):
        raise ConfigError(str(path), "run_dir", f"holds another tool's database (tables: {', '.join(sorted(tables))})",
                          "give another run_dir of its own (or none: each run gets its own folder); that file is left as it is")


def _sqlite_engine(path: Path, timeout_s: float) -> Engine:
    ensure_folder(path.parent)
    check_store_file(path)
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": timeout_s})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # SQLAlchemy's hook signature
        dbapi_conn.isolation_level = None  # transactions begin below, not in the driver
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        # a commit survives the process being killed at once; only a machine crash may lose the last few
        # (they are then run again), and the store is never corrupt. FULL costs an fsync per claim and try.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        # IMMEDIATE: a transaction takes the write lock at its start, so a claim read and the write that
        # follows it are one step for every other process (a DEFERRED one could read, then lose the lock)
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _url_engine(url: str, timeout_s: float) -> Engine:
    """An engine on `store.url`; a URL that names no database SQLAlchemy knows is the user's to fix."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "postgresql":
            return create_engine(parsed, pool_pre_ping=True, connect_args={
                "connect_timeout": max(1, int(timeout_s)),
                "options": f"-c statement_timeout={int(timeout_s * 1000)}"})
        return create_engine(parsed, pool_pre_ping=True)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise ConfigError("conf/config.yaml", "store.url", f"is not a database URL ({str(exc).splitlines()[0]})",
                          "give store.url=postgresql+psycopg://USER@HOST:PORT/DB, or leave it empty for "
                          "<run folder>/results.sqlite") from None


def _store_error(engine: Engine, exc: DBAPIError) -> ConfigError:
    """A store that cannot be reached or written, as the one-line error that names what to fix."""
    first = str(exc.orig if exc.orig is not None else exc).strip().splitlines()[0]
    if engine.dialect.name == "sqlite":
        path = engine.url.database or "results.sqlite"
        disk = "disk is full" in first or "readonly" in first or "unable to open" in first
        return ConfigError(path, "out_root", f"the results store cannot be written ({first})",
                           "free space on that disk, or give out_root=DIR on a writable disk" if disk else
                           "check the file, or give another out_root")
    return ConfigError(engine.url.render_as_string(hide_password=True), "store.url",
                       f"the results store cannot be reached ({first})",
                       "start that database server, or fix store.url (postgresql+psycopg://USER@HOST:PORT/DB)")


class ResultStore:
    """Attempts of one run (`run_id`) in a store that may hold many runs."""

    def __init__(self, engine: Engine, run_id: str, stage: str, read_tries: bool = True):
        self.engine, self.run_id, self.stage = engine, run_id, stage
        try:
            metadata.create_all(engine)
        except (OperationalError, ProgrammingError, IntegrityError) as exc:
            if "already exists" not in str(exc):  # another shard created it between check and create
                raise _store_error(engine, exc) from None
        self.claims = Claims(engine, claims, run_id)
        self._tries: dict[tuple[str, int], list[StoredTry]] = defaultdict(list)
        self.records: list[StoredTry] = []
        if read_tries:  # a campaign worker reads an attempt's tries when it claims it, not every try up front
            self.refresh()
        # each attempt's tries when this command opened the store: what earlier commands left (see tries_at_open)
        self._at_open = {key: len(tries) for key, tries in self._tries.items()}

    def refresh(self) -> None:
        """Read this run's tries again (other processes may have stored some)."""
        self._tries: dict[tuple[str, int], list[StoredTry]] = defaultdict(list)
        self.records: list[StoredTry] = []
        for record in self._read(attempts.c.run_id == self.run_id):
            self._remember(record)

    def _read(self, condition) -> list[StoredTry]:  # a SQLAlchemy condition
        query = select(attempts.c.record).where(condition).order_by(attempts.c.task_id, attempts.c.attempt,
                                                                     attempts.c.try_index)
        try:
            with self.engine.connect() as conn:
                return [StoredTry.parse(blob) for (blob,) in conn.execute(query)]
        except OperationalError as exc:
            raise _store_error(self.engine, exc) from None

    def _remember(self, record: StoredTry) -> None:
        self.records.append(record)
        self._tries[(record.task_id, record.attempt)].append(record)

    def claim(self, task_id: str, attempt: int, max_error_retries: int) -> tuple[Claim | None, str]:
        """Claim an attempt to play it: (OURS, me) with its tries read again, (None, "") when it turned
        out final (then given back), or (HELD, owner) while a live process plays it."""
        state, owner = self.claims.take(task_id, attempt)
        if state is Claim.HELD:
            return state, owner
        key = (task_id, attempt)
        fresh = self._read((attempts.c.run_id == self.run_id) & (attempts.c.task_id == task_id)
                           & (attempts.c.attempt == attempt))
        if fresh != self._tries.get(key, []):  # another process stored tries of it meanwhile
            self.records = [r for r in self.records if (r.task_id, r.attempt) != key] + fresh
            self._tries[key] = fresh
        if self.is_final(task_id, attempt, max_error_retries):
            self.claims.give_back(task_id, attempt)
            return None, ""
        return state, owner

    def release(self, task_id: str, attempt: int) -> None:
        self.claims.give_back(task_id, attempt)

    def lock_run(self, where: str) -> None:
        """Hold the whole run for this process (training: one trainer per run); a live holder stops us."""
        self.claims.forget_gone_owners()
        state, owner = self.claims.take(RUN_LOCK, -1)
        if state is Claim.HELD:
            raise ConfigError(where, "run_dir", f"is being trained by another process ({describe_owner(owner)})",
                              "wait for it to finish or stop it; the run of a killed process is taken over "
                              "by the next start")

    def stored_tries(self) -> int:
        """How many tries of this run the store holds now, whichever process stored them."""
        query = select(func.count()).select_from(attempts).where(attempts.c.run_id == self.run_id)
        try:
            with self.engine.connect() as conn:
                return int(conn.execute(query).scalar_one())
        except OperationalError as exc:
            raise _store_error(self.engine, exc) from None

    def tries(self, task_id: str, attempt: int) -> int:
        return len(self._tries.get((task_id, attempt), ()))

    def tries_at_open(self, task_id: str, attempt: int) -> int:
        """The attempt's tries stored before this command opened the store (earlier commands' tries), so a
        command that plays a campaign more than once (the rounds of an adaptive probe) tells its own error
        tries from those it may play again (`tbx.campaign.attempts.try_limit`). 0 for a store opened with
        read_tries=False."""
        return self._at_open.get((task_id, attempt), 0)

    def is_final(self, task_id: str, attempt: int, max_error_retries: int) -> bool:
        tries = self._tries.get((task_id, attempt), [])  # a lookup adds no empty entry for final_records
        if not tries:
            return False
        return settled(tries[-1].outcome, len(tries), max_error_retries)

    def append(self, result: EpisodeResult, cost_usd: float = 0.0, max_error_retries: int | None = None
               ) -> StoredTry:
        """Store a try (under this process's claim, when it holds one). With `max_error_retries`, a try
        that makes the attempt final gives its claim back in the same transaction."""
        stored = StoredTry.of(result, self.tries(result.task_id, result.attempt), cost_usd, self.stage)
        usage = result.usage
        row = {
            "run_id": self.run_id, "task_id": result.task_id, "attempt": result.attempt,
            "try_index": stored.try_index, "stage": self.stage, "domain": result.domain, "family": result.family,
            "outcome": result.outcome.value, "reward": result.reward,
            "prompt_tokens": sum(u.prompt_tokens for u in usage.values()),
            "completion_tokens": sum(u.completion_tokens for u in usage.values()),
            "cost_usd": cost_usd, "seconds": result.timings.get("total", 0.0),
            "task_hash": result.hashes["task"], "tools_hash": result.hashes["tools"],
            "grader_hash": result.hashes["grader"], "created_at": time.time(),
            "record": json.dumps(stored.to_dict(), ensure_ascii=False, default=str),
        }
        dialect = self.engine.dialect.name
        statement = (pg_insert if dialect == "postgresql" else sqlite_insert)(attempts).values(**row)
        key = (result.task_id, result.attempt)
        final = max_error_retries is not None and settled(result.outcome, stored.try_index + 1, max_error_retries)
        try:
            with self.engine.begin() as conn:
                if key in self.claims.held:
                    self.claims.check(conn, *key)
                conn.execute(statement.on_conflict_do_nothing())
                if final and key in self.claims.held:
                    self.claims.give_back(*key, conn)
        except OperationalError as exc:
            raise _store_error(self.engine, exc) from None
        self._remember(stored)
        return stored

    def discard_from(self, first_attempt: int) -> int:
        """Delete this run's tries of attempts numbered `first_attempt` and above; return how many.

        For training, whose attempt numbers carry the step: a resumed run replays every step after
        its checkpoint, so the tries a killed process stored for those steps were never trained on
        and would otherwise sit beside their replays as second tries of the same attempt.
        """
        doomed = (attempts.c.run_id == self.run_id) & (attempts.c.attempt >= first_attempt)
        with self.engine.begin() as conn:
            removed = conn.execute(attempts.delete().where(doomed)).rowcount
        kept = [r for r in self.records if r.attempt < first_attempt]
        self.records, self._tries = [], defaultdict(list)
        for record in kept:
            self._remember(record)
        return removed

    def discard_seeded(self, task_id: str, seed: int, below: int) -> int:
        """Delete this run's tries of `task_id`'s attempts numbered below `below` whose first try was played
        with `seed`; return how many.

        For verl's asynchronous training: a resumed run re-issues the groups that were in flight at its
        checkpoint under the resumed step, with the same prompt uid, so the same seed; the tries a killed
        process stored for them under their first dispatch step were never trained on and would otherwise
        sit beside their replays (`tbx.verl_bridge.recorder`).
        """
        mine = (attempts.c.run_id == self.run_id) & (attempts.c.task_id == task_id)
        firsts = self._read(mine & (attempts.c.attempt < below) & (attempts.c.try_index == 0))
        doomed = sorted({r.attempt for r in firsts if r.seed == seed})
        if not doomed:
            return 0
        with self.engine.begin() as conn:
            removed = conn.execute(attempts.delete().where(mine & attempts.c.attempt.in_(doomed))).rowcount
        for attempt in doomed:
            self._tries.pop((task_id, attempt), None)
        self.records = [r for r in self.records if not (r.task_id == task_id and r.attempt in doomed)]
        return removed

    def final_records(self) -> list[StoredTry]:
        """The last try of every attempt, in task/attempt order."""
        return [tries[-1] for _, tries in sorted(self._tries.items())]

    def error_tries(self) -> int:
        return sum(1 for r in self.records if r.outcome in ERROR_OUTCOMES)

    def close(self) -> None:
        self.claims.stop()
        self.engine.dispose()


def open_store(url: str | None, run_dir: Path, run_id: str, stage: str, timeout_s: float = 60.0,
               read_tries: bool = True) -> ResultStore:
    """The run's store: `url` when given (PostgreSQL for many writers), else `<run_dir>/results.sqlite`.
    Claims left by processes that are gone are forgotten. `read_tries=False`: the run's tries are read
    attempt by attempt as they are claimed (a campaign worker), not all at once."""
    engine = _url_engine(url, timeout_s) if url else _sqlite_engine(run_dir / "results.sqlite", timeout_s)
    store = ResultStore(engine, run_id, stage, read_tries)
    try:
        store.claims.forget_gone_owners()
    except OperationalError as exc:
        raise _store_error(engine, exc) from None
    return store


def _record_blobs(source: str | Path, run_id: str | None = None) -> Iterator[tuple[str, str, int, int]]:
    """(stored JSON, task id, attempt, try) of every try from a run folder, a results.sqlite file or a
    database URL."""
    text = str(source)
    if "://" in text:
        engine = create_engine(text)
    else:
        path = Path(text)
        path = path / "results.sqlite" if path.is_dir() else path
        if not path.is_file():
            raise InfraError(f"no results store at {path}")
        check_store_file(path)
        engine = create_engine(f"sqlite:///{path}")
    try:
        c = attempts.c
        query = select(c.record, c.task_id, c.attempt, c.try_index).order_by(c.run_id, c.task_id, c.attempt,
                                                                            c.try_index)
        if run_id is not None:
            query = query.where(c.run_id == run_id)
        with engine.connect() as conn:
            yield from (tuple(row) for row in conn.execute(query))
    finally:
        engine.dispose()


def read_records(source: str | Path, run_id: str | None = None, field: str = "run_dir",
                 fix: str = DAMAGED_FIX) -> list[StoredTry]:
    """Every stored try from a run folder, a results.sqlite file or a database URL; one that does not read
    back as a try (edited, cut short, written by another tool) is named with `field`, the setting that
    gave `source`, and `fix`."""
    tries = []
    for blob, task_id, attempt, try_index in _record_blobs(source, run_id):
        try:
            tries.append(StoredTry.parse(blob))
        except (ValueError, TypeError, KeyError) as exc:
            where = Path(source) / "results.sqlite" if Path(str(source)).is_dir() else source
            raise ConfigError(str(where), field, f"holds a stored try that is not a tbx record (task {task_id} "
                              f"attempt {attempt} try {try_index}: {type(exc).__name__}: {str(exc)[:80]})",
                              fix) from None
    return tries


def records_digest(source: str | Path) -> str:
    """A hash of every stored try (as stored, not decoded): what a replay of this store would play."""
    digest = hashlib.sha256()
    try:
        for blob, *_ in _record_blobs(source):
            digest.update(blob.encode() + b"\0")
    except OperationalError:  # no table yet: an empty store
        pass
    return digest.hexdigest()[:16]
