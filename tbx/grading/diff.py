"""Row-level diff of two canonical states (pure).

Rows are matched by primary key. Volatile tables ("audit_log") are skipped; volatile columns
("bookings.updated_at") are dropped before comparing, so bookkeeping noise is never a change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tbx.backend.state import State, row_key


@dataclass(frozen=True)
class RowChange:
    op: Literal["insert", "update", "delete"]
    table: str
    key: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    columns: tuple[str, ...]  # columns whose value changed (all columns for insert/delete)

    def describe(self) -> str:
        if self.op == "update":
            parts = ", ".join(f"{c}: {self.before[c]!r} -> {self.after[c]!r}" for c in self.columns)
            return f"update {self.table} {self.key}: {parts}"
        row = self.after if self.op == "insert" else self.before
        return f"{self.op} {self.table} {self.key}: {row}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "table": self.table, "key": self.key, "before": self.before,
                "after": self.after, "columns": list(self.columns)}


def split_volatile(volatile: Iterable[str]) -> tuple[set[str], dict[str, set[str]]]:
    tables: set[str] = set()
    columns: dict[str, set[str]] = {}
    for item in volatile:
        table, _, column = item.partition(".")
        if column:
            columns.setdefault(table, set()).add(column)
        else:
            tables.add(table)
    return tables, columns


def diff_states(initial: State, final: State, volatile: Iterable[str] = ()) -> tuple[RowChange, ...]:
    skip_tables, skip_columns = split_volatile(volatile)
    changes: list[RowChange] = []
    for table in sorted(set(initial) | set(final)):
        if table in skip_tables:
            continue
        before_t = initial.get(table, {"pk": final.get(table, {}).get("pk", []), "rows": []})
        after_t = final.get(table, {"pk": before_t["pk"], "rows": []})
        if after_t is before_t:  # a table the terminal state took over unread: unchanged
            continue
        pk = after_t["pk"] or before_t["pk"]
        ignored = skip_columns.get(table, set())
        before = {row_key(r, pk): r for r in before_t["rows"]}
        after = {row_key(r, pk): r for r in after_t["rows"]}
        for key in sorted(set(before) | set(after)):
            old, new = before.get(key), after.get(key)
            row = new if new is not None else old
            key_values = {c: row[c] for c in pk}
            if old is None:
                cols = tuple(c for c in new if c not in ignored)
                changes.append(RowChange("insert", table, key_values, None, new, cols))
            elif new is None:
                cols = tuple(c for c in old if c not in ignored)
                changes.append(RowChange("delete", table, key_values, old, None, cols))
            else:
                cols = tuple(c for c in new if c not in ignored and old.get(c) != new.get(c))
                if cols:
                    changes.append(RowChange("update", table, key_values, old, new, cols))
    return tuple(changes)


def same_changes(initial: State, one: State, other: State) -> bool:
    """Whether two terminal states make exactly the same changes to `initial`, volatile tables and
    columns included. A mutation of a reference that leaves the reference's own changes is
    equivalent, not a fault: no check on the database can tell the two apart (dropping a
    verification that failed by design, which writes nothing). Volatile changes count here: a
    write the task ignores is a fault its checks miss, not an equivalent."""
    return diff_states(initial, one) == diff_states(initial, other)
