"""Records a policy step leaves in a domain's database, written by the tool that performs the step.

A verification tool that succeeds writes an identity record (`identity_checks`): the checks of a
task that verifies its caller require that row, so an agent that skips the step, or verifies
someone else, fails on the terminal state alone. One row per subject: doing the step again adds
nothing, so a careful agent that verifies twice is not an extra write.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, func, insert, select


def record_once(db: Any, table: Table, **values: Any) -> None:
    """Insert a row of `values` into `table` unless one is already there (ids: max + 1, as every
    backend numbers them the same way)."""
    match = [table.c[column] == value for column, value in values.items()]
    if db.execute(select(table.c.id).where(*match)).first() is not None:
        return
    new_id = db.execute(select(func.coalesce(func.max(table.c.id), 0))).scalar_one() + 1
    db.execute(insert(table).values(id=new_id, **values))
