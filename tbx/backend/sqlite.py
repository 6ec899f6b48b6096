"""SQLite: the embedded default. A template file per task, a file copy per episode.

Measured here (see README): a file copy of a ~100 KB template and a new engine cost well under a
millisecond, cheaper than rebuilding the schema (tens of ms) and as cheap as the backup API into
`:memory:`, while leaving a real file that the grader opens through its own connection.
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.pool import NullPool, StaticPool

from tbx.backend.base import Backend, EpisodeDatabase, fill

# SQLite stores Numeric as REAL; money columns come back as Decimal through SQLAlchemy and the
# canonical state normalises them, so the dialect's warning about it is noise here.
warnings.filterwarnings("ignore", message=r"Dialect sqlite\+pysqlite does \*not\* support Decimal")



def sqlite_engine(path: Path, shared: bool = False) -> Engine:
    """An engine on one SQLite file. `shared`: one connection reused for every checkout (an
    episode's tool calls run one at a time), which saves opening the file per call."""
    if shared:
        engine = create_engine(f"sqlite:///{path}", poolclass=StaticPool,
                               connect_args={"check_same_thread": False})
    else:
        engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # noqa: ANN001 - SQLAlchemy's hook signature
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=OFF")  # an episode DB is disposable
        cursor.close()

    return engine


class SQLiteBackend(Backend):
    kind = "sqlite"

    def __init__(self, workdir: str):
        self.root = Path(workdir)
        self.templates = self.root / "templates"
        self.episodes = self.root / "episodes" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # this instance's own
        self.templates.mkdir(parents=True, exist_ok=True)
        self.episodes.mkdir(parents=True, exist_ok=True)

    def ensure_template(self, key: str, metadata: MetaData, rows: Mapping[str, Sequence[dict[str, Any]]]) -> str:
        path = self.templates / f"{key}.sqlite"
        if not path.exists():
            partial = path.with_suffix(f".{uuid.uuid4().hex}.partial")
            engine = sqlite_engine(partial)
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
        return EpisodeDatabase(url=f"sqlite:///{path}", engine=sqlite_engine(path, shared=True), name=name)

    def open_reader(self, db: EpisodeDatabase) -> Engine:
        return sqlite_engine(Path(db.url.removeprefix("sqlite:///")))

    def drop(self, db: EpisodeDatabase) -> None:
        db.engine.dispose()
        Path(db.url.removeprefix("sqlite:///")).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.episodes, ignore_errors=True)
