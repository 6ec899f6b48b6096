"""Running one tool call against an episode database: the one code path for MCP and replay.

The arguments are checked against the tool's type hints before the tool runs (`arguments.py`), so
a missing, unknown or wrong-typed argument is the agent's mistake on every path, never a crash.
Each call then runs in its own transaction: it commits when the tool returns and rolls back when
it fails, so a failed write leaves nothing behind. A mistake the agent made (bad arguments, a
`ToolFailure`, a constraint the database refuses) becomes a short error message the agent reads;
anything else raised by the tool is a fault of the harness and raises `InfraError`, however the
exception is spelt (a `TypeError` inside a tool body is a bug, not a bad argument).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DataError, IntegrityError, StatementError

from tbx.errors import InfraError
from tbx.tools.arguments import validate_arguments
from tbx.tools.declare import ToolFailure, ToolSpec

ERROR_CHARS = 500  # an error message longer than this (a tool echoing a huge argument) is cut


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value) if value != value.to_integral_value() else int(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def render_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=False)


def _error(message: str) -> ToolResult:
    text = f"Error: {message}"
    if len(text) > ERROR_CHARS:
        text = f"{text[:ERROR_CHARS]}... (message cut at {ERROR_CHARS} of {len(text)} characters)"
    return ToolResult(text, True)


def invoke(spec: ToolSpec, engine: Engine, arguments: dict[str, Any]) -> ToolResult:
    """Check `arguments` against `spec`'s signature, then run it in one transaction on `engine`; a tool with
    its own runner (another kind of episode state) is run by it on `engine`, that state's target."""
    if spec.runner is not None:
        try:
            return spec.runner(engine, arguments)
        except Exception as exc:
            raise InfraError(f"tool {spec.name} crashed: {exc!r}") from exc
    try:
        kwargs = validate_arguments(spec, arguments)
    except ToolFailure as exc:
        return _error(str(exc))
    except Exception as exc:  # the tool's signature itself cannot be turned into a model
        raise InfraError(f"tool {spec.name}: cannot check its arguments: {exc!r}") from exc
    try:
        with engine.begin() as conn:
            value = spec.fn(conn, **kwargs)
    except ToolFailure as exc:
        return _error(str(exc))
    except (IntegrityError, DataError) as exc:
        reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
        return _error(f"the database refused this change ({reason})")
    except StatementError as exc:
        raise InfraError(f"database error in tool {spec.name}: {exc}".splitlines()[0]) from exc
    except Exception as exc:
        raise InfraError(f"tool {spec.name} crashed: {exc!r}") from exc
    return ToolResult(render_result(value), False)
