"""The run and episode viewer (stage=view): pages over stored runs, served locally or exported as HTML.

`tbx.view.store` reads runs (folders or a results database) without changing them, `tbx.view.pages`
turns them into HTML with Jinja2 templates, `tbx.view.app` serves those pages with Starlette (loopback
by default, a bearer token when bound elsewhere) and `tbx.view.export` writes them as static files.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def viewer_command(run_dirs: Sequence[str]) -> str:
    """The command that opens these runs in the viewer (printed at the end of stage=eval and report)."""
    return f"python launch.py stage=view {shlex.quote('runs=[' + ','.join(str(d) for d in run_dirs) + ']')}"
