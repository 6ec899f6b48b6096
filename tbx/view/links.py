"""Where each page lives: URLs of the served viewer, or file names of a static export (one flat folder,
so every link is relative and the folder opens from disk). Functions take an attempt as stored (from 0);
what a reader sees, in a URL or a file name as on the page, numbers attempts from 1, as the report does."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlencode

from tbx.view.store import AttemptFilter, StoredRun


def _query(**values: object) -> str:
    kept = {k: v for k, v in values.items() if v not in ("", None, 1) or k in ("attempt",)}
    return f"?{urlencode(kept)}" if kept else ""


class ServerLinks:
    """The served viewer's URLs; `filters` says the attempts page can filter (the server answers)."""

    filters = True
    css = "/static/style.css"

    def runs(self) -> str:
        return "/"

    def attempts(self, run: StoredRun, filt: AttemptFilter | None = None, page: int = 1) -> str:
        f = filt or AttemptFilter()
        return f"/run/{run.index}/attempts" + _query(domain=f.domain, family=f.family, outcome=f.outcome,
                                                     judge=f.judge, search=f.search, page=page)

    def episode(self, run: StoredRun, task_id: str, attempt: int) -> str:
        return f"/run/{run.index}/episode" + _query(task=task_id, attempt=attempt + 1)

    def compare(self, base: StoredRun, new: StoredRun) -> str:
        return f"/compare?base={base.index}&new={new.index}"

    def pair(self, base: StoredRun, new: StoredRun, task_id: str, attempt: int) -> str:
        return f"/compare/episode?base={base.index}&new={new.index}&" + _query(task=task_id, attempt=attempt + 1)[1:]

    def curves(self, run: StoredRun) -> str:
        return f"/run/{run.index}/curves.png"


def slug(task_id: str, attempt: int) -> str:
    """A file name for one attempt: readable, and unique (a short hash of the task id)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id)[:80]
    return f"{readable}-{hashlib.sha256(task_id.encode()).hexdigest()[:6]}-a{attempt + 1}"


class ExportLinks:
    """File names in the export folder; the attempts pages are the unfiltered list, page by page."""

    filters = False
    css = "style.css"

    def runs(self) -> str:
        return "index.html"

    def attempts(self, run: StoredRun, filt: AttemptFilter | None = None, page: int = 1) -> str:
        return f"run{run.index}-attempts-{page}.html"

    def episode(self, run: StoredRun, task_id: str, attempt: int) -> str:
        return f"run{run.index}-{slug(task_id, attempt)}.html"

    def compare(self, base: StoredRun, new: StoredRun) -> str:
        return f"compare-{base.index}-{new.index}.html"

    def pair(self, base: StoredRun, new: StoredRun, task_id: str, attempt: int) -> str:
        return f"pair-{base.index}-{new.index}-{slug(task_id, attempt)}.html"

    def curves(self, run: StoredRun) -> str:
        return f"run{run.index}-curves.png"
