"""Running one tool call against an episode database: the one code path for MCP and replay.

Each call runs in its own transaction: it commits when the tool returns and rolls back when it
fails, so a failed write leaves nothing behind. A mistake the agent made (a `ToolFailure`, a
constraint the database refuses) becomes an error message the agent reads; anything else is a
fault of the harness and raises `InfraError`.
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
from tbx.tools.declare import ToolFailure, ToolSpec


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


def invoke(spec: ToolSpec, engine: Engine, arguments: dict[str, Any]) -> ToolResult:
    """Run `spec` with `arguments` in one transaction on `engine`."""
    try:
        with engine.begin() as conn:
            value = spec.fn(conn, **arguments)
    except ToolFailure as exc:
        return ToolResult(f"Error: {exc}", True)
    except TypeError as exc:
        if "argument" in str(exc):  # wrong or missing keyword arguments (replay without MCP validation)
            return ToolResult(f"Error: {exc}", True)
        raise InfraError(f"tool {spec.name} crashed: {exc!r}") from exc
    except (IntegrityError, DataError) as exc:
        reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
        return ToolResult(f"Error: the database refused this change ({reason})", True)
    except StatementError as exc:
        raise InfraError(f"database error in tool {spec.name}: {exc}".splitlines()[0]) from exc
    except Exception as exc:
        raise InfraError(f"tool {spec.name} crashed: {exc!r}") from exc
    return ToolResult(render_result(value), False)
