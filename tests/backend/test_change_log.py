"""The terminal state read through the change log equals a full read, whatever wrote the rows; and every
episode engine of a backend shares one compiled-statement cache (tbx/backend/engines.py).

On SQLite and PostgreSQL (the `backend` fixture).
"""

from __future__ import annotations

import uuid

from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table, text

from tbx.backend import Backend, dump_state
from tbx.backend.state import changed_tables
from tbx.domains import get_domain
from tbx.tools.runtime import invoke

MOCK = get_domain("mock")

FAMILY = MetaData()
parents = Table("parents", FAMILY, Column("id", Integer, primary_key=True), Column("name", String(20)))
children = Table("children", FAMILY, Column("id", Integer, primary_key=True),
                 Column("parent_id", Integer, ForeignKey("parents.id", ondelete="CASCADE")),
                 Column("label", String(20)))
bystanders = Table("bystanders", FAMILY, Column("id", Integer, primary_key=True), Column("note", String(20)))
FAMILY_ROWS = {"parents": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
               "children": [{"id": 10, "parent_id": 1, "label": "x"}, {"id": 11, "parent_id": 2, "label": "y"}],
               "bystanders": [{"id": 1, "note": "n"}]}


def read_both(backend: Backend, db, metadata: MetaData, initial: dict) -> tuple[dict, dict, set | None]:
    reader = backend.open_reader(db)
    try:
        with reader.connect() as conn:
            logged = changed_tables(conn)
        return dump_state(reader, metadata, initial), dump_state(reader, metadata), logged
    finally:
        reader.dispose()


def test_a_fresh_clone_logs_nothing_and_reads_as_the_initial_state(backend):
    template = backend.ensure_template(f"pytest_{uuid.uuid4().hex[:12]}", MOCK.metadata, MOCK.base_rows())
    db = backend.clone(template)
    try:
        initial = dump_state(db.engine, MOCK.metadata)
        via_log, full, logged = read_both(backend, db, MOCK.metadata, initial)
        assert logged == set() and via_log == full == initial
        assert all(via_log[name] is initial[name] for name in initial)  # nothing read again
    finally:
        backend.drop(db)


def test_tool_writes_foreign_key_cascades_and_upserts_are_all_logged(backend):
    template = backend.ensure_template(f"pytest_{uuid.uuid4().hex[:12]}", FAMILY, FAMILY_ROWS)
    db = backend.clone(template)
    try:
        initial = dump_state(db.engine, FAMILY)
        with db.engine.begin() as conn:
            if db.engine.dialect.name == "sqlite":
                conn.execute(text("PRAGMA foreign_keys=ON"))
            conn.execute(parents.delete().where(parents.c.id == 1))  # children 10 goes by the cascade
        via_log, full, logged = read_both(backend, db, FAMILY, initial)
        assert logged == {"parents", "children"}  # the cascade's table too; the bystanders untouched
        assert via_log == full and via_log["bystanders"] is initial["bystanders"]
        assert [r["id"] for r in full["children"]["rows"]] == ["11"]
        with db.engine.begin() as conn:  # an upsert that updates, and a write rolled back
            if db.engine.dialect.name == "sqlite":
                conn.execute(text("INSERT INTO bystanders (id, note) VALUES (1, 'm') "
                                  "ON CONFLICT (id) DO UPDATE SET note = excluded.note"))
            else:
                conn.execute(text("INSERT INTO bystanders (id, note) VALUES (1, 'm') "
                                  "ON CONFLICT (id) DO UPDATE SET note = EXCLUDED.note"))
        with db.engine.connect() as conn:
            conn.execute(children.delete())
            conn.rollback()
        via_log, full, logged = read_both(backend, db, FAMILY, initial)
        assert logged == {"parents", "children", "bystanders"} and via_log == full
        assert full["bystanders"]["rows"] == [{"id": "1", "note": "m"}]
    finally:
        backend.drop(db)


def test_every_episode_engine_of_a_backend_shares_one_compiled_statement_cache(backend):
    template = backend.ensure_template(f"pytest_{uuid.uuid4().hex[:12]}", MOCK.metadata, MOCK.base_rows())
    sizes = []
    for _ in range(2):
        db = backend.clone(template)
        try:
            result = invoke(MOCK.tool("set_nickname"), db.engine, {"account_id": 2, "nickname": "savings"})
            assert not result.is_error
            sizes.append(len(backend.engines.cache))
        finally:
            backend.drop(db)
    assert sizes[0] > 0 and sizes[1] == sizes[0]  # the second episode compiled nothing new
