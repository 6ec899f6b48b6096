"""What the domain tests share: the bundled domains, their tasks, and tool calls played on a
fresh clone of a task's template (a prepared TaskRuntime knows its domain, so one helper serves
every domain). The fixtures `backend` and `runtime` are in conftest.py."""

from __future__ import annotations

from functools import cache

from tbx.backend import dump_state
from tbx.domains import domain_names, get_domain
from tbx.tools.runtime import invoke

BUNDLED = [name for name in domain_names() if name != "mock"]
TRAINING = [name for name in BUNDLED if get_domain(name).split == "train"]


@cache
def families_of(name: str) -> list[str]:
    return sorted({t["family"] for t in get_domain(name).generate_tasks(0)})


def pick(tasks: list[dict], family: str, index: int = 0) -> dict:
    """The `index`-th task of `family` among `tasks`."""
    return [t for t in tasks if t["family"] == family][index]


def run_tools(backend, rt, calls: list[tuple[str, dict]]):
    """Run tool calls in order on a fresh clone of the task's template; return (results, final state)."""
    db = backend.clone(rt.template)
    try:
        results = [invoke(rt.domain.tool(name), db.engine, arguments) for name, arguments in calls]
        return results, dump_state(db.engine, rt.domain.metadata)
    finally:
        backend.drop(db)


def call(backend, rt, tool: str, **arguments):
    """Run one tool on a fresh clone of the task's template; return (result, terminal state)."""
    results, state = run_tools(backend, rt, [(tool, arguments)])
    return results[0], state


def replay(backend, rt, steps) -> dict:
    """The terminal state after the tool calls among `steps` (a reference or a mutation of one)."""
    return run_tools(backend, rt, [(s.tool, s.arguments) for s in steps if s.tool])[1]


def rows(state: dict, table: str) -> list[dict]:
    return state[table]["rows"]


def state_row(state: dict, table: str, key: int) -> dict:
    return next(r for r in state[table]["rows"] if r["id"] == str(key))


def without_identity(rt) -> tuple[list, tuple[str, ...]]:
    """The task's expected changes and volatile names, apart from the identity record: these tests
    call the tools by hand without verifying (tests/domains/test_identity_records.py covers it)."""
    return [e for e in rt.expected if e.table != "identity_checks"], (*rt.volatile, "identity_checks")
