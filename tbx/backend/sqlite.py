"""SQLite: the embedded default. A template file per task, a file copy per episode.

A file copy of the template and a new engine are cheaper than rebuilding the schema and as cheap as
the backup API into `:memory:`, while leaving a real file that the grader opens through its own
connection (figures: docs/benchmarks.md, "Measurements behind design choices").

Each backend keeps its episode files in a folder named after its owner process (`tbx.process.owner`), and a
new backend removes the folders (and half-built templates) of processes on this host that are gone,
so a killed run leaves nothing behind once anything starts again. Dropping an episode database
interrupts what its connections still run (a hung tool call or dump whose wait was cut).
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, MetaData, create_engine
from sqlalchemy.pool import NullPool, StaticPool

from tbx.backend.base import Backend, EpisodeDatabase, fill
from tbx.backend.engines import EngineMaker
from tbx.process.owner import Owner, this_process

# SQLite stores Numeric as REAL; money columns come back as Decimal through SQLAlchemy and the
# canonical state normalises them, so the dialect's warning about it is noise here.
warnings.filterwarnings("ignore", message=r"Dialect sqlite\+pysqlite does \*not\* support Decimal")


def _pragmas(opened: list | None) -> Callable[[Any, Any], None]:
    """Each new driver connection's settings; `opened` collects the connections (to interrupt them)."""

    def hook(dbapi_conn, _record) -> None:  # SQLAlchemy's hook signature
        if opened is not None:
            opened.append(dbapi_conn)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=OFF")  # an episode DB is disposable
        cursor.close()

    return hook


class SQLiteBackend(Backend):
    kind = "sqlite"

    def __init__(self, workdir: str):
        self.root = Path(workdir)
        self.templates = self.root / "templates"
        # this instance's own folder, named after its owner so that leftovers of dead processes are known
        self.episodes = self.root / "episodes" / f"{this_process().tag}-{uuid.uuid4().hex[:8]}"
        self.templates.mkdir(parents=True, exist_ok=True)
        self.episodes.mkdir(parents=True, exist_ok=True)
        self.swept = sweep_stale(self.root)
        self._opened: dict[str, list] = {}  # episode database -> driver connections opened on it
        # one dialect and compiled-statement cache for every episode's engines (tbx.backend.engines)
        self.engines = EngineMaker(create_engine("sqlite://", poolclass=NullPool))

    def engine(self, path: Path, shared: bool = False, opened: list | None = None) -> Engine:
        """An engine on one SQLite file. `shared`: one connection reused for every checkout (an episode's
        tool calls run one at a time), which saves opening the file per call."""
        if shared:
            return self.engines.engine(f"sqlite:///{path}", StaticPool, {"check_same_thread": False},
                                       _pragmas(opened))
        return self.engines.engine(f"sqlite:///{path}", NullPool, None, _pragmas(opened))

    def ensure_template(self, key: str, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> str:
        path = self.templates / f"{key}.sqlite"
        if not path.exists():
            partial = path.with_suffix(f".{this_process().tag}-{uuid.uuid4().hex[:8]}.partial")
            engine = self.engine(partial)
            try:
                fill(engine, metadata, rows)
            finally:
                engine.dispose()
            os.replace(partial, path)  # atomic: concurrent builders never see half a template
        return str(path)

    def clone(self, template: str) -> EpisodeDatabase:
        name = uuid.uuid4().hex
        path = self.episodes / f"{name}.sqlite"
        shutil.copyfile(template, path)
        self._opened[name] = []
        return EpisodeDatabase(url=f"sqlite:///{path}", engine=self.engine(path, True, self._opened[name]),
                               name=name)

    def open_reader(self, db: EpisodeDatabase) -> Engine:
        return self.engine(Path(db.url.removeprefix("sqlite:///")), opened=self._opened.get(db.name))

    def drop(self, db: EpisodeDatabase) -> None:
        for connection in self._opened.pop(db.name, []):
            try:
                connection.interrupt()  # stops a statement a cut-off call left running; idle ones ignore it
            except Exception:  # a closed connection has nothing to stop
                pass
        db.engine.dispose()
        Path(db.url.removeprefix("sqlite:///")).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.episodes, ignore_errors=True)


def sweep_stale(root: Path) -> int:
    """Remove episode folders and half-built templates under `root` whose owner process (on this host)
    is gone; return how many. Live processes' files and other hosts' are left alone."""
    removed = 0
    for item in [*(root / "episodes").glob("*"), *(root / "templates").glob("*.partial")]:
        owner = Owner.parse(item.name)
        if owner is None or not owner.gone():
            continue
        if item.is_dir():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
        removed += 1
    return removed
