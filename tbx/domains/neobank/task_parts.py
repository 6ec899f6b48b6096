"""The parts every neobank task family (tasks.py) is built from: the keywords the scripted user knows
each fact by and how the agent asks for it, the words of new payees and disputes, and one task's own rows
(a customer with a checking account, a card, payees and history) with its verification steps. Apart from
tasks.py so that both stay readable; what counts toward a run's identity is the tasks they generate, not
these files.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.kit import ask_for, call, private_facts
from tbx.domains.neobank.seed import PAYEE_NAMES, PLANS, TODAY, Bank, Row, money

KEYWORDS = {
    "customer_number": ["customer number"],
    "date_of_birth": ["date of birth", "birth date"],
    "card_last4": ["last four digits", "last 4 digits"],
    "routing_number": ["routing number"],
    "payee_account_number": ["payee's account number", "their account number"],
    "if_over_limit": ["remaining limit"],
}
ASKS = {"customer_number": "your customer number", "date_of_birth": "your date of birth",
        "card_last4": "the last four digits of your card", "routing_number": "the payee's routing number",
        "payee_account_number": "the payee's account number"}
NEW_PAYEES = ("Marisol Vega", "Oakridge Apartments", "Teodor Lang", "Pinecrest Veterinary", "Ada Okafor",
              "Brightside Movers", "Callum Reid", "Northgate Storage")
STORIES = {"unauthorized": "I never made this purchase", "duplicate": "I was charged twice for it",
           "not_received": "I paid but the order never arrived", "wrong_amount": "I was charged more than the price"}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _date(days: int) -> str:
    return (TODAY - dt.timedelta(days=days)).isoformat()


class _Task:
    """One task's own rows: a customer with a checking account, a card, payees and history."""

    def __init__(self, rng: random.Random, numbers: set[str], tier: int, plan: str | None = None,
                 kyc: str = "verified", status: str = "active", balance: Decimal | None = None):
        ids = {"customers": rng.randrange(2000, 4900), "accounts": rng.randrange(5000, 6900),
               "cards": rng.randrange(7000, 8900), "payees": rng.randrange(3000, 4900),
               "transactions": rng.randrange(100000, 190000), "transfers": rng.randrange(20000, 29000)}
        self.rng, self.bank = rng, Bank(rng, ids, numbers)
        self.owner = self.bank.customer(tier, plan or rng.choice(PLANS), kyc)
        balance = balance or Decimal(rng.randrange(800, 9000))
        self.checking = self.bank.account(self.owner, "checking", balance, status)
        self.card = self.bank.card(self.checking)
        self.bank.history(self.checking, self.card, rng.randrange(4, 8))
        if rng.random() < 0.4:
            self.bank.account(self.owner, "savings", Decimal(rng.randrange(1000, 30000)))
        self.payees = [self.bank.payee(self.owner, n) for n in rng.sample(PAYEE_NAMES, rng.randrange(2, 4))]

    def sent_today(self, total: Decimal, parts: int) -> None:
        """Earlier transfers: `total` sent today in `parts` transfers, plus one from yesterday."""
        parts = max(parts, int(total // 9000) + 1)  # each earlier transfer stays below the review threshold
        shares = [total / parts] * (parts - 1)
        shares = [s.quantize(Decimal(1)) for s in shares]
        for share in [*shares, total - sum(shares, Decimal(0))]:
            self.bank.transfer(self.checking, self.rng.choice(self.payees), share, 0)
        self.bank.transfer(self.checking, self.rng.choice(self.payees), Decimal(self.rng.randrange(50, 800)), 1)

    def verify(self, *more: str, last4: str | None = None) -> tuple[list[dict], dict]:
        """The ask + verify steps and the identity facts (verified with the given card digits)."""
        digits = last4 or self.card["last4"]
        steps = [_ask("customer_number", "date_of_birth", "card_last4", *more),
                 call("verify_customer", customer_number=self.owner["customer_number"],
                       date_of_birth=self.owner["date_of_birth"], card_last4=digits)]
        return steps, {"customer_number": self.owner["customer_number"],
                       "date_of_birth": self.owner["date_of_birth"], "card_last4": digits}

    def salary_check(self, index: int) -> tuple[list[dict], str]:
        """Every third customer wants their salary seen first: (the steps that look at the checking
        account's transactions, the sentence of the opening that asks for it); a second shape of a
        family (list_transactions after get_accounts)."""
        if index % 3 != 2:
            return [], ""
        return [call("list_transactions", account_id=self.checking["id"])], " My salary should be in by now."

    @property
    def name(self) -> str:
        return f"{self.owner['first_name']} {self.owner['last_name']}"

    @property
    def cid(self) -> int:
        return self.owner["id"]

    @property
    def identity(self) -> dict:
        """The identity record a successful verification leaves (checked like any write)."""
        return {"op": "insert", "table": "identity_checks", "values": {"customer_id": self.cid}}


def _sent(account: Row, payee_id: int, amount: Decimal) -> list[dict]:
    """Expected changes of one transfer sent today."""
    return [{"op": "update", "table": "accounts", "key": {"id": account["id"]},
             "values": {"balance": money(account["balance"] - amount)}},
            {"op": "insert", "table": "transfers", "values": {"account_id": account["id"], "payee_id": payee_id,
                                                              "amount": money(amount), "status": "completed",
                                                              "created_on": TODAY.isoformat()}},
            {"op": "insert", "table": "transactions", "values": {"account_id": account["id"], "amount": money(-amount),
                                                                 "kind": "transfer", "status": "posted"}}]
