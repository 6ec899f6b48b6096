"""Both backends keep the same promises: templates built once, clones isolated, state canonical.

Every test runs on SQLite and on PostgreSQL (the `backend` fixture); the PostgreSQL runs are
marked `integration` and skip with a reason when no server can start.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Boolean, Column, Date, DateTime, Float, Integer, MetaData, Numeric, String, Table

from tbx.backend import Backend, EpisodeDatabase, dump_state
from tbx.backend.postgres import BUILD_PREFIX, PostgresBackend, template_name
from tbx.backend.sqlite import SQLiteBackend
from tbx.domains import get_domain
from tbx.domains.mock.schema import accounts
from tbx.errors import ConfigError
from tbx.tools import ToolFailure, ToolSpec
from tbx.tools.runtime import invoke

MOCK = get_domain("mock")

# The mock seed (tbx/domains/mock/seed.py) in canonical form: numbers become normalised text.
BASE_ACCOUNTS = [
    {"id": "1", "owner": "Ada", "nickname": None, "balance": "100", "frozen": "0", "updated_at": None},
    {"id": "2", "owner": "Bob", "nickname": None, "balance": "50", "frozen": "0", "updated_at": None},
    {"id": "3", "owner": "Cy", "nickname": None, "balance": "10", "frozen": "1", "updated_at": None},
]
BASE_STATE = {
    "accounts": {"pk": ["id"], "rows": BASE_ACCOUNTS},
    "transfers": {"pk": ["id"], "rows": []},
    "audit_log": {"pk": ["id"], "rows": []},
}


def new_key() -> str:
    return f"pytest_{uuid.uuid4().hex[:12]}"


def mock_template(backend: Backend) -> str:
    return backend.ensure_template(new_key(), MOCK.metadata, MOCK.base_rows())


def state_of(db: EpisodeDatabase) -> dict:
    return dump_state(db.engine, MOCK.metadata)


def fresh_state(backend: Backend, template: str) -> dict:
    """What the template holds, read through a new clone (PostgreSQL templates refuse connections)."""
    db = backend.clone(template)
    try:
        return state_of(db)
    finally:
        backend.drop(db)


def transfer(db: EpisodeDatabase, source: int, target: int, amount: float, memo: str = "t"):
    arguments = {"from_account": source, "to_account": target, "amount": amount, "memo": memo}
    return invoke(MOCK.tool("transfer"), db.engine, arguments)


def twin(backend: Backend) -> Backend:
    """A second backend on the same store, as another worker process would have."""
    if isinstance(backend, PostgresBackend):
        return PostgresBackend(backend.url.render_as_string(hide_password=False))
    assert isinstance(backend, SQLiteBackend)
    return SQLiteBackend(str(backend.root))


def database_exists(backend: Backend, db: EpisodeDatabase) -> bool:
    if isinstance(backend, PostgresBackend):
        return bool(backend._admin("SELECT 1 FROM pg_database WHERE datname = :n", n=db.name))
    return Path(db.url.removeprefix("sqlite:///")).exists()


def test_template_build_is_idempotent(backend: Backend):
    key = new_key()
    first = backend.ensure_template(key, MOCK.metadata, MOCK.base_rows())
    # Same key, different rows: the existing template is reused, not rebuilt.
    other_rows = {"accounts": [dict(row, balance=999) for row in MOCK.base_rows()["accounts"]]}
    second = backend.ensure_template(key, MOCK.metadata, other_rows)
    assert second == first
    assert fresh_state(backend, first) == BASE_STATE


def test_racing_builders_agree_on_one_template(backend: Backend):
    other = twin(backend)
    key, barrier, handles, errors = new_key(), threading.Barrier(2), [], []

    def build(target: Backend) -> None:
        barrier.wait()
        try:
            handles.append(target.ensure_template(key, MOCK.metadata, MOCK.base_rows()))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(b,)) for b in (backend, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == []
        assert len(handles) == 2 and handles[0] == handles[1]
        assert fresh_state(backend, handles[0]) == BASE_STATE
    finally:
        other.close()  # after our own clones: SQLite backends of one process share an episode folder


def test_clone_has_the_template_content(backend: Backend):
    db = backend.clone(mock_template(backend))
    try:
        assert state_of(db) == BASE_STATE
    finally:
        backend.drop(db)


def test_writes_stay_in_their_own_clone(backend: Backend):
    template = mock_template(backend)
    first, second = backend.clone(template), backend.clone(template)
    try:
        assert first.name != second.name
        result = transfer(first, 1, 2, 30)
        assert not result.is_error, result.text
        balances = [row["balance"] for row in state_of(first)["accounts"]["rows"]]
        assert balances == ["70", "80", "10"]  # 100-30, 50+30, untouched
        assert state_of(second) == BASE_STATE
        assert fresh_state(backend, template) == BASE_STATE
    finally:
        backend.drop(first)
        backend.drop(second)


def test_concurrent_episodes_never_see_each_other(backend: Backend):
    template = mock_template(backend)
    episodes = [backend.clone(template), backend.clone(template)]
    plans = [(1, 2, 1.0), (2, 1, 2.0)]  # episode 0 sends 1 from 1 to 2; episode 1 sends 2 from 2 to 1
    barrier, failures = threading.Barrier(2), []

    def play(db: EpisodeDatabase, plan: tuple[int, int, float]) -> None:
        barrier.wait()
        for step in range(5):
            result = transfer(db, *plan, memo=f"{db.name}-{step}")
            if result.is_error:
                failures.append(result.text)

    threads = [threading.Thread(target=play, args=pair) for pair in zip(episodes, plans, strict=True)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []
        for db, (source, target, amount) in zip(episodes, plans, strict=True):
            state = state_of(db)
            rows = state["transfers"]["rows"]
            assert [r["memo"] for r in rows] == [f"{db.name}-{step}" for step in range(5)]
            assert {(r["from_account"], r["to_account"], r["amount"]) for r in rows} == {
                (str(source), str(target), str(int(amount)))}
            assert len(state["audit_log"]["rows"]) == 5
        balances = [[r["balance"] for r in state_of(db)["accounts"]["rows"]] for db in episodes]
        assert balances == [["95", "55", "10"], ["110", "40", "10"]]  # 100-5*1, 50+5*1 / 100+5*2, 50-5*2
        assert fresh_state(backend, template) == BASE_STATE
    finally:
        for db in episodes:
            backend.drop(db)


def test_reader_sees_committed_writes(backend: Backend):
    db = backend.clone(mock_template(backend))
    reader = backend.open_reader(db)
    try:
        assert not invoke(MOCK.tool("set_nickname"), db.engine, {"account_id": 2, "nickname": "savings"}).is_error
        state = dump_state(reader, MOCK.metadata)
        assert [row["nickname"] for row in state["accounts"]["rows"]] == [None, "savings", None]
    finally:
        reader.dispose()
        backend.drop(db)


def test_drop_removes_the_database(backend: Backend):
    db = backend.clone(mock_template(backend))
    assert database_exists(backend, db)
    backend.drop(db)
    assert not database_exists(backend, db)


def test_close_drops_leftover_episodes(backend: Backend):
    other = twin(backend)
    db = other.clone(mock_template(other))
    assert database_exists(backend, db)
    other.close()
    assert not database_exists(backend, db)


VALUES = MetaData()
Table(
    "samples", VALUES,
    Column("id", Integer, primary_key=True),
    Column("price", Numeric(12, 2)),
    Column("ratio", Float),
    Column("flag", Boolean),
    Column("day", Date),
    Column("at", DateTime),
    Column("label", String(20)),
)
SAMPLE_ROWS = {"samples": [
    {"id": 1, "price": 25, "ratio": 25.0, "flag": True, "day": dt.date(2024, 2, 29),
     "at": dt.datetime(2024, 2, 29, 13, 5, 0), "label": "a"},
    {"id": 2, "price": Decimal("25.50"), "ratio": 0.1, "flag": False, "day": None, "at": None, "label": None},
    {"id": 3, "price": Decimal("0.10"), "ratio": -0.0, "flag": None, "day": None, "at": None, "label": ""},
]}
# By hand: Numeric(12,2) 25 comes back as 25 (SQLite) or Decimal('25.00') (PostgreSQL) -> "25";
# 25.50 -> "25.5"; 0.10 -> "0.1"; float 25.0 -> "25", -0.0 -> "0"; booleans -> "1"/"0" like integers; dates -> ISO.
SAMPLE_STATE = {"samples": {"pk": ["id"], "rows": [
    {"id": "1", "price": "25", "ratio": "25", "flag": "1", "day": "2024-02-29", "at": "2024-02-29T13:05:00",
     "label": "a"},
    {"id": "2", "price": "25.5", "ratio": "0.1", "flag": "0", "day": None, "at": None, "label": None},
    {"id": "3", "price": "0.1", "ratio": "0", "flag": None, "day": None, "at": None, "label": ""},
]}}


@pytest.mark.filterwarnings("ignore:Dialect sqlite\\+pysqlite does \\*not\\* support Decimal")
def test_canonical_state_is_the_same_on_both_backends(backend: Backend):
    db = backend.clone(backend.ensure_template(new_key(), VALUES, SAMPLE_ROWS))
    try:
        assert dump_state(db.engine, VALUES) == SAMPLE_STATE
    finally:
        backend.drop(db)


def _write_then_fail(db, account_id: int) -> str:
    """Change a balance, then refuse: the change must not survive."""
    db.execute(accounts.update().where(accounts.c.id == account_id).values(balance=0))
    raise ToolFailure("refused after writing")


def _write_then_break_a_foreign_key(db, account_id: int) -> str:
    """Change a balance, then point a transfer at an account that does not exist."""
    db.execute(accounts.update().where(accounts.c.id == account_id).values(balance=0))
    transfer_row = {"from_account": account_id, "to_account": 404, "amount": 1}
    db.execute(MOCK.metadata.tables["transfers"].insert().values(**transfer_row))
    return "unreachable"


def test_invoke_commits_on_success(backend: Backend):
    db = backend.clone(mock_template(backend))
    try:
        result = transfer(db, 1, 2, 20)
        assert not result.is_error, result.text
        state = state_of(backend_reader_db(backend, db))
        assert [row["balance"] for row in state["accounts"]["rows"]] == ["80", "70", "10"]
        assert [(r["from_account"], r["to_account"], r["amount"]) for r in state["transfers"]["rows"]] == [
            ("1", "2", "20")]
    finally:
        backend.drop(db)


@pytest.mark.parametrize("spec", [
    MOCK.tool("transfer"),
    ToolSpec("write_then_fail", "write", _write_then_fail, ()),
    ToolSpec("write_then_break_a_foreign_key", "write", _write_then_break_a_foreign_key, ()),
], ids=["frozen-account", "tool-failure-after-write", "foreign-key-after-write"])
def test_failed_tool_call_leaves_nothing_behind(backend: Backend, spec: ToolSpec):
    db = backend.clone(mock_template(backend))
    arguments = {"from_account": 3, "to_account": 1, "amount": 5} if spec.name == "transfer" else {"account_id": 1}
    try:
        result = invoke(spec, db.engine, arguments)
        assert result.is_error
        assert result.text.startswith("Error: ")
        assert state_of(backend_reader_db(backend, db)) == BASE_STATE
    finally:
        backend.drop(db)


def backend_reader_db(backend: Backend, db: EpisodeDatabase) -> EpisodeDatabase:
    """The same database seen through the grader's own engine (a separate connection)."""
    return EpisodeDatabase(url=db.url, engine=backend.open_reader(db), name=db.name)


