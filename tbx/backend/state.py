"""Canonical database state: every table's rows ordered by primary key, values normalised.

Normalisation makes equal things equal across backends and types: 25, 25.0 and Decimal('25.00')
all become "25"; booleans become "1"/"0" like the integers; dates and times become ISO strings. The state is plain
JSON, so it is stored with each episode and graded again later without the database.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Engine, MetaData, select

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
    return json.dumps([row[c] for c in pk], default=str)


def dump_state(engine: Engine, metadata: MetaData) -> State:
    """Read every table of `metadata` through `engine` into canonical form."""
    state: State = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            pk = [c.name for c in table.primary_key.columns] or [c.name for c in table.columns]
            rows = conn.execute(select(table).order_by(*[table.c[name] for name in pk])).mappings()
            state[table.name] = {"pk": pk, "rows": [{k: canonical(v) for k, v in r.items()} for r in rows]}
    return state


def state_hash(state: State) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def state_delta(initial: State, final: State) -> State:
    """The tables of `final` that differ from `initial`: with `initial`, it rebuilds `final`."""
    return {name: table for name, table in final.items() if initial.get(name) != table}


def apply_delta(initial: State, delta: State) -> State:
    return {**initial, **delta}
