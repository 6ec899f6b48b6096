"""The evidence judge decides a rule from the agent's own words only."""

import asyncio

import pytest

from tbx.errors import VerifierError
from tbx.grading.judge import EvidenceJudge
from tbx.messages import Message
from tbx.tasks.model import JudgeRule

RULE = JudgeRule("told_amount", "The agent told the user the refund amount.", evidence=("$1,450.00",))


def decide(rule, *messages):
    return asyncio.run(EvidenceJudge().decide(rule, list(messages)))


def test_passes_when_the_agent_said_the_evidence():
    verdict = decide(RULE, Message("user", "How much?"), Message("assistant", "You get $1,450.00 back."))
    assert verdict.passed and verdict.rule_id == "told_amount"


def test_thousands_separators_do_not_matter():
    # "$1,450.00" may be said as "$1450.00"; a longer or other number never stands in for it
    assert decide(RULE, Message("assistant", "You get $1450.00 back.")).passed
    plain = JudgeRule("told_amount", "The agent told the user the refund amount.", evidence=("$58774.84",))
    assert decide(plain, Message("assistant", "The credit is $58,774.84.")).passed
    assert not decide(RULE, Message("assistant", "You get $14,500.00 back.")).passed
    whole = JudgeRule("told_amount", "The agent told the user the refund amount.", evidence=("$950",))
    assert decide(whole, Message("assistant", "$950.00 is refunded.")).passed
    assert not decide(whole, Message("assistant", "$9500 is refunded.")).passed
    assert not decide(whole, Message("assistant", "$950.50 is refunded.")).passed


def test_the_user_saying_it_does_not_count():
    verdict = decide(RULE, Message("user", "Is it $1,450.00?"), Message("assistant", "Done."))
    assert not verdict.passed and "$1,450.00" in verdict.reason


def test_a_rule_without_evidence_cannot_be_decided():
    with pytest.raises(VerifierError, match="declares no evidence"):
        decide(JudgeRule("x", "Be polite."), Message("assistant", "Hello"))
