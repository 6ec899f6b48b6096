"""Engines on many databases of one server that share one dialect and one compiled-statement cache.

SQLAlchemy keeps the SQL it compiled from a statement in a cache of its engine, keyed by the engine's
dialect object. The backends make a new engine for every episode database, so each episode started
with an empty cache and compiled every statement of its tool calls again: about a quarter of an oracle
episode on SQLite. Engines made here share the dialect, initialised once (on PostgreSQL that also
saves the dialect's first-connect queries of every new engine), and one cache, so a statement is
compiled once per process. Each engine still has its own pool and connections to its own database:
the episode's isolation is the database's, as before.

Where we depart from `create_engine`: the engine is assembled from the dialect's own parts (its connect
arguments for the URL, its on-connect hook); the dialect-level `do_connect` events and a per-URL
isolation level are not used by tbx and not wired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import URL, Engine, event, make_url
from sqlalchemy.pool import Pool
from sqlalchemy.util import LRUCache

CACHE_SIZE = 5000  # compiled statements kept: every domain's tool statements fit many times over


class EngineMaker:
    """Makes engines like `model` (same dialect, initialised by connecting `model` once) on other URLs."""

    def __init__(self, model: Engine):
        with model.connect():  # the dialect reads the server's version and settings on the first connect
            pass
        self.dialect = model.dialect
        self.cache = LRUCache(CACHE_SIZE)
        model.dispose()

    def engine(self, url: str | URL, poolclass: type[Pool], connect_args: dict[str, Any] | None = None,
               on_connect: Callable[[Any, Any], None] | None = None) -> Engine:
        """An engine on `url` with its own `poolclass` pool; `on_connect(dbapi_connection, record)` runs
        for each new driver connection (after the dialect's own hook)."""
        url, dialect = make_url(url), self.dialect
        args, params = dialect.create_connect_args(url)
        params = {**params, **(connect_args or {})}
        pool = poolclass(lambda: dialect.connect(*args, **params), dialect=dialect)
        hook = dialect.on_connect_url(url)
        if hook is not None:
            event.listen(pool, "connect", lambda connection, _record: hook(connection))
        if on_connect is not None:
            event.listen(pool, "connect", on_connect)
        return Engine(pool, dialect, url, query_cache_size=0, execution_options={"compiled_cache": self.cache})
