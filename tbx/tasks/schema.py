"""The task file format: frozen pydantic models that parse one task mapping, and the one line an error becomes.

Every field is typed and strict (`turn_limit: "10"` or `true` is refused, not converted), every model forbids
the keys it does not declare, at any depth, and each field or model names the fix for a mistake in it (`Fix`,
`FIX`). `parse_task` runs the models and turns pydantic's first error into one `TaskFormatError`: the file,
the field as a dotted path (`checks.expected[0].valeus`), the problem and the fix, with "did you mean" for a
misspelt key. A missing required field is named first, then an unknown key, then the rest in file order.
`tbx.tasks.loader` turns the parsed `TaskFile` into the records the rest of tbx reads (`tbx.tasks.model`);
checks that need the domain (does the tool exist? the column?) are in `tbx.catalog`.

A task file is self-contained: it never refers to another file, so it cannot reach outside its folder. A
field given as a file name (`policy: ../shared/policy.md`, `seed: /data/rows.yaml`) would otherwise be taken
as literal text or fail later with a type error; `_inline` refuses it.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tbx.errors import TaskFormatError
from tbx.tasks.model import FACT_KINDS

DEFAULT_TURN_LIMIT = 30
ID_ALPHABET = "use letters, digits, '-', '_' and '/'"
_FILE_LIKE = re.compile(r"^(~|file:|\.{0,2}/)|/|\.(md|txt|ya?ml|jsonl?|csv|sql|sqlite)$", re.IGNORECASE)


@dataclass(frozen=True)
class Fix:
    """What to do about a mistake in the field it annotates: `Annotated[str, Fix("give a string")]`."""

    text: str


def refusal(problem: str, fix: str = "", at: str = "") -> PydanticCustomError:
    """One of our own checks as a pydantic error that keeps its problem and fix (empty: the field's `Fix`);
    `at` names a key below the error's location (`key` of a change)."""
    return PydanticCustomError("task_format", "{problem}", {"problem": problem, "fix": fix, "at": at})


def _non_blank(text: str) -> str:
    if not text.strip():
        raise refusal("empty")
    return text


def _phrases(items: list[Any] | None) -> list[Any] | None:
    for i, item in enumerate(items or ()):
        if not isinstance(item, str) or not item.strip():
            raise refusal(f"has an empty or non-string entry: [{i}] is {item!r:.40}", "use non-empty strings")
    return items


def _inline(label: str) -> BeforeValidator:
    """Refuse a one-word string that names a file (`../x.md`, `/abs/rows.yaml`, `policy.md`) where content belongs."""
    def check(value: Any) -> Any:
        text = value.strip() if isinstance(value, str) else ""
        if text and not any(c.isspace() for c in text) and _FILE_LIKE.search(text):
            fix = f"write the {label} inline in the task file"
            if label == "policy":
                fix += " (a YAML block: policy: |), or leave it out for the domain's policy.md"
            raise refusal(f"{text!r} looks like a file; a task file never refers to other files (nothing outside "
                          "its folder, no relative or absolute paths)", fix)
        return value
    return BeforeValidator(check)


def _task_id(task_id: str) -> str:
    if ".." in task_id or task_id.startswith("/"):
        raise refusal(f"{task_id!r} looks like a path", ID_ALPHABET)
    if not task_id.isprintable() or len(task_id) > 200:  # it names rows, files and lines of a report
        raise refusal(f"{task_id[:60]!r} holds a control character (or is over 200 characters)",
                      f"use printable text: {ID_ALPHABET[4:]}")
    other = [c for c in task_id if not (c.isalnum() or c in "-_/")]  # docs/tasks.md's alphabet: ids land in
    if other:  # URLs, HTML and file names
        raise refusal(f"{task_id[:60]!r} holds {other[0]!r}, outside the id alphabet",
                      f"{ID_ALPHABET} only (e.g. my_domain/refund-7)")
    return task_id


Text = Annotated[str, AfterValidator(_non_blank), Fix("give a non-empty string")]
Phrases = Annotated[list[Any], AfterValidator(_phrases)]
Names = Annotated[list[str] | None, Fix("give a list of 'table' or 'table.column'")]
Row = Annotated[dict[Any, Any], Fix("give a mapping of column to value")]
Rows = Annotated[list[Row], Fix("give a list of rows")]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    FIX: ClassVar[str] = "give a mapping"


class FactFile(_File):
    FIX = "give {value: ..., keywords: [...]}, or the value alone"
    value: Annotated[Any, Fix("give the fact's value")]
    keywords: Annotated[Phrases | None, Fix("give a list of phrases that ask for it")] = None
    kind: Annotated[Literal[FACT_KINDS] | None, Fix(f"use one of {', '.join(FACT_KINDS)}, or leave it out")] = None

    @model_validator(mode="before")
    @classmethod
    def _bare_value(cls, data: Any) -> Any:  # `owner_name: Ada` is a fact with its value only
        return data if isinstance(data, dict) else {"value": data}


class UserFile(_File):
    FIX = "give a mapping with persona, instructions, private_facts, opening_message"
    persona: Text
    instructions: Text
    private_facts: Annotated[dict[Any, FactFile] | None, Fix("map each fact name to {value: ..., keywords: [...]}")] = None
    opening_message: Text


class StepFile(_File):
    FIX = "give {tool: NAME, arguments: {...}} or {say: TEXT}"
    tool: Annotated[str | None, Fix("give the tool's name")] = None
    arguments: Annotated[dict[Any, Any] | None, Fix("give a mapping")] = None
    say: Annotated[str | None, Fix("give a string")] = None

    @model_validator(mode="after")
    def _one_kind(self) -> StepFile:
        if (self.tool is None) == (self.say is None):
            raise refusal("needs exactly one of 'tool' or 'say'", "split it into two steps" if self.tool else self.FIX)
        if self.say is not None and self.arguments:
            raise refusal("a message has no arguments", "give them to a tool step, or remove them", at="arguments")
        return self


class ChangeFile(_File):
    FIX = "give {op:, table:, key:, values:}"
    op: Annotated[Literal["insert", "update", "delete"], Fix("use insert, update or delete")]
    table: Annotated[str, Fix("name the table")]
    key: Annotated[dict[Any, Any] | None, Fix("map primary-key columns to values")] = None
    values: Annotated[dict[Any, Any] | None, Fix("map columns to values")] = None

    @model_validator(mode="after")
    def _what_it_checks(self) -> ChangeFile:
        if self.op in ("update", "delete") and not self.key:
            raise refusal(f"an {self.op} needs the row's primary key", "add key: {id: ...}", at="key")
        if self.op in ("insert", "update") and not self.values:
            raise refusal(f"an {self.op} needs the values it checks", "add values: {column: value}", at="values")
        return self


class JudgeRuleFile(_File):
    FIX = "give {id:, rule:, evidence: [...]}"
    id: Text
    rule: Text
    evidence: Annotated[Phrases | None, Fix("give a list of phrases a correct answer contains")] = None


def _some_change(changes: list[ChangeFile] | None) -> list[ChangeFile] | None:
    if changes == []:
        raise refusal("empty: a task with no expected change passes a do-nothing agent",
                      "list at least one change, or drop the key to derive them from the reference")
    return changes


def _some_step(steps: list[StepFile]) -> list[StepFile]:
    if not steps:
        raise refusal("empty", "give at least one step; a task needs a reference solution")
    return steps


class ChecksFile(_File):
    FIX = "give a mapping with expected, volatile, loose, judge"
    expected: Annotated[list[ChangeFile] | None, _inline("checks.expected"), AfterValidator(_some_change),
                        Fix("give a list of changes")] = None
    volatile: Names = None
    loose: Names = None
    judge: Annotated[list[JudgeRuleFile] | None, Fix("give a list")] = None


class SeedFile(_File):
    FIX = "give {rows: {table: [row, ...]}}"
    rows: Annotated[dict[Any, Rows] | None, _inline("seed.rows"), Fix("map table names to lists of rows")] = None


class TaskFile(_File):
    """One task as a file holds it (docs/tasks.md, "The task format")."""

    FIX = "a task is a mapping of fields"
    id: Annotated[Text, AfterValidator(_task_id)]
    domain: Text
    split: Annotated[Literal["bench", "train"], Fix("use 'bench' (evaluation) or 'train' (training pool)")]
    family: Annotated[str | None, Fix("give the family's name as a string, or leave it out")] = None
    policy: Annotated[str | None, _inline("policy"), Fix("give the policy text as a string")] = None
    user: Annotated[UserFile, _inline("user")]
    seed: Annotated[SeedFile | None, _inline("seed")] = None
    tools: Annotated[list[str] | None, _inline("tools"), Fix("list the tool names the agent may call")] = None
    reference: Annotated[list[StepFile], _inline("reference"), AfterValidator(_some_step),
                         Fix("give a list of steps, each {tool:, arguments:} or {say:}")]
    checks: Annotated[ChecksFile | None, _inline("checks")] = None
    turn_limit: Annotated[int, Field(ge=1), Fix("give a positive integer")] = DEFAULT_TURN_LIMIT


REQUIRED = tuple(name for name, info in TaskFile.model_fields.items() if info.is_required())


def parse_task(data: Any, source: str) -> TaskFile:
    """`data` as a `TaskFile`, or the one-line `TaskFormatError` of its first mistake."""
    try:
        return TaskFile.model_validate(data)
    except ValidationError as exc:
        raise task_format_error(exc, source) from None


# --- pydantic's error as the one line: file, field, problem, fix ----------------------------------------------

_EXPECTED = {"string_type": "a string", "int_type": "an integer", "list_type": "a list", "dict_type": "a mapping",
             "model_type": "a mapping", "model_attributes_type": "a mapping"}


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def _declared(annotation: Any, fix: str) -> tuple[Any, str]:
    """`annotation` without `| None` and `Annotated`, and the fix it declares (`Fix`, or a model's `FIX`)."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) is Annotated:
        annotation, *metadata = typing.get_args(annotation)
        fix = next((m.text for m in metadata if isinstance(m, Fix)), fix)
        annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, _File):
        fix = annotation.FIX
    return annotation, fix


def _walk(loc: tuple[int | str, ...]) -> tuple[Any, str]:
    """The type an error location reaches from `TaskFile`, and the fix of the nearest part that names one."""
    here, fix = _declared(TaskFile, "")
    for part in loc:
        if isinstance(here, type) and issubclass(here, _File):
            info = here.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                break
            fix = next((m.text for m in info.metadata if isinstance(m, Fix)), fix)
            here = info.annotation
        elif typing.get_origin(here) in (list, dict):
            here = typing.get_args(here)[-1]  # a list's item, a mapping's value: `part` is its index or key
        else:
            break
        here, fix = _declared(here, fix)
    return here, fix


def field_name(loc: tuple[int | str, ...]) -> str:
    """('checks', 'expected', 0, 'valeus') -> 'checks.expected[0].valeus'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def did_you_mean(name: str, choices: list[str]) -> str:
    """`did you mean 'CLOSEST'? Otherwise ` when a choice is close to the misspelt `name`; empty otherwise."""
    close = difflib.get_close_matches(name, choices, n=1)
    return f"did you mean '{close[0]}'? Otherwise " if close else ""


def _unknown_key(loc: tuple[int | str, ...], source: str) -> TaskFormatError:
    keys = list(_walk(loc[:-1])[0].model_fields)
    where = field_name(loc[:-1]) or "a task"
    return TaskFormatError(source, field_name(loc), "unknown key", f"{did_you_mean(str(loc[-1]), keys)}remove it "
                           f"or use the keys of {where}: {', '.join(keys)}")


def _rank(error: Any) -> int:
    """Which error is named first: a missing required field of the task, then an unknown key, then the rest."""
    if error["type"] == "missing" and len(error["loc"]) == 1:
        return 0
    return 1 if error["type"] == "extra_forbidden" else 2


def task_format_error(exc: ValidationError, source: str) -> TaskFormatError:
    """The first of pydantic's errors as the one line: file, field (dotted path), problem and fix."""
    error = min(exc.errors(include_url=False), key=_rank)
    loc, kind, ctx, value = tuple(error["loc"]), error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(loc, source)
    fix = _walk(loc)[1]
    if kind == "task_format":
        return TaskFormatError(source, field_name(loc + ((ctx["at"],) if ctx["at"] else ())) or "(task)",
                               ctx["problem"], ctx["fix"] or fix)
    if kind == "missing":
        key = loc[-1]
        extra = f"required fields: {', '.join(REQUIRED)}" if len(loc) == 1 else fix
        return TaskFormatError(source, field_name(loc), "missing", f"add '{key}:' ({extra})")
    if kind in _EXPECTED:
        problem = "is empty (null)" if value is None else \
            f"expected {_EXPECTED[kind]}, got {type(value).__name__} {value!r:.60}"
    else:  # a value outside its range or its choices
        problem = f"is {value!r:.60}"
    return TaskFormatError(source, field_name(loc) or "(task)", problem, fix)
