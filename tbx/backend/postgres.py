"""PostgreSQL: a template database per task, `CREATE DATABASE ... TEMPLATE` per episode.

The server copies the template's files (mostly catalogs), so a clone costs about as much as
creating an empty database instead of rebuilding schema and rows: about the price of one or two
connections, so there is no pool of pre-made clones (figures: docs/benchmarks.md, "Measurements
behind design choices"). Two rules of the server shape this module:

- `CREATE DATABASE` cannot run in a transaction: admin statements go through an AUTOCOMMIT
  engine connected to the URL's own database (usually `postgres`), never to a template.
- A template must have no other session while it is copied, or the server refuses
  ("source database is being accessed by other users"). Templates are filled under a temporary
  name through a `NullPool` engine that is disposed before the database is renamed into place,
  and a finished template refuses connections (`ALLOW_CONNECTIONS false`): to read a task's
  initial state, dump a fresh clone.

Building races between processes are settled by the rename: the loser's `ALTER DATABASE ...
RENAME` fails because the name is taken, and it drops its own copy. An episode's tool calls share
one connection, opened at its first call and closed when the episode database is dropped (a reconnect
per call would add a connection's cost to every call); the grader's reader connects on its own. Every
engine shares one dialect and compiled-statement cache (`tbx.backend.engines`).

Episode and build databases carry their owner process in their names (`tbx.process.owner`); a new backend
connects at once (an unreachable `backend.url` is a `ConfigError`, one line) and drops the ones of
processes on this host that are gone, so killed runs leave no databases behind. Every connection
has a connect timeout and `statement_timeout`, so a hung query ends on the server's side too.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import URL, Engine, MetaData, create_engine, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, ProgrammingError
from sqlalchemy.pool import NullPool, StaticPool

from tbx.backend.base import Backend, EpisodeDatabase, fill
from tbx.backend.engines import EngineMaker
from tbx.errors import ConfigError, InfraError
from tbx.process.owner import Owner, this_process

TEMPLATE_PREFIX = "tbx_tpl_"
EPISODE_PREFIX = "tbx_ep_"
BUILD_PREFIX = "tbx_tmp_"
CONNECT_TIMEOUT_S = 10  # a server that does not answer is reported, not waited for
_PLAIN_KEY = re.compile(r"[a-z0-9_]{1,40}")  # fits in PostgreSQL's 63-byte identifiers with the prefix


def template_name(key: str) -> str:
    """The database name for template `key`: the key itself when it is a short plain identifier,
    otherwise a hash of it (keys are free text; database names are limited to 63 bytes)."""
    if _PLAIN_KEY.fullmatch(key):
        return TEMPLATE_PREFIX + key
    return TEMPLATE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


class PostgresBackend(Backend):
    """Templates and episode databases on one PostgreSQL server.

    `url` is an admin URL (`postgresql+psycopg://USER@HOST:PORT/postgres`): the user needs the
    CREATEDB privilege, and the URL's database is only used to issue CREATE/DROP DATABASE.
    """

    kind = "postgres"

    def __init__(self, url: str, statement_timeout_s: float | None = None):
        try:
            self.url: URL = make_url(url)
        except ArgumentError:
            raise ConfigError("conf/backend/postgres.yaml", "backend.url", f"{url!r} is not a database URL",
                              "use a URL like postgresql+psycopg://USER@HOST:PORT/postgres") from None
        if not self.url.drivername.startswith("postgresql"):
            raise ConfigError("conf/backend/postgres.yaml", "backend.url", f"has driver {self.url.drivername!r}",
                              "use a URL like postgresql+psycopg://USER@HOST:PORT/postgres")
        limit_ms = int((statement_timeout_s or 0) * 1000)  # 0: no limit
        self._connect_args = {"connect_timeout": CONNECT_TIMEOUT_S, "options": f"-c statement_timeout={limit_ms}"}
        self.admin = create_engine(self.url, isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=4,
                                   connect_args=self._connect_args)
        self._quote = self.admin.dialect.identifier_preparer.quote_identifier
        self._build_lock = threading.Lock()  # one template build at a time in this process
        self._clone_lock = threading.Lock()  # clones of one server, one at a time (see clone)
        self._live: set[str] = set()  # episode databases made here and not dropped yet
        try:
            self.swept = self.sweep_stale()
        except InfraError as exc:
            raise ConfigError("conf/backend/postgres.yaml", "backend.url", str(exc),
                              "start the server (scripts/pg_local.sh start) or fix backend.url") from None
        # one dialect (initialised once) and compiled-statement cache for every episode's engines
        self.engines = EngineMaker(create_engine(self.url, poolclass=NullPool, connect_args=self._connect_args))

    def sweep_stale(self) -> int:
        """Drop episode and build databases whose owner process (on this host) is gone; return how many."""
        rows = self._admin("SELECT datname FROM pg_database WHERE datname LIKE :ep OR datname LIKE :tmp",
                           ep=EPISODE_PREFIX + "%", tmp=BUILD_PREFIX + "%")
        stale = [name for (name,) in rows if (owner := Owner.parse(name)) is not None and owner.gone()]
        for name in stale:
            self._drop_database(name)
        return len(stale)

    # -- admin statements -------------------------------------------------------------------

    def _admin(self, statement: str, **params: Any) -> list[tuple]:
        try:
            with self.admin.connect() as conn:
                result = conn.execute(text(statement), params)
                return [tuple(row) for row in result] if result.returns_rows else []
        except DBAPIError as exc:
            if exc.connection_invalidated or _is_connection_error(exc):
                raise InfraError(f"PostgreSQL at {self._where()} is unreachable: {_first_line(exc)}") from exc
            raise

    def _where(self) -> str:
        return f"{self.url.host}:{self.url.port or 5432}"

    def _exists(self, name: str) -> bool:
        return bool(self._admin("SELECT 1 FROM pg_database WHERE datname = :name", name=name))

    def _wait_until_unused(self, name: str, timeout: float = 2.0) -> None:
        """Wait (briefly) until no session is on `name`.

        A server process lingers for about a millisecond after its client disconnects; DROP,
        RENAME and CREATE ... TEMPLATE that meet it sleep 100 ms before looking again; polling
        here spares a drop right after the episode's last query that sleep. After `timeout`
        the statement runs anyway and the server's own wait (and FORCE) takes over.
        """
        deadline = time.monotonic() + timeout
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = :name"
        while self._admin(query, name=name)[0][0] and time.monotonic() < deadline:
            time.sleep(0.001)

    def _drop_database(self, name: str) -> None:
        self._wait_until_unused(name)
        force = " WITH (FORCE)" if self._server_version() >= (13,) else ""
        self._admin(f"DROP DATABASE IF EXISTS {self._quote(name)}{force}")

    def _server_version(self) -> tuple[int, ...]:
        if self.admin.dialect.server_version_info is None:
            self._admin("SELECT 1")  # the first connection fills in the version
        return tuple(self.admin.dialect.server_version_info or (0,))

    def database_url(self, name: str) -> URL:
        """The URL of database `name` on this server, with the admin URL's credentials."""
        return self.url.set(database=name)

    # -- the Backend interface --------------------------------------------------------------

    def ensure_template(self, key: str, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> str:
        name = template_name(key)
        with self._build_lock:
            if not self._exists(name):
                self._build(name, metadata, rows)
        return name

    def _build(self, name: str, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> None:
        """Fill a temporary database and rename it to `name`; a concurrent builder may win."""
        temporary = f"{BUILD_PREFIX}{this_process().tag}_{uuid.uuid4().hex[:12]}"
        quoted = self._quote(temporary)
        self._admin(f"CREATE DATABASE {quoted}")
        try:
            engine = create_engine(self.database_url(temporary), poolclass=NullPool, connect_args=self._connect_args)
            try:
                fill(engine, metadata, rows)
                advance_sequences(engine, metadata)
                # Frozen rows and fresh statistics: autovacuum then has no reason to visit the
                # template (its session would make every clone wait), and clones start analysed.
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text("VACUUM (FREEZE, ANALYZE)"))
            finally:
                engine.dispose()  # no session may stay on a database that becomes a template
            # Refusing connections keeps stray sessions (and autovacuum) off the finished template.
            self._admin(f"ALTER DATABASE {quoted} WITH ALLOW_CONNECTIONS false")
            self._wait_until_unused(temporary)
            try:
                self._admin(f"ALTER DATABASE {quoted} RENAME TO {self._quote(name)}")
            except ProgrammingError as exc:
                if getattr(exc.orig, "sqlstate", None) != "42P04":  # duplicate_database: another builder won
                    raise
                self._drop_database(temporary)
        except BaseException:
            self._drop_database(temporary)
            raise

    def clone(self, template: str) -> EpisodeDatabase:
        name = f"{EPISODE_PREFIX}{this_process().tag}_{uuid.uuid4().hex[:12]}"
        # Serialised: the copy runs inside the server either way, and one at a time keeps the
        # template's lock short and the server's I/O orderly when many episodes start together.
        with self._clone_lock:
            try:
                self._admin(f"CREATE DATABASE {self._quote(name)} TEMPLATE {self._quote(template)}")
            except DBAPIError as exc:
                raise InfraError(_clone_failure(template, exc)) from exc
            self._live.add(name)
        url = self.database_url(name)
        # one connection for the episode's tool calls (they run one at a time), kept until the drop
        return EpisodeDatabase(url=url.render_as_string(hide_password=False),
                               engine=self.engines.engine(url, StaticPool, self._connect_args), name=name)

    def open_reader(self, db: EpisodeDatabase) -> Engine:
        return self.engines.engine(self.database_url(db.name), NullPool, self._connect_args)

    def drop(self, db: EpisodeDatabase) -> None:
        db.engine.dispose()
        self._drop_database(db.name)
        self._live.discard(db.name)

    def close(self) -> None:
        """Drop the episode databases this backend made and did not drop; keep the templates."""
        try:
            for name in sorted(self._live):
                self._drop_database(name)
            self._live.clear()
        finally:
            self.admin.dispose()


def _first_line(exc: DBAPIError) -> str:
    message = str(exc.orig if exc.orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _is_connection_error(exc: DBAPIError) -> bool:
    """True when the server could not be reached or went away (not when it refused a statement)."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate is None:  # the driver failed before any server answered
        return True
    return sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")  # connection / shutdown


def _clone_failure(template: str, exc: DBAPIError) -> str:
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate == "55006":  # object_in_use
        return (f"cannot clone template {template!r}: another session is connected to it; "
                "close every connection to template databases (the server refuses to copy them while in use)")
    if sqlstate == "3D000":  # invalid_catalog_name
        return f"cannot clone template {template!r}: it does not exist; call ensure_template first"
    return f"cannot clone template {template!r}: {_first_line(exc)}"


def advance_sequences(engine: Engine, metadata: MetaData) -> None:
    """Move each serial primary key's sequence past the seeded ids: rows inserted with explicit
    ids do not advance it, and the next insert without an id would collide with a seed row."""
    quote = engine.dialect.identifier_preparer.quote_identifier
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            for column in table.primary_key.columns:
                sequence = conn.execute(text("SELECT pg_get_serial_sequence(:t, :c)"),
                                        {"t": table.name, "c": column.name}).scalar()
                if sequence:
                    conn.execute(text(f"SELECT setval(:s, COALESCE((SELECT MAX({quote(column.name)}) FROM "
                                      f"{quote(table.name)}), 0) + 1, false)"), {"s": sequence})