@pytest.mark.integration
def test_postgres_builder_that_loses_the_race_leaves_nothing(pg_url: str):
    winner, loser = PostgresBackend(pg_url), PostgresBackend(pg_url)
    try:
        name = winner.ensure_template(new_key(), MOCK.metadata, MOCK.base_rows())
        loser._build(name, MOCK.metadata, MOCK.base_rows())  # as if it had checked before the winner renamed
        leftovers = winner._admin("SELECT datname FROM pg_database WHERE datname LIKE :p", p=BUILD_PREFIX + "%")
        assert leftovers == []
        assert fresh_state(winner, name) == BASE_STATE
    finally:
        winner.close()
        loser.close()


def test_template_names_fit_postgres_identifiers():
    assert template_name("mock_3f2a") == "tbx_tpl_mock_3f2a"
    long_or_odd = template_name("Mock/Task: 1 " + "x" * 80)
    assert long_or_odd.startswith("tbx_tpl_") and len(long_or_odd) <= 63 and long_or_odd.isascii()
    assert template_name("a-b") != template_name("a_b")


def test_postgres_unreachable_is_named_at_start():
    """The server is reached when the backend is made (to remove leftovers of dead runs): an unreachable
    one is the user's to fix, named before anything runs."""
    with pytest.raises(ConfigError, match="field 'backend.url': PostgreSQL at 127.0.0.1:1 is unreachable"):
        PostgresBackend("postgresql+psycopg://postgres@127.0.0.1:1/postgres")


def test_postgres_backend_refuses_other_urls():
    with pytest.raises(ConfigError, match="backend.url"):
        PostgresBackend("sqlite:///x.db")


def test_insert_without_id_after_seeding_does_not_collide(backend: Backend):
    # seed rows carry explicit ids; a tool inserting without one must get the next free id
    from sqlalchemy import insert, select

    from tbx.domains.mock.schema import transfers

    rows = {"accounts": MOCK.base_rows()["accounts"],
            "transfers": [{"id": 7, "from_account": 1, "to_account": 2, "amount": 1, "memo": "seed"}]}
    db = backend.clone(backend.ensure_template(new_key(), MOCK.metadata, rows))
    try:
        with db.engine.begin() as conn:
            conn.execute(insert(transfers).values(from_account=2, to_account=1, amount=3))
            ids = sorted(conn.execute(select(transfers.c.id)).scalars())
        assert ids == [7, 8]
    finally:
        backend.drop(db)
