"""Checking a tool call's arguments against the tool's signature, before the tool runs.

Every call passes through here, whether it came over MCP or straight from a replay, so both paths
answer a bad call with the same short message the agent can act on ("Error: invalid arguments for
find_bookings: employee_id: input should be a valid integer, unable to parse string as an integer
(given 'abc')"). Coercion follows pydantic's lax mode, as the MCP SDK's own argument model does
("5" becomes 5 for an `int`, 5 stays an error for a `str`), with three limits the SDK does not
set, because the database cannot hold what they refuse: integers fit in 64 bits, numbers are
finite, and text is valid Unicode without NUL characters. Unknown arguments are refused rather
than dropped, so a misspelt optional argument never goes unnoticed. A closed choice (a `Literal`
of strings) ignores case and surrounding spaces, as the domains' own checks always did, and hands
the tool the choice as spelt in its signature.
"""

from __future__ import annotations

import inspect
import math
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from tbx.tools.declare import ToolFailure, ToolSpec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SHOWN_CHARS = 40  # how much of a refused value the message quotes


class _Arguments(BaseModel):
    """Base of every tool's argument model: an argument the tool does not take is an error."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)


def _plain_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character, which text cannot hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"contains an unpaired surrogate ({value[exc.start]!r}), which is not valid text") from None
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _one_of(choices: tuple[str, ...]) -> AfterValidator:
    spelt = {choice.strip().casefold(): choice for choice in choices}

    def pick(value: str) -> str:
        try:
            return spelt[value.strip().casefold()]
        except KeyError:
            raise PydanticCustomError("choice", "must be one of {choices}", {"choices": ", ".join(choices)}) from None

    return AfterValidator(pick)


def _checked(annotation: Any) -> Any:
    """The annotation with the limits the database needs added (see the module docstring)."""
    if annotation is inspect.Parameter.empty:
        return Any
    if annotation is int:
        return Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
    if annotation is float:
        return Annotated[float, AfterValidator(_finite)]
    if annotation is str:
        return Annotated[str, AfterValidator(_plain_text)]
    choices = get_args(annotation) if get_origin(annotation) is Literal else ()
    if choices and all(isinstance(choice, str) for choice in choices):
        return Annotated[str, AfterValidator(_plain_text), _one_of(choices)]
    return annotation


@cache
def argument_model(spec: ToolSpec) -> type[BaseModel]:
    """A pydantic model of `spec`'s arguments (all parameters after `db`), built once per tool.
    Fields are named `arg_<name>` with the argument's name as alias, so no argument name can
    shadow a `BaseModel` attribute."""
    parameters = list(inspect.signature(spec.fn, eval_str=True).parameters.values())[1:]
    fields: dict[str, Any] = {}
    for p in parameters:
        kind = Annotated[_checked(p.annotation), Field(alias=p.name)]
        fields[f"arg_{p.name}"] = (kind, ...) if p.default is inspect.Parameter.empty else (kind, p.default)
    return create_model(f"{spec.name}_arguments", __base__=_Arguments, **fields)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _problem(spec: ToolSpec, error: dict[str, Any]) -> str:
    """One pydantic error as 'name: what is wrong', in words the agent can act on."""
    name = ".".join(str(part) for part in error["loc"]) or "arguments"
    kind = error["type"]
    if kind == "missing":
        return f"{name}: required argument is missing"
    if kind == "extra_forbidden":
        return f"{_shown(error['loc'][0]) if error['loc'] else name}: unknown argument " \
               f"(takes {', '.join(spec.argument_names) or 'no arguments'})"
    if kind == "choice":
        return f"{name} {error['msg']}, not {_shown(error['input'])}"
    if name == "arguments":
        return f"arguments must be an object of name: value (given {_shown(error['input'])})"
    message = error["msg"].removeprefix("Value error, ")
    return f"{name}: {message[0].lower()}{message[1:]} (given {_shown(error['input'])})"


def validate_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The keyword arguments to call `spec.fn` with, coerced to its type hints; a `ToolFailure`
    naming every argument that is missing, unknown or of the wrong type otherwise."""
    model = argument_model(spec)
    try:
        parsed = model.model_validate(arguments)
    except ValidationError as exc:
        problems = [_problem(spec, error) for error in exc.errors(include_url=False)]
        raise ToolFailure(f"invalid arguments for {spec.name}: {'; '.join(problems)}") from None
    return {field.alias: getattr(parsed, name) for name, field in model.model_fields.items()}
