"""The judge interface for narrow rules a database cannot express.

A judge reads the transcript (never the database) and answers one rule with a strict verdict.
With no judge configured, a task that has judge rules is excluded and counted, never passed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from tbx.messages import Message, Usage
from tbx.tasks.model import JudgeRule


@dataclass(frozen=True)
class JudgeVerdict:
    rule_id: str
    passed: bool
    reason: str
    usage: Usage = field(default_factory=Usage)


class Judge(ABC):
    name: str = "judge"
    model_name: str = ""

    @abstractmethod
    async def decide(self, rule: JudgeRule, transcript: Sequence[Message]) -> JudgeVerdict:
        """Decide one rule. Raise `VerifierError` when the judge cannot answer."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release endpoints."""
