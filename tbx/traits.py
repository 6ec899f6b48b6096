"""What a pluggable component is: the traits a policy, user simulator or judge declares, read from the class
or factory its `_target_` names, imported and not built.

The code that names, plans and checks a run needs a few facts about the components a config picks: does
the policy play the `model` group's model (its engine and endpoint are checked, its prices billed), is it a
reference that plays each task's own steps (no model: the model's settings leave the run's identity, and
the harness sets the pace), is the user scripted, does a user or judge call an LLM at its group's endpoint.
Each component says so itself, as class attributes (or attributes of its factory function); what it does
not declare is False. A user's own policy from another package is read exactly like a bundled one, and the
`_target_` string is only ever imported, never matched.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from tbx.errors import ConfigError


@dataclass(frozen=True)
class Traits:
    """The declared traits of one component (all False unless it declares them)."""

    plays_model: bool = False  # a policy whose turns come from the `model` group's model, served or called by tbx
    is_reference: bool = False  # a policy that plays each task's own steps, no model (oracle, null, replay)
    is_scripted: bool = False  # a user simulator that answers at once from the task's facts, no service
    needs_llm: bool = False  # a user simulator or judge that calls an LLM at its group's `endpoint`


TRAITS = tuple(spec.name for spec in fields(Traits))


def declare(component: Any, **traits: bool) -> Any:
    """Set `traits` on `component` (a class or a factory function) and return it; a decorator too:
    `@declare(plays_model=True)` is `declare(function, plays_model=True)`."""
    unknown = set(traits) - set(TRAITS)
    if unknown:
        raise TypeError(f"unknown traits {sorted(unknown)}; traits are {', '.join(TRAITS)}")
    for name, value in traits.items():
        setattr(component, name, value)
    return component


def declares(**traits: bool) -> Any:
    """`declare` as a decorator: `@declares(plays_model=True)` over a class or a factory function."""
    return functools.partial(declare, **traits)


def component(target: str, group: str) -> Any:
    """The class or factory `target` names, imported (not built); an import that fails is a ConfigError
    naming the group."""
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception as exc:
        raise ConfigError(f"conf/{group}", f"{group}._target_", f"cannot import {target!r} ({exc})",
                          f"pick an option from conf/{group}/ or give an importable class") from exc


@functools.cache
def traits_of(target: str | None, group: str) -> Traits:
    """The traits the component `target` declares (none for `None`, the judge group's "no judge")."""
    if target is None:
        return Traits()
    found = component(target, group)
    return Traits(**{name: bool(getattr(found, name, False)) for name in TRAITS})
