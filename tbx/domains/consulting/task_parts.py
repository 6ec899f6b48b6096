"""The parts every consulting task family (tasks.py) is built from: the keywords the scripted user knows
each fact by and how the agent asks for it, the levels that are staffed, a few formatting helpers, the
identity record and a task's record. Apart from tasks.py so that both stay readable; what counts toward a
run's identity is the tasks they generate, not these files.
"""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.consulting.seed import LEVELS, Account, Row
from tbx.domains.kit import ask_for, insert_change, private_facts

KEYWORDS = {
    "client_code": ["client code"],
    "email": ["email address"],
    "invoice_number": ["invoice number"],
    "disputed_hours": ["how many hours", "disputed hours"],
    "consultant_id": ["consultant id"],
    "work_email": ["work email"],
    "corrections": ["corrected hours", "correct hours"],
    "missing_time": ["days and hours", "which days"],
    "engagement_code": ["engagement code"],
}
ASKS = {
    "client_code": "your client code", "email": "your email address", "invoice_number": "the invoice number",
    "disputed_hours": "how many hours were billed in error", "consultant_id": "your consultant ID",
    "work_email": "your work email", "corrections": "the corrected hours for each entry",
    "missing_time": "the days and hours you worked", "engagement_code": "the engagement code",
}
STAFF_LEVELS = LEVELS[:-1]
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _usd(amount: Any) -> str:
    return f"${float(amount):,.2f}"


def _dec(value: Any) -> Decimal:
    return Decimal(str(value))


def _name(person: Row) -> str:
    return f"{person['first_name']} {person['last_name']}"


def _verified(client: Row | None = None, consultant: Row | None = None) -> dict:
    """The identity record a successful verification of a billing contact (of `client`) or of a
    `consultant` leaves (checked like any write)."""
    return insert_change("identity_checks", client_id=client["id"] if client else None,
                   consultant_id=consultant["id"] if consultant else None)


def _built(persona: str, instructions: str, opening: str, facts: dict, account: Account, reference: list,
           expected: list, verified: dict | None = None) -> Built:
    """A task's record; `verified`: the identity record its reference leaves, if any (`_verified`)."""
    expected = [verified, *expected] if verified else expected
    return {"persona": persona, "instructions": instructions, "facts": facts, "opening": opening,
            "rows": account.rows, "reference": reference, "expected": expected}
