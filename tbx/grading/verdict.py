"""Grade a terminal state (pure): every expected change present and nothing else changed.

Completeness is enforced both ways: an empty diff never passes a task with expected changes,
and a change nobody expected fails the task (a side effect is a failure, not noise). Judge rules, when a task has
them, must all pass too; without a judge such a task is excluded, never passed. The grade and its
checks are records (`tbx.records.Grade`): an episode carries one, and the store keeps it as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tbx.backend.state import State, canonical
from tbx.grading.diff import RowChange, diff_states, split_volatile
from tbx.records import CheckResult, Grade, JudgeVerdict
from tbx.tasks.model import ExpectedChange, JudgeRule


def _same(expected: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """Columns of `expected` whose value differs in `row` (canonical comparison)."""
    return [c for c, v in expected.items() if canonical(v) != row.get(c)]


def _canon_key(key: dict[str, Any]) -> dict[str, Any]:
    return {c: canonical(v) for c, v in key.items()}


def _check_one(spec: ExpectedChange, index: int, changes: Sequence[RowChange], used: set[int],
               loose: dict[str, set[str]]) -> CheckResult:
    name = f"expected[{index}] {spec.op} {spec.table}"
    free = loose.get(spec.table, set())
    if spec.op == "insert":
        candidates = [(i, c) for i, c in enumerate(changes) if c.op == "insert" and c.table == spec.table
                      and i not in used]
        for i, change in candidates:
            if not _same(spec.values, change.after):
                used.add(i)
                return CheckResult(name, True, f"new row {change.key} matches {spec.values}", (change.to_dict(),))
        if not candidates:
            return CheckResult(name, False, f"missing: no new row in {spec.table} with {spec.values}")
        near = candidates[0][1]
        wrong = {c: near.after.get(c) for c in _same(spec.values, near.after)}
        return CheckResult(name, False, f"no new row in {spec.table} matches {spec.values}; "
                           f"row {near.key} has {wrong}", tuple(c.to_dict() for _, c in candidates))
    key = _canon_key(spec.key)
    for i, change in enumerate(changes):
        if change.table != spec.table or i in used or _canon_key(change.key) != key:
            continue
        used.add(i)
        if spec.op == "delete":
            ok = change.op == "delete"
            return CheckResult(name, ok, f"row {spec.key} deleted" if ok else f"row {spec.key} was {change.op}d, "
                               "expected deleted", (change.to_dict(),))
        if change.op != "update":
            return CheckResult(name, False, f"row {spec.key} was {change.op}d, expected updated", (change.to_dict(),))
        wrong = _same(spec.values, change.after)
        extra = [c for c in change.columns if c not in spec.values and c not in free]
        if wrong or extra:
            bits = [f"{c} is {change.after.get(c)!r}, expected {canonical(spec.values[c])!r}" for c in wrong]
            bits += [f"{c} changed unexpectedly ({change.before.get(c)!r} -> {change.after.get(c)!r})" for c in extra]
            return CheckResult(name, False, f"row {spec.key}: " + "; ".join(bits), (change.to_dict(),))
        return CheckResult(name, True, f"row {spec.key} has {spec.values}", (change.to_dict(),))
    return CheckResult(name, False, f"missing: row {spec.key} of {spec.table} was not {spec.op}d")


def match_expected(changes: Sequence[RowChange], expected: Sequence[ExpectedChange],
                   loose: Iterable[str] = ()) -> list[CheckResult]:
    """One check per expected change, then one for everything nobody expected."""
    _, loose_columns = split_volatile(loose)
    used: set[int] = set()
    # keyed specs first, so that an insert spec never takes a row an update/delete spec names by key
    order = sorted(range(len(expected)), key=lambda i: expected[i].op == "insert")
    by_index = {i: _check_one(expected[i], i, changes, used, loose_columns) for i in order}
    checks = [by_index[i] for i in range(len(expected))]
    unexpected = [c for i, c in enumerate(changes) if i not in used]
    if unexpected:
        listed = "; ".join(c.describe() for c in unexpected[:5])
        more = f" (+{len(unexpected) - 5} more)" if len(unexpected) > 5 else ""
        checks.append(CheckResult("no other change", False, f"unexpected: {listed}{more}",
                                  tuple(c.to_dict() for c in unexpected)))
    else:
        checks.append(CheckResult("no other change", True, "no unexpected change"))
    return checks


def grade_state(initial: State, final: State, expected: Sequence[ExpectedChange], volatile: Iterable[str] = (),
                loose: Iterable[str] = (), judge_rules: Sequence[JudgeRule] = (),
                judge_verdicts: Sequence[JudgeVerdict] | None = None) -> Grade:
    """The verdict on one terminal state. `judge_verdicts` None with rules present → excluded."""
    checks = match_expected(diff_states(initial, final, volatile), expected, loose)
    if judge_rules and judge_verdicts is None:
        return Grade(None, tuple(checks), (), "task has judge rules and no judge is configured")
    verdicts = tuple(judge_verdicts or ())
    for verdict in verdicts:
        checks.append(CheckResult(f"judge {verdict.rule_id}", verdict.passed, verdict.reason))
    passed = bool(expected) and all(c.passed for c in checks)
    return Grade(passed, tuple(checks), verdicts)


def derive_expected(changes: Sequence[RowChange], loose: Iterable[str] = ()) -> tuple[ExpectedChange, ...]:
    """Expected changes from the reference solution's diff (its replay into a twin database)."""
    _, loose_columns = split_volatile(loose)
    specs = []
    for change in changes:
        free = loose_columns.get(change.table, set())
        if change.op == "delete":
            specs.append(ExpectedChange("delete", change.table, key=dict(change.key)))
        elif change.op == "update":
            values = {c: change.after[c] for c in change.columns if c not in free}
            if values:
                specs.append(ExpectedChange("update", change.table, key=dict(change.key), values=values))
        else:
            values = {c: v for c, v in change.after.items()
                      if c in change.columns and c not in change.key and c not in free}
            specs.append(ExpectedChange("insert", change.table, values=values))
    return tuple(specs)
