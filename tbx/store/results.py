"""One row per try of an attempt, through SQLAlchemy: a SQLite file by default, PostgreSQL by URL
(many Slurm jobs can write one campaign at once).

Writes are idempotent: the key is (run, task, attempt, try) and a row that exists is kept, so a
re-sent or re-run write never duplicates. A killed run resumes from what is here: an attempt is
final when its last try reached a verdict or used up its error retries; nothing final runs again.
The full episode (transcript, terminal-state delta, grade, hashes) is kept as JSON beside the
columns that reports and resumption query.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

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
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from tbx.episodes.record import ERROR_OUTCOMES, EpisodeResult
from tbx.errors import InfraError

ERROR_VALUES = {o.value for o in ERROR_OUTCOMES}
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


def _sqlite_engine(path: Path) -> Engine:
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # noqa: ANN001 - SQLAlchemy's hook signature
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    return engine


class ResultStore:
    """Attempts of one run (`run_id`) in a store that may hold many runs."""

    def __init__(self, engine: Engine, run_id: str, stage: str):
        self.engine, self.run_id, self.stage = engine, run_id, stage
        try:
            metadata.create_all(engine)
        except (OperationalError, ProgrammingError, IntegrityError) as exc:
            if "already exists" not in str(exc):  # another shard created it between check and create
                raise InfraError(f"results store unreachable: {exc}".splitlines()[0]) from exc
        self._tries: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        self.records: list[dict[str, Any]] = []
        with engine.connect() as conn:
            rows = conn.execute(select(attempts.c.record).where(attempts.c.run_id == run_id)
                                .order_by(attempts.c.task_id, attempts.c.attempt, attempts.c.try_index))
            for (blob,) in rows:
                self._remember(json.loads(blob))

    def _remember(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self._tries[(record["task_id"], record["attempt"])].append(record)

    def tries(self, task_id: str, attempt: int) -> int:
        return len(self._tries.get((task_id, attempt), ()))

    def is_final(self, task_id: str, attempt: int, max_error_retries: int) -> bool:
        tries = self._tries.get((task_id, attempt), [])  # a lookup adds no empty entry for final_records
        if not tries:
            return False
        return tries[-1]["outcome"] not in ERROR_VALUES or len(tries) > max_error_retries

    def append(self, result: EpisodeResult, cost_usd: float = 0.0) -> dict[str, Any]:
        record = result.to_dict() | {"try": self.tries(result.task_id, result.attempt), "cost_usd": cost_usd,
                                     "stage": self.stage}
        usage = result.usage
        row = {
            "run_id": self.run_id, "task_id": result.task_id, "attempt": result.attempt,
            "try_index": record["try"], "stage": self.stage, "domain": result.domain, "family": result.family,
            "outcome": result.outcome.value, "reward": result.reward,
            "prompt_tokens": sum(u.prompt_tokens for u in usage.values()),
            "completion_tokens": sum(u.completion_tokens for u in usage.values()),
            "cost_usd": cost_usd, "seconds": result.timings.get("total", 0.0),
            "task_hash": result.hashes["task"], "tools_hash": result.hashes["tools"],
            "grader_hash": result.hashes["grader"], "created_at": time.time(),
            "record": json.dumps(record, ensure_ascii=False, default=str),
        }
        dialect = self.engine.dialect.name
        statement = (pg_insert if dialect == "postgresql" else sqlite_insert)(attempts).values(**row)
        with self.engine.begin() as conn:
            conn.execute(statement.on_conflict_do_nothing())
        self._remember(record)
        return record

    def discard_from(self, first_attempt: int) -> int:
        """Delete this run's tries of attempts numbered `first_attempt` and above; return how many.

        For training, whose attempt numbers carry the step: a resumed run replays every step after
        its checkpoint, so the tries a killed process stored for those steps were never trained on
        and would otherwise sit beside their replays as second tries of the same attempt.
        """
        doomed = (attempts.c.run_id == self.run_id) & (attempts.c.attempt >= first_attempt)
        with self.engine.begin() as conn:
            removed = conn.execute(attempts.delete().where(doomed)).rowcount
        kept = [r for r in self.records if r["attempt"] < first_attempt]
        self.records, self._tries = [], defaultdict(list)
        for record in kept:
            self._remember(record)
        return removed

    def final_records(self) -> list[dict[str, Any]]:
        """The last try of every attempt, in task/attempt order."""
        return [tries[-1] for _, tries in sorted(self._tries.items())]

    def error_tries(self) -> int:
        return sum(1 for r in self.records if r["outcome"] in ERROR_VALUES)

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None, run_dir: Path, run_id: str, stage: str) -> ResultStore:
    """The run's store: `url` when given (PostgreSQL for many writers), else `<run_dir>/results.sqlite`."""
    if url:
        engine = create_engine(url, pool_pre_ping=True)
    else:
        engine = _sqlite_engine(run_dir / "results.sqlite")
    return ResultStore(engine, run_id, stage)


def read_records(source: str | Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored try from a run folder, a results.sqlite file or a database URL."""
    text = str(source)
    if "://" in text:
        engine = create_engine(text)
    else:
        path = Path(text)
        path = path / "results.sqlite" if path.is_dir() else path
        if not path.is_file():
            raise InfraError(f"no results store at {path}")
        engine = create_engine(f"sqlite:///{path}")
    try:
        query = select(attempts.c.record).order_by(attempts.c.run_id, attempts.c.task_id, attempts.c.attempt,
                                                   attempts.c.try_index)
        if run_id is not None:
            query = query.where(attempts.c.run_id == run_id)
        with engine.connect() as conn:
            return [json.loads(blob) for (blob,) in conn.execute(query)]
    finally:
        engine.dispose()
