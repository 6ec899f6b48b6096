"""`stage=view view.export=DIR`: the viewer's pages as static HTML in one folder, linked relatively, so
the folder opens from disk (file://) and can be shared or attached to a paper's artifacts."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

from tbx.process.durable import write_text
from tbx.view import pages
from tbx.view.app import curves_path
from tbx.view.links import ExportLinks
from tbx.view.store import AttemptFilter, StoredRun


def export_site(runs: Sequence[StoredRun], out: Path, page_size: int) -> list[Path]:
    """Write every page (runs, attempts page by page, each episode, compare and attempt pairs of the first
    run against each other one), each as soon as it is rendered; return the files written."""
    links = ExportLinks()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def page(name: str, html: str | None) -> None:
        write_text(out / name, html or "")
        written.append(out / name)

    shutil.copyfile(str(files("tbx.view") / "static" / "style.css"), out / links.css)
    curves = {}
    for run in runs:
        path = curves_path(run)
        if path is not None:
            shutil.copyfile(path, out / links.curves(run))
        curves[run.index] = path is not None
    page(links.runs(), pages.runs_page(runs, links, curves))
    for run in runs:
        rows = run.rows()
        for number in range(1, max(1, -(-len(rows) // page_size)) + 1):
            page(links.attempts(run, None, number), pages.attempts_page(run, links, AttemptFilter(), number, page_size))
        for row in rows:
            page(links.episode(run, row.task_id, row.attempt), pages.episode_page(run, links, row.task_id, row.attempt))
    for new in runs[1:]:
        base = runs[0]
        page(links.compare(base, new), pages.compare_page(base, new, links))
        keys = {(r.task_id, r.attempt) for r in base.rows()} | {(r.task_id, r.attempt) for r in new.rows()}
        for task_id, attempt in sorted(keys):
            page(links.pair(base, new, task_id, attempt), pages.pair_page(base, new, links, task_id, attempt))
    return written
