"""The backend a config names (`make_backend`): above base.py and its subclasses, so the base class never
imports them. Each is imported when chosen (PostgreSQL's driver only where backend=postgres)."""

from __future__ import annotations

from tbx.backend.base import Backend
from tbx.errors import ConfigError


def make_backend(kind: str, url: str | None, workdir: str, statement_timeout_s: float | None = None) -> Backend:
    """The backend of `kind`; PostgreSQL statements are cut after `statement_timeout_s` (None: never)."""
    if kind == "sqlite":
        from tbx.backend.sqlite import SQLiteBackend

        return SQLiteBackend(workdir)
    if kind == "postgres":
        if not url:
            raise ConfigError("conf/backend/postgres.yaml", "backend.url", "is empty",
                              "give backend.url=postgresql+psycopg://USER@HOST:PORT/DB")
        from tbx.backend.postgres import PostgresBackend

        return PostgresBackend(url, statement_timeout_s)
    raise ConfigError("conf/backend", "backend.kind", f"is {kind!r}", "use backend=sqlite or backend=postgres")
