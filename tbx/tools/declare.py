"""Declaring tools.

A tool is a plain function whose first parameter is the episode's database connection (inside a
transaction) and whose other parameters, type hints and docstring are the schema the agent sees.
`@tool("read")` or `@tool("write")` marks what it does to the database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

ToolKind = Literal["read", "write"]


class ToolFailure(Exception):
    """Raised by a tool for a mistake the agent should read (not found, not allowed, ...)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: ToolKind
    fn: Callable[..., Any]
    free_args: tuple[str, ...]  # free-text arguments (notes, reasons) the checks do not compare
    # A tool of another episode state (τ²-bench's, tbx/tau2): `runner(target, arguments)` runs the call and
    # returns its ToolResult in place of `fn` in a transaction (tbx.tools.runtime.invoke), and `schema` is the
    # argument schema its own declaration gives (None: the one `fn`'s type hints give)
    runner: Callable[[Any, dict[str, Any]], Any] | None = field(default=None, compare=False)
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def description(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "")

    @property
    def argument_names(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)[1:]


def tool(kind: ToolKind, free_args: Iterable[str] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if kind not in ("read", "write"):
        raise ValueError(f"tool kind must be 'read' or 'write', not {kind!r}")

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not fn.__doc__:
            raise ValueError(f"tool {fn.__name__} needs a docstring: it is the description the agent sees")
        params = list(inspect.signature(fn).parameters)
        if not params or params[0] != "db":
            raise ValueError(f"tool {fn.__name__}: the first parameter must be 'db' (the episode connection)")
        unknown = set(free_args) - set(params[1:])
        if unknown:
            raise ValueError(f"tool {fn.__name__}: free_args {sorted(unknown)} are not parameters")
        fn.__tbx_tool__ = ToolSpec(fn.__name__, kind, fn, tuple(free_args))  # type: ignore[attr-defined]
        return fn

    return mark


def collect_tools(module: ModuleType) -> tuple[ToolSpec, ...]:
    """All functions of `module` marked with `@tool`, in definition order."""
    specs = [obj.__tbx_tool__ for obj in vars(module).values() if hasattr(obj, "__tbx_tool__")]
    return tuple(specs)
