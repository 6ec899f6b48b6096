"""Single-fault mutations of a τ² task's gold actions: drop one write, or change one argument of one write.

The changed value is another value the same tool argument takes in the domain's gold actions (the
first in sorted order that differs), or, where it takes no other, a change by type (a number + 1, text
+ "_x", a list without its last item). The replay policy plays them (`steps` records), and the tests
compare tbx's verdict on each with the verdict τ²'s own code gives the same actions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Call = tuple[str, dict[str, Any]]  # a tool call: name, arguments


@dataclass(frozen=True)
class Mutant:
    label: str  # "drop 3" | "change 3.amount"
    calls: tuple[Call, ...]


def gold_calls(record: Any) -> tuple[Call, ...]:
    return tuple((a.name, dict(a.arguments)) for a in record.evaluation_criteria.actions or ()
                 if a.requestor == "assistant")


def argument_values(records: Iterable[Any]) -> dict[tuple[str, str], list[Any]]:
    """(tool, argument) -> the distinct values it takes in these tasks' gold actions, sorted by their JSON."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        for name, arguments in gold_calls(record):
            for argument, value in arguments.items():
                seen.setdefault((name, argument), {})[json.dumps(value, sort_keys=True)] = value
    return {key: [values[text] for text in sorted(values)] for key, values in seen.items()}


def _changed(value: Any, others: Sequence[Any]) -> Any:
    for other in others:
        if other != value:
            return other
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1]
    return None


def mutants(record: Any, writes: set[str], values: dict[tuple[str, str], list[Any]]) -> list[Mutant]:
    """Every single-fault mutant of `record`'s gold actions whose fault is in a write (`writes`: the tool names)."""
    calls = gold_calls(record)
    found = []
    for index, (name, arguments) in enumerate(calls):
        if name not in writes:
            continue
        found.append(Mutant(f"drop {index}", calls[:index] + calls[index + 1:]))
        for argument in sorted(arguments):
            changed = dict(arguments)
            changed[argument] = _changed(arguments[argument], values.get((name, argument), ()))
            found.append(Mutant(f"change {index}.{argument}", calls[:index] + ((name, changed),) + calls[index + 1:]))
    return found
