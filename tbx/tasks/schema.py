"""The keys a task file may use, at every depth, as pydantic models with `extra="forbid"`.

`unknown_key` runs the models over a raw task and turns the first key no model declares into one
error naming the file, the field (`user.privat_facts`) and the fix (did you mean `private_facts`?).
Only the keys are decided here: the fields' values are typed `Any` and checked by `tbx.tasks.loader`,
which names the fix for each field (the two should become one schema; not done yet).
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from tbx.errors import TaskFormatError


class _Keys(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FactKeys(_Keys):
    value: Any = None
    keywords: Any = None
    kind: Any = None

    @model_validator(mode="before")
    @classmethod
    def _bare_value(cls, data: Any) -> Any:  # `owner_name: Ada` is a fact with its value only
        return data if isinstance(data, dict) else {"value": data}


class UserKeys(_Keys):
    persona: Any = None
    instructions: Any = None
    private_facts: dict[Any, FactKeys] | None = None
    opening_message: Any = None


class StepKeys(_Keys):
    tool: Any = None
    arguments: Any = None
    say: Any = None


class ChangeKeys(_Keys):
    op: Any = None
    table: Any = None
    key: Any = None
    values: Any = None


class JudgeRuleKeys(_Keys):
    id: Any = None
    rule: Any = None
    evidence: Any = None


class ChecksKeys(_Keys):
    expected: list[ChangeKeys] | None = None
    volatile: Any = None
    loose: Any = None
    judge: list[JudgeRuleKeys] | None = None


class SeedKeys(_Keys):
    rows: Any = None


class TaskKeys(_Keys):
    id: Any = None
    domain: Any = None
    split: Any = None
    family: Any = None
    policy: Any = None
    user: UserKeys | None = None
    seed: SeedKeys | None = None
    tools: Any = None
    reference: list[StepKeys] | None = None
    checks: ChecksKeys | None = None
    turn_limit: Any = None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field's annotation holds (`list[StepKeys] | None` -> StepKeys), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The model whose keys `loc` (a pydantic error location without its last part) is inside."""
    model: type[BaseModel] = TaskKeys
    for part in loc:
        if isinstance(part, str) and part in model.model_fields:
            model = _model_in(model.model_fields[part].annotation) or model
    return model


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


def unknown_key(data: dict, source: str) -> TaskFormatError | None:
    """The first key of `data`, at any depth, that the task format does not have."""
    try:
        TaskKeys.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            if error["type"] != "extra_forbidden":
                continue  # a value of the wrong shape: the loader names its fix
            loc = tuple(error["loc"])
            keys = list(_model_at(loc[:-1]).model_fields)
            where = field_name(loc[:-1]) or "a task"
            return TaskFormatError(source, field_name(loc), "unknown key",
                                   f"{did_you_mean(str(loc[-1]), keys)}remove it or use the keys of {where}: "
                                   f"{', '.join(keys)}")
    return None
