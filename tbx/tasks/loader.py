"""Load tasks from YAML/JSON files or dicts into the records the rest of tbx reads.

A task mapping is parsed by the task file schema (`tbx.tasks.schema`: types, ranges, unknown keys at
any depth; every mistake one line naming the file, the field and the fix) and the parsed file becomes
a `Task` here. Checks that need the domain (does the tool exist? the table?) happen in `tbx.catalog`,
which knows the domains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tbx.errors import TaskFormatError
from tbx.tasks.files import parse_task_text, read_task_text
from tbx.tasks.model import Checks, ExpectedChange, JudgeRule, PrivateFact, Step, Task, UserScenario
from tbx.tasks.schema import ChecksFile, StepFile, UserFile, parse_task


def _user(user: UserFile) -> UserScenario:
    facts = {}
    for name, fact in (user.private_facts or {}).items():
        keywords = fact.keywords or [str(name).replace("_", " ")]
        facts[str(name)] = PrivateFact(value=fact.value, keywords=tuple(k.lower() for k in keywords), kind=fact.kind)
    return UserScenario(persona=user.persona, instructions=user.instructions, private_facts=facts,
                        opening_message=user.opening_message)


def _step(step: StepFile) -> Step:
    if step.tool is not None:
        return Step(tool=step.tool, arguments=dict(step.arguments or {}))
    return Step(say=step.say)


def _checks(checks: ChecksFile | None) -> Checks:
    if checks is None:
        return Checks(expected=None)
    expected = None if checks.expected is None else tuple(
        ExpectedChange(op=c.op, table=c.table, key=dict(c.key or {}), values=dict(c.values or {}))
        for c in checks.expected)
    judge = tuple(JudgeRule(id=r.id, rule=r.rule, evidence=tuple(r.evidence or ())) for r in checks.judge or ())
    return Checks(expected=expected, volatile=tuple(checks.volatile or ()), loose=tuple(checks.loose or ()),
                  judge=judge)


def load_task(data: Any, source: str, policy_text: str = "") -> Task:
    """Parse one task mapping; `policy_text` is the domain policy used when none is given."""
    task = parse_task(data, source)
    rows = (task.seed.rows if task.seed else None) or {}
    return Task(
        id=task.id,
        domain=task.domain,
        split=task.split,
        family=task.family or "default",
        policy=task.policy or policy_text,
        user=_user(task.user),
        seed_rows={str(table): tuple(dict(row) for row in table_rows) for table, table_rows in rows.items()},
        tools=tuple(task.tools or ()),
        reference=tuple(_step(step) for step in task.reference),
        checks=_checks(task.checks),
        turn_limit=task.turn_limit,
        source=source,
        raw=json.loads(json.dumps(data, default=str)),
    )


def read_task_file(path: Path) -> list[tuple[dict, str]]:
    """Read a YAML/JSON/JSONL file holding one task, a list of tasks, or {tasks: [...]}."""
    source = str(path)
    items = parse_task_text(read_task_text(path), source, jsonl=path.suffix == ".jsonl")
    if isinstance(items, dict) and "tasks" in items:
        items = items["tasks"]
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise TaskFormatError(source, "(file)", "holds neither a task nor a list of tasks", "write one task mapping or a list")
    return [(item, f"{source}#{i}" if len(items) > 1 else source) for i, item in enumerate(items)]


def load_task_file(path: str | Path, policy_text: str = "") -> list[Task]:
    return [load_task(item, src, policy_text) for item, src in read_task_file(Path(path))]


def load_tasks(paths: list[str | Path], policy_text: str = "") -> list[Task]:
    tasks: list[Task] = []
    for path in paths:
        tasks.extend(load_task_file(path, policy_text))
    return tasks
