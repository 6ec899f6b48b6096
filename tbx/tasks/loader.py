"""Load and validate tasks from YAML/JSON files or dicts.

Every mistake names the file, the field and the fix. Checks that need the domain (does the
tool exist? the table?) happen in `tbx.catalog`, which knows the domains.

A task file is self-contained: it never refers to another file, so it cannot reach outside its
folder. A field given as a file name (`policy: ../shared/policy.md`, `seed: /data/rows.yaml`)
would otherwise be taken as literal text or fail later with a type error; it is refused here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tbx.errors import TaskFormatError
from tbx.tasks.files import parse_task_text, read_task_text
from tbx.tasks.model import FACT_KINDS as KINDS
from tbx.tasks.model import Checks, ExpectedChange, JudgeRule, PrivateFact, Step, Task, UserScenario
from tbx.tasks.schema import unknown_key

REQUIRED = ("id", "domain", "split", "user", "reference")
DEFAULT_TURN_LIMIT = 30
INLINE = ("policy", "user", "seed", "reference", "checks", "tools")  # fields whose content lives in the task
_FILE_LIKE = re.compile(r"^(~|file:|\.{0,2}/)|/|\.(md|txt|ya?ml|jsonl?|csv|sql|sqlite)$", re.IGNORECASE)


def _fail(source: str, field: str, problem: str, fix: str) -> TaskFormatError:
    return TaskFormatError(source, field, problem, fix)


def _expect(value: Any, kind: type | tuple[type, ...], source: str, field: str, fix: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(source, field, f"expected {names}, got {type(value).__name__} {value!r:.60}", fix)
    return value


def _text(data: dict, key: str, source: str, prefix: str, required: bool = True) -> str:
    field = f"{prefix}{key}"
    if key not in data or data[key] is None:
        if required:
            raise _fail(source, field, "missing", f"add '{key}:' with a non-empty string")
        return ""
    value = _expect(data[key], str, source, field, "give a string")
    if required and not value.strip():
        raise _fail(source, field, "empty", f"give '{key}' a non-empty string")
    return value


def _refuse_file_reference(value: Any, source: str, field: str) -> None:
    """A one-word string that names a file (`../x.md`, `/abs/rows.yaml`, `policy.md`) where content belongs."""
    text = value.strip() if isinstance(value, str) else ""
    if not text or any(c.isspace() for c in text) or not _FILE_LIKE.search(text):
        return
    fix = f"write the {field} inline in the task file"
    if field == "policy":
        fix += " (a YAML block: policy: |), or leave it out for the domain's policy.md"
    raise _fail(source, field, f"{text!r} looks like a file; a task file never refers to other files (nothing "
                "outside its folder, no relative or absolute paths)", fix)


def _user(data: Any, source: str) -> UserScenario:
    data = _expect(data, dict, source, "user", "give a mapping with persona, instructions, private_facts, opening_message")
    facts_raw = _expect(data.get("private_facts", {}) or {}, dict, source, "user.private_facts",
                        "map each fact name to {value: ..., keywords: [...]}")
    facts: dict[str, PrivateFact] = {}
    for name, fact in facts_raw.items():
        field = f"user.private_facts.{name}"
        if not isinstance(fact, dict):
            fact = {"value": fact, "keywords": [str(name).replace("_", " ")]}
        if "value" not in fact:
            raise _fail(source, f"{field}.value", "missing", "give the fact's value")
        keywords = fact.get("keywords") or [str(name).replace("_", " ")]
        keywords = _expect(keywords, list, source, f"{field}.keywords", "give a list of phrases that ask for it")
        if not all(isinstance(k, str) and k.strip() for k in keywords):
            raise _fail(source, f"{field}.keywords", "has an empty or non-string entry", "use non-empty strings")
        kind = fact.get("kind")
        if kind is not None and kind not in KINDS:
            raise _fail(source, f"{field}.kind", f"is {kind!r}", f"use one of {', '.join(KINDS)}, or leave it out")
        facts[str(name)] = PrivateFact(value=fact["value"], keywords=tuple(k.lower() for k in keywords), kind=kind)
    return UserScenario(
        persona=_text(data, "persona", source, "user."),
        instructions=_text(data, "instructions", source, "user."),
        private_facts=facts,
        opening_message=_text(data, "opening_message", source, "user."),
    )


def _steps(data: Any, source: str) -> tuple[Step, ...]:
    data = _expect(data, list, source, "reference", "give a list of steps, each {tool:, arguments:} or {say:}")
    if not data:
        raise _fail(source, "reference", "empty", "give at least one step; a task needs a reference solution")
    steps = []
    for i, step in enumerate(data):
        field = f"reference[{i}]"
        step = _expect(step, dict, source, field, "give {tool: NAME, arguments: {...}} or {say: TEXT}")
        if ("tool" in step) == ("say" in step):
            raise _fail(source, field, "needs exactly one of 'tool' or 'say'", "split it into two steps")
        if "tool" in step:
            _expect(step["tool"], str, source, f"{field}.tool", "give the tool's name")
            args = _expect(step.get("arguments") or {}, dict, source, f"{field}.arguments", "give a mapping")
            steps.append(Step(tool=step["tool"], arguments=dict(args)))
        else:
            steps.append(Step(say=_expect(step["say"], str, source, f"{field}.say", "give a string")))
    return tuple(steps)


def _change(data: Any, source: str, field: str) -> ExpectedChange:
    data = _expect(data, dict, source, field, "give {op:, table:, key:, values:}")
    op = data.get("op")
    if op not in ("insert", "update", "delete"):
        raise _fail(source, f"{field}.op", f"is {op!r}", "use insert, update or delete")
    table = _expect(data.get("table"), str, source, f"{field}.table", "name the table")
    key = _expect(data.get("key") or {}, dict, source, f"{field}.key", "map primary-key columns to values")
    values = _expect(data.get("values") or {}, dict, source, f"{field}.values", "map columns to values")
    if op in ("update", "delete") and not key:
        raise _fail(source, f"{field}.key", f"an {op} needs the row's primary key", "add key: {id: ...}")
    if op in ("insert", "update") and not values:
        raise _fail(source, f"{field}.values", f"an {op} needs the values it checks", "add values: {column: value}")
    return ExpectedChange(op=op, table=table, key=dict(key), values=dict(values))


def _checks(data: Any, source: str) -> Checks:
    data = _expect(data or {}, dict, source, "checks", "give a mapping with expected, volatile, loose, judge")
    expected = None
    if data.get("expected") is not None:
        raw = _expect(data["expected"], list, source, "checks.expected", "give a list of changes")
        if not raw:
            raise _fail(source, "checks.expected", "empty: a task with no expected change passes a do-nothing agent",
                        "list at least one change, or drop the key to derive them from the reference")
        expected = tuple(_change(c, source, f"checks.expected[{i}]") for i, c in enumerate(raw))
    judge = []
    for i, rule in enumerate(_expect(data.get("judge") or [], list, source, "checks.judge", "give a list")):
        rule = _expect(rule, dict, source, f"checks.judge[{i}]", "give {id:, rule:, evidence: [...]}")
        evidence = _expect(rule.get("evidence") or [], list, source, f"checks.judge[{i}].evidence",
                           "give a list of phrases a correct answer contains")
        if not all(isinstance(e, str) and e.strip() for e in evidence):
            raise _fail(source, f"checks.judge[{i}].evidence", "has an empty or non-string entry", "use strings")
        judge.append(JudgeRule(id=_text(rule, "id", source, f"checks.judge[{i}]."),
                               rule=_text(rule, "rule", source, f"checks.judge[{i}]."), evidence=tuple(evidence)))
    names = {}
    for key in ("volatile", "loose"):
        items = _expect(data.get(key) or [], list, source, f"checks.{key}", "give a list of 'table' or 'table.column'")
        for i, item in enumerate(items):
            _expect(item, str, source, f"checks.{key}[{i}]", "give 'table' or 'table.column'")
        names[key] = tuple(items)
    return Checks(expected=expected, volatile=names["volatile"], loose=names["loose"], judge=tuple(judge))


def load_task(data: Any, source: str, policy_text: str = "") -> Task:
    """Validate one task mapping; `policy_text` is the domain policy used when none is given."""
    data = _expect(data, dict, source, "(task)", "a task is a mapping of fields")
    for key in REQUIRED:
        if key not in data:
            raise _fail(source, key, "missing", f"add '{key}:' (required fields: {', '.join(REQUIRED)})")
    unknown = unknown_key(data, source)  # at any depth (tbx.tasks.schema)
    if unknown is not None:
        raise unknown
    for key in INLINE:
        _refuse_file_reference(data.get(key), source, key)
    seed_data = data.get("seed")
    if isinstance(seed_data, dict):
        _refuse_file_reference(seed_data.get("rows"), source, "seed.rows")
    if isinstance(data.get("checks"), dict):
        _refuse_file_reference(data["checks"].get("expected"), source, "checks.expected")
    task_id = _text(data, "id", source, "")
    if ".." in task_id or task_id.startswith("/"):
        raise _fail(source, "id", f"{task_id!r} looks like a path", "use letters, digits, '-', '_' and '/'")
    if not task_id.isprintable() or len(task_id) > 200:  # it names rows, files and lines of a report
        raise _fail(source, "id", f"{task_id[:60]!r} holds a control character (or is over 200 characters)",
                    "use printable text: letters, digits, '-', '_' and '/'")
    other = [c for c in task_id if not (c.isalnum() or c in "-_/")]  # docs/tasks.md's alphabet: ids land in
    if other:  # URLs, HTML and file names
        raise _fail(source, "id", f"{task_id[:60]!r} holds {other[0]!r}, outside the id alphabet",
                    "use letters, digits, '-', '_' and '/' only (e.g. my_domain/refund-7)")
    split = data["split"]
    if split not in ("bench", "train"):
        raise _fail(source, "split", f"is {split!r}", "use 'bench' (evaluation) or 'train' (training pool)")
    seed = _expect(data.get("seed") or {}, dict, source, "seed", "give {rows: {table: [row, ...]}}")
    rows = _expect(seed.get("rows") or {}, dict, source, "seed.rows", "map table names to lists of rows")
    seed_rows = {}
    for table, table_rows in rows.items():
        table_rows = _expect(table_rows, list, source, f"seed.rows.{table}", "give a list of rows")
        for i, row in enumerate(table_rows):
            _expect(row, dict, source, f"seed.rows.{table}[{i}]", "give a mapping of column to value")
        seed_rows[str(table)] = tuple(dict(r) for r in table_rows)
    tools = _expect(data.get("tools") or [], list, source, "tools", "list the tool names the agent may call")
    turn_limit = data.get("turn_limit", DEFAULT_TURN_LIMIT)
    if not isinstance(turn_limit, int) or isinstance(turn_limit, bool) or turn_limit < 1:
        raise _fail(source, "turn_limit", f"is {turn_limit!r}", "give a positive integer")
    policy = _expect(data.get("policy") or policy_text, str, source, "policy", "give the policy text as a string")
    return Task(
        id=task_id,
        domain=_text(data, "domain", source, ""),
        split=split,
        family=data.get("family") or "default",
        policy=policy,
        user=_user(data["user"], source),
        seed_rows=seed_rows,
        tools=tuple(tools),
        reference=_steps(data["reference"], source),
        checks=_checks(data.get("checks"), source),
        turn_limit=turn_limit,
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
        raise _fail(source, "(file)", "holds neither a task nor a list of tasks", "write one task mapping or a list")
    return [(item, f"{source}#{i}" if len(items) > 1 else source) for i, item in enumerate(items)]


def load_task_file(path: str | Path, policy_text: str = "") -> list[Task]:
    return [load_task(item, src, policy_text) for item, src in read_task_file(Path(path))]


def load_tasks(paths: list[str | Path], policy_text: str = "") -> list[Task]:
    tasks: list[Task] = []
    for path in paths:
        tasks.extend(load_task_file(path, policy_text))
    return tasks
