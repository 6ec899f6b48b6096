"""The served viewer: a Starlette app over the pages, and uvicorn to run it.

On a loopback address it needs nothing; bound elsewhere it needs the token (`view.token_env`), sent
once as `?token=...` (then kept in an HttpOnly cookie) or on every request as
`Authorization: Bearer <token>`. As with stage=serve, the token is never printed or stored.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tbx.view import pages
from tbx.view.links import ServerLinks
from tbx.view.store import AttemptFilter, StoredRun

COOKIE = "tbx_view_token"


def curves_path(run: StoredRun) -> Path | None:
    """The training curves stage=train wrote beside the run, if any."""
    path = run.run_dir / "curves.png" if run.run_dir is not None else None
    return path if path is not None and path.is_file() else None


class TokenGate(BaseHTTPMiddleware):
    """Every request carries the token (query once, then the cookie; or a bearer header), else 401."""

    def __init__(self, app, token: str):  # an ASGI app
        super().__init__(app)
        self.token = token

    def _ok(self, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), self.token.encode())

    async def dispatch(self, request: Request, call_next: Callable) -> Response:
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        if self._ok(bearer) or self._ok(request.cookies.get(COOKIE)):
            return await call_next(request)
        if self._ok(request.query_params.get("token")):
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(kept)}" if kept else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            return response
        return PlainTextResponse("401: this viewer needs its token (open the URL with ?token=<token>)", 401)


def _int(request: Request, name: str, default: int) -> int:
    try:
        return int(request.query_params.get(name, default))
    except ValueError:
        return default


def _attempt(request: Request) -> int:
    """The attempt a URL names, numbered from 1 as every page shows it, as stored (from 0)."""
    return _int(request, "attempt", 0) - 1


def viewer_app(runs: Sequence[StoredRun], page_size: int, token: str | None = None) -> Starlette:
    links = ServerLinks()

    def run_of(request: Request) -> StoredRun | None:
        index = request.path_params.get("run", _int(request, "run", -1))
        return runs[index] if 0 <= index < len(runs) else None

    def missing(what: str) -> PlainTextResponse:
        return PlainTextResponse(f"404: {what}", status_code=404)

    async def index(request: Request) -> Response:
        curves = {r.index: curves_path(r) is not None for r in runs}
        return HTMLResponse(pages.runs_page(runs, links, curves))

    async def attempts(request: Request) -> Response:
        run = run_of(request)
        if run is None:
            return missing("no such run")
        q = request.query_params
        filt = AttemptFilter(domain=q.get("domain", ""), family=q.get("family", ""), outcome=q.get("outcome", ""),
                             judge=q.get("judge", ""), search=q.get("search", "").strip())
        return HTMLResponse(pages.attempts_page(run, links, filt, _int(request, "page", 1), page_size))

    async def episode(request: Request) -> Response:
        run = run_of(request)
        html = None if run is None else pages.episode_page(run, links, request.query_params.get("task", ""),
                                                           _attempt(request))
        return missing("no such attempt") if html is None else HTMLResponse(html)

    def pair_of(request: Request) -> tuple[StoredRun, StoredRun] | None:
        base, new = _int(request, "base", 0), _int(request, "new", 1)
        ok = 0 <= base < len(runs) and 0 <= new < len(runs)
        return (runs[base], runs[new]) if ok else None

    async def compare(request: Request) -> Response:
        pair = pair_of(request)
        return missing("no such runs") if pair is None else HTMLResponse(pages.compare_page(*pair, links))

    async def pair_episode(request: Request) -> Response:
        pair = pair_of(request)
        html = None if pair is None else pages.pair_page(*pair, links, request.query_params.get("task", ""),
                                                         _attempt(request))
        return missing("no such attempt") if html is None else HTMLResponse(html)

    async def curves(request: Request) -> Response:
        run = run_of(request)
        path = None if run is None else curves_path(run)
        return missing("no training curves") if path is None else FileResponse(path)

    static = StaticFiles(directory=str(files("tbx.view") / "static"))
    routes = [Route("/", index), Route("/run/{run:int}/attempts", attempts), Route("/run/{run:int}/episode", episode),
              Route("/run/{run:int}/curves.png", curves), Route("/compare", compare),
              Route("/compare/episode", pair_episode), Mount("/static", static)]
    app = Starlette(routes=routes)
    if token is not None:
        app.add_middleware(TokenGate, token=token)
    return app
