"""Single-fault mutations of a reference solution (pure).

Each mutation must fail the task's checks; if one passes, the checks miss a fault (or a write
argument nobody checks should be declared a free-text argument of its tool). Used by the tests
and the admission gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tbx.tasks.model import Step
from tbx.tools.declare import ToolSpec


@dataclass(frozen=True)
class Mutation:
    kind: str  # drop_write | wrong_value | extra_write
    description: str
    steps: tuple[Step, ...]


def perturb(value: Any) -> Any:
    """A different value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "-X"
    return None


def mutate(steps: Sequence[Step], tools: Mapping[str, ToolSpec], distractors: Sequence[Mapping[str, Any]]
           ) -> list[Mutation]:
    writes = [i for i, s in enumerate(steps) if s.tool and tools[s.tool].kind == "write"]
    mutations = []
    for i in writes:
        name = steps[i].tool
        mutations.append(Mutation("drop_write", f"drop step {i} ({name})", tuple(steps[:i]) + tuple(steps[i + 1:])))
        for arg, value in steps[i].arguments.items():
            if arg in tools[name].free_args or perturb(value) is None:
                continue
            changed = Step(tool=name, arguments={**steps[i].arguments, arg: perturb(value)})
            mutations.append(Mutation("wrong_value", f"step {i} ({name}): {arg}={perturb(value)!r} "
                                      f"instead of {value!r}", tuple(steps[:i]) + (changed,) + tuple(steps[i + 1:])))
    touched = {(s.tool, tuple(sorted(s.arguments.items(), key=str))) for s in steps if s.tool}
    for extra in distractors:
        key = (extra["tool"], tuple(sorted(extra["arguments"].items(), key=str)))
        if key not in touched:
            step = Step(tool=extra["tool"], arguments=dict(extra["arguments"]))
            last_tool = max((i for i, s in enumerate(steps) if s.tool), default=len(steps) - 1)
            new = tuple(steps[: last_tool + 1]) + (step,) + tuple(steps[last_tool + 1:])
            mutations.append(Mutation("extra_write", f"extra {extra['tool']} {extra['arguments']}", new))
            break
    return mutations
