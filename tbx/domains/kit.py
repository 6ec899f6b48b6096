"""The domain kit: what every bundled domain's tools and task generators repeat, written once.

Tools: the checks of an agent's arguments (an amount of money, a date, a non-empty text), the
look-up of a row by key that fails with a message the agent reads, the insertion of a row under
the next free id. Tasks: the step and change records of a reference, private facts with their
keywords, fresh ids for a task's own rows, and the loop that turns a domain's families into task
mappings (bench and training). A domain keeps its own wording where its messages differ: the
messages are part of what the agent sees, so moving a domain onto the kit changes none of them.
No domain imports another; they all import this module.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select

from tbx.tools import ToolFailure

Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected (judge)
Row = dict[str, Any]
MONEY_DIGITS = 15  # amounts of 10**15 or more are refused: far above any real one, and Decimal-safe
CENT = Decimal("0.01")
EASY_TURN_LIMIT, TURN_LIMIT = 10, 30


# ---- schema --------------------------------------------------------------------------------------

def audit_log_table(metadata: MetaData, autoincrement: bool | str = True) -> Table:
    """The log every write tool appends an event to (volatile in every domain: no check reads it)."""
    return Table("audit_log", metadata,
                 Column("id", Integer, primary_key=True, autoincrement=autoincrement),
                 Column("event", String(200), nullable=False))


def identity_checks_table(metadata: MetaData, *people: Column, autoincrement: bool | str = "auto") -> Table:
    """The identity records (docs/tasks.md): one row per person the agent verified, `people` the
    columns naming them (a foreign key each)."""
    return Table("identity_checks", metadata, Column("id", Integer, primary_key=True, autoincrement=autoincrement),
                 *people)


def support_cases_table(metadata: MetaData, *links: Column, autoincrement: bool | str = "auto") -> Table:
    """The cases an agent logs where policy says no (or a verification fails): `links` name who and
    what the case is about; the category, status and summary are the same in every domain."""
    return Table("support_cases", metadata, Column("id", Integer, primary_key=True, autoincrement=autoincrement),
                 *links,
                 Column("category", String(40), nullable=False),
                 Column("status", String(10), nullable=False),  # open
                 Column("summary", String(400)))


# ---- tools ---------------------------------------------------------------------------------------

def parse_money(amount: float, name: str = "amount", allow_zero: bool = False, *,
                sign_message: str | None = None, cents_message: str | None = None,
                size_first: bool = False) -> Decimal:
    """`amount` as an exact Decimal of dollars and cents, or a ToolFailure the agent reads.

    `sign_message` and `cents_message` replace the default wording of a negative (or zero) amount
    and of one with more than two decimals; they are formatted with `name` and `amount`. With
    `size_first` a huge negative amount is refused as too large rather than as negative."""
    try:
        value = Decimal(str(amount))
    except InvalidOperation as exc:
        raise ToolFailure(f"{name} {amount!r} is not a number") from exc
    if size_first and value.is_finite() and value.adjusted() >= MONEY_DIGITS:
        raise ToolFailure(f"{name} {amount} is too large")
    if not value.is_finite() or value < 0 or (value == 0 and not allow_zero):
        default = f"{name} must be a number {'of at least' if allow_zero else 'greater than'} zero"
        raise ToolFailure(default if sign_message is None else sign_message.format(name=name, amount=amount))
    if value.adjusted() >= MONEY_DIGITS:  # quantize() below would raise on a huge value such as 1e308
        raise ToolFailure(f"{name} {amount} is too large")
    if value != value.quantize(CENT):
        default = f"{name} {amount} has more than two decimals; give dollars and cents"
        raise ToolFailure(default if cents_message is None else cents_message.format(name=name, amount=amount))
    return value


def parse_date(value: str, name: str) -> str:
    """`value` as an ISO date (YYYY-MM-DD), or a ToolFailure naming the argument."""
    try:
        return dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError as exc:
        raise ToolFailure(f"{name} {value!r} is not a date; give YYYY-MM-DD") from exc


def require_text(value: str, name: str) -> str:
    """`value` stripped, or a ToolFailure when nothing is left."""
    if not value.strip():
        raise ToolFailure(f"{name} must not be empty")
    return value.strip()


def without_updated_at(row: Mapping[str, Any]) -> dict:
    """A row as the agent sees it: `updated_at` is a bookkeeping marker, not data."""
    return {k: v for k, v in row.items() if k != "updated_at"}


def fetch_rows(db, query) -> list[dict]:
    """Every row of `query`, as plain dicts."""
    return [dict(r) for r in db.execute(query).mappings()]


def fetch_one(db, table, key: Any, label: str, column=None, quote: bool = False) -> dict:
    """The row of `table` whose `column` (the id by default) is `key`, without `updated_at`; a
    ToolFailure "`label` `key` not found" (the key quoted with `quote`) when there is none."""
    column = table.c.id if column is None else column
    row = db.execute(select(table).where(column == key)).mappings().first()
    if row is None:
        raise ToolFailure(f"{label} {key!r} not found" if quote else f"{label} {key} not found")
    return without_updated_at(row)


def next_id(db, table) -> int:
    return db.execute(select(func.coalesce(func.max(table.c.id), 0))).scalar_one() + 1


def add_row(db, table, **values: Any) -> int:
    """Insert a row under the next free id; returns the id."""
    new_id = next_id(db, table)
    db.execute(insert(table).values(id=new_id, **values))
    return new_id


def record_once(db, table, **values: Any) -> None:
    """A record a policy step leaves (a verification tool's `identity_checks` row), written by the tool
    that performs the step: a row of `values` unless one is already there. The checks of a task that
    verifies its caller require that row, so an agent that skips the step, or verifies someone else,
    fails on the terminal state alone; doing the step again adds nothing (no extra write)."""
    match = [table.c[column] == value for column, value in values.items()]
    if db.execute(select(table.c.id).where(*match)).first() is None:
        add_row(db, table, **values)


# ---- tasks ---------------------------------------------------------------------------------------

def call(tool: str, **arguments: Any) -> dict:
    """A reference step that calls `tool`."""
    return {"tool": tool, "arguments": arguments}


def insert_change(table: str, **values: Any) -> dict:
    return {"op": "insert", "table": table, "values": values}


def update_change(table: str, row_id: int, **values: Any) -> dict:
    return {"op": "update", "table": table, "key": {"id": row_id}, "values": values}


def private_facts(keywords: Mapping[str, list[str]], **values: Any) -> dict:
    """The user's private facts: each value with the keywords the scripted user knows it by."""
    return {name: {"value": value, "keywords": keywords[name]} for name, value in values.items()}


def ask_for(asks: Mapping[str, str], *names: str) -> dict:
    """A reference message asking for the facts `names` ("A, B and C")."""
    parts = [asks[n] for n in names]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return {"say": f"I can help with that. Could you please give me {listed}?"}


def plain(value: Any) -> Any:
    """Decimals as floats: task mappings hold only JSON types (they are also written to files)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def non_empty(rows: Mapping[str, list]) -> dict:
    """A task's seed rows without the tables it adds nothing to."""
    return {t: r for t, r in rows.items() if r}


class IdPool:
    """Fresh ids for one task's own rows, above the base-seed ranges."""

    def __init__(self, rng: random.Random):
        self.rng, self.taken = rng, set()

    def __call__(self, low: int, high: int) -> int:
        while True:
            value = self.rng.randrange(low, high)
            if value not in self.taken:
                self.taken.add(value)
                return value


def identity_records(reference: Sequence[dict], tool: str, person: str, people: Iterable[dict]) -> list[dict]:
    """The identity records the reference's verifications leave: an insert into `identity_checks`
    for each person whose ID (argument and column `person`) and date of birth, as passed to `tool`,
    match a row of `people`, which is what the tool checks; a failed verification leaves none."""
    births = {row["id"]: row["date_of_birth"] for row in people}
    verified = []
    for step in reference:
        arguments = step.get("arguments", {})
        if step.get("tool") == tool and births.get(arguments[person]) == arguments["date_of_birth"]:
            record = insert_change("identity_checks", **{person: arguments[person]})
            if record not in verified:
                verified.append(record)
    return verified


def task_record(domain: str, split: str, family: str, seed: int, index: int, built: Built,
                rows: dict, checks: dict, turn_limit: int, **more: Any) -> dict:
    """One task mapping (the task format of docs/tasks.md) from a family's built record."""
    return {
        "id": f"{domain}/{family}/s{seed}-{index:02d}", "domain": domain, "split": split, "family": family,
        "user": {"persona": built["persona"], "instructions": built["instructions"],
                 "private_facts": built["facts"], "opening_message": built["opening"]},
        "seed": {"rows": rows},
        "reference": built["reference"],
        "checks": checks,
        "turn_limit": turn_limit,
        **more,
    }


def bench_tasks(domain: str, families: Mapping[str, Callable[..., Built]], seed: int, instances: int,
                used: set[str], seed_rows: Callable[[dict], dict] = non_empty) -> list[dict]:
    """All tasks of a benchmark domain for `seed` (same seed -> same tasks): `instances` of every
    family, each built as `build(rng, used, index, family)`; `used` holds the codes already taken
    (booking, order, policy numbers), which the builders extend; `seed_rows` turns a built
    record's rows into the task's seed rows."""
    rng = random.Random(seed)
    tasks = []
    for family, build in families.items():
        for index in range(instances):
            built = build(rng, used, index, family)
            checks = {"expected": built["expected"], **({"judge": built["judge"]} if built.get("judge") else {})}
            tasks.append(task_record(domain, "bench", family, seed, index, built, seed_rows(built["rows"]),
                                     checks, TURN_LIMIT))
    return tasks


def training_tasks(domain: str, families: Mapping[str, Callable[[random.Random, int], Built]], seed: int,
                   instances: tuple[int, int], easy_tools: Sequence[str]) -> list[dict]:
    """All tasks of a training domain for `seed` (same seed -> same tasks); `instances` = (easy,
    other) per family. Easy families get more instances, a short turn limit and their own short
    tool list (so small models see few tools)."""
    rng = random.Random(seed)
    tasks = []
    for family, build in families.items():
        easy = family.endswith("_easy")
        for index in range(instances[0] if easy else instances[1]):
            built = build(rng, index)
            tasks.append(task_record(domain, "train", family, seed, index, built, non_empty(built["rows"]),
                                     {"expected": built["expected"]}, EASY_TURN_LIMIT if easy else TURN_LIMIT,
                                     **({"tools": list(easy_tools)} if easy else {})))
    return tasks
