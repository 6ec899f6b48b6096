"""The judge interface for narrow rules a database cannot express.

A judge reads the transcript (never the database) and answers one rule with a strict verdict.
With no judge configured, a task that has judge rules is excluded and counted, never passed.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from tbx.errors import VerifierError
from tbx.messages import Message
from tbx.records import JudgeVerdict
from tbx.tasks.model import JudgeRule


class Judge(ABC):
    name: str = "judge"
    model_name: str = ""

    @abstractmethod
    async def decide(self, rule: JudgeRule, transcript: Sequence[Message]) -> JudgeVerdict:
        """Decide one rule. Raise `VerifierError` when the judge cannot answer."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release endpoints."""


_GROUPED = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # a thousands separator


def _plain(text: str) -> str:
    """Lower case, digits without thousands separators: "$1,011.88" and "$1011.88" read the same."""
    return _GROUPED.sub("", text.lower())


def _said(phrase: str, said: str) -> bool:
    """Whether `phrase` stands in `said`, a number in it not running on into a longer or other one:
    "$950" is in "$950.00" but not in "$9500" or "$950.50"."""
    return re.search(re.escape(_plain(phrase)) + r"(?!\d|\.\d*[1-9])", said) is not None


class EvidenceJudge(Judge):
    """A deterministic judge, the default: a rule passes iff every evidence phrase the task declares
    appears in some assistant message (case-insensitive; "$1,450" and "$1450" are the same).
    Weaker than an LLM judge (it cannot tell a statement from a negation, nor a paraphrase); it
    decides offline, with no endpoint. A rule with no evidence cannot be decided: `VerifierError`."""

    name = "evidence"

    @classmethod
    def from_config(cls, judge: object) -> EvidenceJudge:
        return cls()

    async def decide(self, rule: JudgeRule, transcript: Sequence[Message]) -> JudgeVerdict:
        if not rule.evidence:
            raise VerifierError(f"rule {rule.id} declares no evidence; the evidence judge cannot decide it")
        said = _plain(" ".join(m.content for m in transcript if m.role == "assistant"))
        missing = [e for e in rule.evidence if not _said(e, said)]
        if missing:
            return JudgeVerdict(rule.id, False, f"the agent never said {missing}")
        return JudgeVerdict(rule.id, True, f"the agent said {list(rule.evidence)}")
