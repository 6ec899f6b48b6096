"""Domains: each a folder with schema.py, seed.py, tools.py, tasks.py and policy.md.

A domain is found by name (a task's `domain` field) through this registry and imported lazily.
No domain imports another.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData

from tbx.errors import TaskFormatError
from tbx.tools.declare import ToolSpec, collect_tools


@dataclass(frozen=True)
class Domain:
    name: str
    split: str  # "bench" or "train": which split the domain's bundled tasks belong to
    metadata: MetaData
    tools: tuple[ToolSpec, ...]
    policy: str
    base_rows: Callable[[], dict[str, list[dict[str, Any]]]]  # deterministic base seed
    generate_tasks: Callable[[int], list[dict[str, Any]]]  # seed → task mappings
    distractors: tuple[dict[str, Any], ...]  # write calls no task expects (mutation tests)
    volatile: tuple[str, ...] = ()  # tables / table.columns every task of the domain ignores
    # tables of records a policy step leaves (identity_checks): checked where a task expects a row
    # there, ignored where it expects none (a task that needs no verification, a file written before)
    records: tuple[str, ...] = ()

    def tool(self, name: str) -> ToolSpec:
        for spec in self.tools:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.tools)

    def __reduce__(self) -> tuple:
        """Pickled by name: a worker process finds the same domain in its own registry."""
        return get_domain, (self.name,)


def build_domain(package: str, split: str, volatile: tuple[str, ...] = (),
                 distractors: tuple[dict[str, Any], ...] = (), records: tuple[str, ...] = ()) -> Domain:
    """Assemble a domain from its folder's modules (called from the domain's __init__)."""
    schema = importlib.import_module(f"{package}.schema")
    seed = importlib.import_module(f"{package}.seed")
    tools = importlib.import_module(f"{package}.tools")
    tasks = importlib.import_module(f"{package}.tasks")
    folder = Path(importlib.import_module(package).__file__).parent
    return Domain(
        name=package.rsplit(".", 1)[-1],
        split=split,
        metadata=schema.metadata,
        tools=collect_tools(tools),
        policy=(folder / "policy.md").read_text(),
        base_rows=seed.base_rows,
        generate_tasks=tasks.generate_tasks,
        distractors=distractors,
        volatile=volatile,
        records=records,
    )


def domain_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


@cache
def get_domain(name: str) -> Domain:
    if name not in domain_names():
        raise TaskFormatError("(task)", "domain", f"unknown domain {name!r}",
                              f"use one of {domain_names()} or add a folder tbx/domains/{name}/")
    return importlib.import_module(f"tbx.domains.{name}").DOMAIN


def source_hash(*objects: object) -> str:
    """Hash of the source code of modules/functions: versions a domain's tools and the grader in
    the prepared-task cache and results."""
    digest = hashlib.sha256()
    for obj in objects:
        digest.update(inspect.getsource(obj).encode())
    return digest.hexdigest()[:16]
