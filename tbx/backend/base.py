"""The backend interface: build a template database once per task, clone it per episode."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from sqlalchemy import Engine, MetaData, insert

from tbx.backend.state import install_change_log


@dataclass
class EpisodeDatabase:
    """One episode's own database. `engine` is for the tools; graders open their own."""

    url: str
    engine: Engine
    name: str


class Backend(ABC):
    """Creates templates and isolated per-episode clones."""

    kind: str

    @abstractmethod
    def ensure_template(self, key: str, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> str:
        """Build (once; later calls reuse it) the template `key` and return its handle."""

    @abstractmethod
    def clone(self, template: str) -> EpisodeDatabase:
        """A fresh database with the template's content, seen by nobody else."""

    @abstractmethod
    def open_reader(self, db: EpisodeDatabase) -> Engine:
        """A separate engine on the same database, for the grader (dispose it after use)."""

    @abstractmethod
    def drop(self, db: EpisodeDatabase) -> None:
        """Delete the episode database."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release shared resources (admin connections)."""


def fill(engine: Engine, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> None:
    """Create the schema, insert `rows` (table → rows), parents before children, and install the change
    log (`tbx.backend.state`)."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            # one statement per run of rows naming the same columns: a task's row may leave out
            # columns (their defaults apply) that the base rows give; the order is kept
            for _, run in groupby(rows.get(table.name) or (), key=lambda row: tuple(sorted(row))):
                conn.execute(insert(table), [dict(r) for r in run])
    install_change_log(engine, metadata)  # after the seed rows: a fresh clone's log is empty
