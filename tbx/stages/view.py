"""stage=view: look at stored runs in the browser, or write them as static HTML.

    python launch.py stage=view 'runs=[outputs/eval-…-base,outputs/eval-…-trained]'
    python launch.py stage=view store.url=postgresql+psycopg://…            # every run in that store
    python launch.py stage=view 'runs=[…]' view.export=site/                # static pages, no server

Pages: runs (the headline with intervals, per domain), attempts (filter by domain, family, outcome,
judge decision; search by task id; paged), an episode (transcript, verdict with its row diff and the
extra side effects marked, judge evidence, tokens, cost, seeds, weights, the task's goal and reference)
and compare (per task k/n in both runs, flips, the paired difference, both episodes of an attempt).
Loopback by default; any other `view.host` needs `view.token_env` (as stage=serve). Reads only, so
Ctrl-C just stops it: "viewer stopped (Ctrl-C)", exit 0 (no run to resume, unlike stage=eval).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.process.preemption import run_loop
from tbx.runs.results import ViewResult
from tbx.view.store import load_runs


def run_view(cfg: Config) -> ViewResult:
    if not cfg.runs and not cfg.store.url:
        raise ConfigError("conf/config.yaml", "runs", "is empty", "give runs=[RUN_DIR,...] (the folders stage=eval "
                          "printed), or store.url=URL for every run in that results database")
    runs = load_runs(cfg.runs, cfg.store.url)
    try:
        if cfg.view.export is not None:
            from tbx.view.export import export_site

            written = export_site(runs, Path(cfg.view.export), cfg.view.page_size)
            index = Path(cfg.view.export) / "index.html"
            print(f"viewer: {len(written)} pages of {len(runs)} run(s) -> {index}")
            return ViewResult(export=str(index), pages=len(written))
        try:
            run_loop(_serve(cfg, runs))
        except KeyboardInterrupt:  # Ctrl-C is how a viewer is meant to stop: nothing to resume, nothing lost
            pass
        # Here only after Ctrl-C: uvicorn catches it, stops, and raises it again, which reaches this frame as a
        # KeyboardInterrupt or, when it lands after the served loop has ended, not at all (SIGTERM ends the process).
        print("viewer stopped (Ctrl-C)", file=sys.stderr)
        return ViewResult(served=True)
    finally:
        for run in runs:
            run.close()


async def _serve(cfg: Config, runs) -> None:  # list[StoredRun]
    import uvicorn

    from tbx.process.listen import start_listening
    from tbx.view.app import viewer_app

    token = os.environ.get(cfg.view.token_env) if cfg.view.token_env else None
    _, serving, base = await start_listening(
        uvicorn.Config(viewer_app(runs, cfg.view.page_size, token), host=cfg.view.host, port=cfg.view.port,
                       log_level="warning"), "conf/stage/view.yaml", "view.port")
    url = f"{base}/"
    needs = f" (open it with ?token=<the value of ${cfg.view.token_env}>)" if token else ""
    print(f"viewer of {len(runs)} run(s) at {url}{needs}; Ctrl-C stops it", flush=True, file=sys.stdout)
    await serving
