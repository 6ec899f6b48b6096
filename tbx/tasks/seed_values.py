"""Seed values checked against the column types of the domain's schema, before any database is built.

A value the backend cannot store (a mapping or a list in a column, an integer past 64 bits, a number
with more digits than its NUMERIC column keeps, a string longer than its VARCHAR) would otherwise
fail inside the template build, far from the task file, and read as a failure of the database. Each
is one `TaskFormatError` naming the file, the field (`seed.rows.TABLE[i].COLUMN`) and the fix. Only
what a backend would refuse is refused: a number written as a string ("5") is left to the database, which
converts it, as before; text that is no number is refused in a numeric column (PostgreSQL refuses it; SQLite
would keep it, and grading would compare text with numbers).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.types import JSON, Float, Integer, Numeric, String

from tbx.errors import TaskFormatError

INT64 = (-(2**63), 2**63 - 1)


def _problem(column: Column, value: Any) -> tuple[str, str] | None:
    """(what is wrong, the fix) when `column` cannot hold `value`; None when it can."""
    kind = column.type
    if isinstance(value, dict | list) and not isinstance(kind, JSON):
        shape = "mapping" if isinstance(value, dict) else "list"
        return (f"is a {shape}, but column {column.name} holds one {kind} value",
                f"give one value (a number or a string), not a {shape}")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        return (f"is {value}, past the 64-bit integers a database stores", f"give a value in {INT64[0]}..{INT64[1]}")
    if number and isinstance(kind, Numeric) and not isinstance(kind, Float | Integer) and kind.precision and \
            abs(value) >= 10 ** (kind.precision - (kind.scale or 0)):
        return (f"is {value}, more digits than column {column.name} ({kind}) keeps",
                f"give a value below {10 ** (kind.precision - (kind.scale or 0))} in magnitude")
    if isinstance(value, str) and isinstance(kind, Integer | Numeric) and not _numeric(value, kind):
        return (f"is {value[:40]!r}, not a number, but column {column.name} holds {kind} values",
                f"give a number (an {'integer' if isinstance(kind, Integer) else 'amount'}), unquoted")
    if isinstance(value, str) and isinstance(kind, String) and kind.length and len(value) > kind.length:
        return (f"is {len(value)} characters, longer than column {column.name} ({kind}) holds",
                f"shorten it to at most {kind.length} characters")
    return None


def _numeric(text: str, kind: Integer | Numeric) -> bool:
    """Whether the string `text` is a value of a numeric column (SQLite would keep any text there; PostgreSQL
    refuses what is not a number)."""
    try:
        number = int(text) if isinstance(kind, Integer) else float(text)
    except ValueError:
        return False
    return number == number  # not nan


def check_seed_values(source: str, table: Table, rows: tuple[dict[str, Any], ...]) -> None:
    """Raise a TaskFormatError for the first seed value of `rows` that its column in `table` cannot hold
    (columns the table lacks are named by the caller's own check)."""
    for i, row in enumerate(rows):
        for name, value in row.items():
            column = table.columns.get(name)
            found = _problem(column, value) if column is not None and value is not None else None
            if found:
                raise TaskFormatError(source, f"seed.rows.{table.name}[{i}].{name}", *found)
