"""Canonical database state: every table's rows ordered by primary key, values normalised.

Normalisation makes equal things equal across backends and types: 25, 25.0 and Decimal('25.00')
all become "25"; booleans become "1"/"0" like the integers; dates and times become ISO strings. The state is plain
JSON, so it is stored with each episode and graded again later without the database.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from json.encoder import encode_basestring_ascii
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, select
from sqlalchemy.exc import DBAPIError

# {table: {"pk": [column, ...], "rows": [{column: value}, ...]}}
State = dict[str, dict[str, Any]]


def canonical(value: Any) -> Any:
    """The normal form of one stored value."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"  # the same form as the integers 1 and 0
    if isinstance(value, int | float | Decimal):
        try:
            number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        except InvalidOperation:
            return str(value)
        if not number.is_finite():
            return str(number)
        text = format(number.normalize(), "f")
        return "0" if text in ("-0", "0.0") else text
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def canonical_equal(left: Any, right: Any) -> bool:
    return canonical(left) == canonical(right)


def row_key(row: dict[str, Any], pk: list[str]) -> str:
    """The row's primary key as JSON text. Canonical values are text or None: those are written here
    exactly as `json.dumps` writes them (it was a tenth of an oracle episode's grading)."""
    values = [row[c] for c in pk]
    if all(v is None or type(v) is str for v in values):
        return "[" + ", ".join("null" if v is None else encode_basestring_ascii(v) for v in values) + "]"
    return json.dumps(values, default=str)


@dataclass(frozen=True)
class _TableRead:
    name: str
    pk: list[str]
    columns: tuple[str, ...]
    sql: str  # SELECT of every column ordered by primary key, compiled once for the dialect
    processors: tuple[Callable[[Any], Any] | None, ...]  # the column types' own result conversion


_PLANS: dict[tuple[int, str], tuple[_TableRead, ...]] = {}


def _read_plan(metadata: MetaData, dialect: Any) -> tuple[_TableRead, ...]:
    """How to read each table, compiled once per schema and dialect: an episode's grader opens a
    fresh engine, and compiling the statements anew each time was most of the grading cost."""
    key = (id(metadata), dialect.name)
    if key not in _PLANS:
        plan = []
        for table in metadata.sorted_tables:
            pk = [c.name for c in table.primary_key.columns] or [c.name for c in table.columns]
            statement = select(table).order_by(*[table.c[name] for name in pk])
            sql = str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
            # SQLite hands back strings and floats that the column types convert (datetimes,
            # scaled decimals); PostgreSQL's driver already returns Python types.
            processors = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None)
                               if dialect.name == "sqlite" else None for c in table.columns)
            plan.append(_TableRead(table.name, pk, tuple(c.name for c in table.columns), sql, processors))
        _PLANS[key] = tuple(plan)
    return _PLANS[key]


def dump_state(engine: Engine, metadata: MetaData, initial: State | None = None) -> State:
    """Read every table of `metadata` through `engine` into canonical form. With `initial` (the state the
    database was cloned in), only the tables its change log names are read; the others are `initial`'s."""
    state: State = {}
    with engine.connect() as conn:
        changed = None if initial is None else changed_tables(conn)
        for read in _read_plan(metadata, engine.dialect):
            if changed is not None and read.name not in changed and read.name in initial:
                state[read.name] = initial[read.name]
                continue
            rows = []
            for raw in conn.exec_driver_sql(read.sql):
                values = (v if p is None or v is None else p(v) for v, p in zip(raw, read.processors, strict=True))
                rows.append({c: canonical(v) for c, v in zip(read.columns, values, strict=True)})
            state[read.name] = {"pk": list(read.pk), "rows": rows}
    return state


# The change log: which tables a database's writes touched, recorded by the database itself (triggers
# installed in every template), so the grader reads only those tables of an episode's terminal state.
# It sees every row write whatever its path (tool statements, foreign-key actions, REPLACE, upserts);
# a write that changes nothing may mark its table, which only costs a read.
CHANGE_LOG = "tbx_changed"


def install_change_log(engine: Engine, metadata: MetaData) -> None:
    """Create the change-log table and a trigger on every table of `metadata` (after the seed rows)."""
    quote = engine.dialect.identifier_preparer.quote_identifier
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"CREATE TABLE {CHANGE_LOG} (name text PRIMARY KEY)")
            conn.exec_driver_sql(f"CREATE FUNCTION {CHANGE_LOG}_mark() RETURNS trigger LANGUAGE plpgsql AS $$ "
                                 f"BEGIN INSERT INTO {CHANGE_LOG} VALUES (TG_TABLE_NAME) ON CONFLICT DO NOTHING; "
                                 "RETURN NULL; END $$")
            for table in metadata.sorted_tables:
                conn.exec_driver_sql(f"CREATE TRIGGER {quote(CHANGE_LOG + '_' + table.name)} AFTER INSERT OR UPDATE "
                                     f"OR DELETE OR TRUNCATE ON {quote(table.name)} FOR EACH STATEMENT "
                                     f"EXECUTE PROCEDURE {CHANGE_LOG}_mark()")
            return
        conn.exec_driver_sql(f"CREATE TABLE {CHANGE_LOG} (name TEXT PRIMARY KEY)")
        for table in metadata.sorted_tables:
            literal = "'" + table.name.replace("'", "''") + "'"
            for event in ("INSERT", "UPDATE", "DELETE"):
                name = quote(f"{CHANGE_LOG}_{event.lower()}_{table.name}")
                conn.exec_driver_sql(f"CREATE TRIGGER {name} AFTER {event} ON {quote(table.name)} FOR EACH ROW "
                                     f"BEGIN INSERT OR IGNORE INTO {CHANGE_LOG} VALUES ({literal}); END")


def changed_tables(conn: Connection) -> set[str] | None:
    """The tables the change log names (None: the database has no change log; read them all)."""
    try:
        return {name for (name,) in conn.exec_driver_sql(f"SELECT name FROM {CHANGE_LOG}")}
    except DBAPIError:
        conn.rollback()  # PostgreSQL refuses every later statement of a failed transaction
        return None


def state_hash(state: State) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def state_delta(initial: State, final: State) -> State:
    """The tables of `final` that differ from `initial`: with `initial`, it rebuilds `final`."""
    return {name: table for name, table in final.items() if initial.get(name) is not table and initial.get(name) != table}


def apply_delta(initial: State, delta: State) -> State:
    return {**initial, **delta}
