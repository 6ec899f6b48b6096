"""The task records of a training domain (helpdesk, hr_payroll, clinic), built the same way for
each: every family builds its instances from one seeded generator; easy families get more
instances, a short turn limit and their own short tool list (so small models see few tools)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
EASY_TURN_LIMIT, TURN_LIMIT = 10, 30


def identity_records(reference: Sequence[dict], tool: str, person: str, people: Iterable[dict]) -> list[dict]:
    """The identity records the reference's verifications leave: an insert into `identity_checks`
    for each person whose ID (argument and column `person`) and date of birth, as passed to `tool`,
    match a row of `people`, which is what the tool checks; a failed verification leaves none."""
    births = {row["id"]: row["date_of_birth"] for row in people}
    verified = []
    for step in reference:
        arguments = step.get("arguments", {})
        if step.get("tool") == tool and births.get(arguments[person]) == arguments["date_of_birth"]:
            record = {"op": "insert", "table": "identity_checks", "values": {person: arguments[person]}}
            if record not in verified:
                verified.append(record)
    return verified


def training_tasks(domain: str, families: Mapping[str, Callable[[random.Random, int], Built]], seed: int,
                   instances: tuple[int, int], easy_tools: Sequence[str]) -> list[dict]:
    """All tasks of `domain` for `seed` (same seed -> same tasks); `instances` = (easy, other) per family."""
    rng = random.Random(seed)
    tasks = []
    for family, build in families.items():
        easy = family.endswith("_easy")
        for index in range(instances[0] if easy else instances[1]):
            built = build(rng, index)
            tasks.append({
                "id": f"{domain}/{family}/s{seed}-{index:02d}", "domain": domain, "split": "train",
                "family": family,
                "user": {"persona": built["persona"], "instructions": built["instructions"],
                         "private_facts": built["facts"], "opening_message": built["opening"]},
                "seed": {"rows": {t: r for t, r in built["rows"].items() if r}},
                "reference": built["reference"],
                "checks": {"expected": built["expected"]},
                "turn_limit": EASY_TURN_LIMIT if easy else TURN_LIMIT,
                **({"tools": list(easy_tools)} if easy else {}),
            })
    return tasks
