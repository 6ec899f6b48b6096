"""The task format as typed, frozen records.

A task = a seeded database, the tools the agent may call, a simulated user with private facts,
the agent-facing policy, a reference solution and the checks on the terminal database state.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["bench", "train", "test"]  # test: τ²-bench's test split (tbx/tau2)
ChangeOp = Literal["insert", "update", "delete"]
# What sort of value a private fact is; it decides which requests name it ("when" asks for a date).
FACT_KINDS = ("identifier", "date", "name", "amount", "hours", "time", "email", "phone", "address", "postal",
              "choice")


@dataclass(frozen=True)
class PrivateFact:
    """Something only the user knows; the scripted user says it when the agent asks for it (by one
    of its keywords, or in other words: `tbx.users.facts`)."""

    value: Any
    keywords: tuple[str, ...]
    kind: str | None = None  # one of FACT_KINDS; None: inferred from the fact's name and value


@dataclass(frozen=True)
class Simulation:
    """How another benchmark's own user simulator plays a scenario (τ²-bench, tbx/tau2/user.py): the LLM user
    gets exactly this system prompt, answers the agent's fixed first message, ends the talk at any of the
    stop tokens, and is not held to tbx's private-fact contract (its scenarios hold no private facts)."""

    system_prompt: str
    agent_greeting: str  # the agent's first message, which the user answers to open the talk
    stop_tokens: tuple[str, ...]


@dataclass(frozen=True)
class UserScenario:
    persona: str
    instructions: str  # the user's goal, in the user's words; never shown to the agent
    private_facts: dict[str, PrivateFact]
    opening_message: str
    simulation: Simulation | None = None  # None: tbx's own users (scripted, or the audited LLM user)


@dataclass(frozen=True)
class Step:
    """One step of the reference solution: a tool call or a message to the user."""

    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    say: str | None = None


@dataclass(frozen=True)
class ExpectedChange:
    """A change the terminal state must contain.

    insert: some new row of `table` whose columns equal `values` (other columns are free).
    update: the row at primary key `key` now has `values`; no other column of it changed.
    delete: the row at `key` is gone.
    """

    op: ChangeOp
    table: str
    key: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f" {self.key}" if self.key else ""
        what = f" {self.values}" if self.values else ""
        return f"{self.op} {self.table}{where}{what}"


@dataclass(frozen=True)
class JudgeRule:
    """A narrow natural-language rule a database cannot express; decided by the judge."""

    id: str
    rule: str
    evidence: tuple[str, ...] = ()  # phrases a correct agent message contains (e.g. "$1,450.00")


@dataclass(frozen=True)
class Checks:
    expected: tuple[ExpectedChange, ...] | None  # None: derived by replaying the reference
    volatile: tuple[str, ...] = ()  # "table" or "table.column": changes there are ignored
    loose: tuple[str, ...] = ()  # "table.column": not compared when expectations are derived
    judge: tuple[JudgeRule, ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    domain: str
    split: Split
    family: str
    policy: str  # the agent-facing policy text (the domain's policy.md unless overridden)
    user: UserScenario
    seed_rows: dict[str, tuple[dict[str, Any], ...]]  # rows added to the domain's base seed
    tools: tuple[str, ...]  # tools the agent may call
    reference: tuple[Step, ...]
    checks: Checks
    turn_limit: int
    source: str  # file (or generator) the task came from, for error messages
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def content_hash(self) -> str:
        """Hash of the task's content (not its source path): stored with every episode."""
        return hash_json(self.raw)

    @property
    def seed_hash(self) -> str:
        return hash_json({"domain": self.domain, "rows": self.raw.get("seed", {})})


def hash_json(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
