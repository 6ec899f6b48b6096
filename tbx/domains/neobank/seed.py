"""Neobank domain seed: the deterministic base rows every task starts from, and the builder tasks
use to add their own customer, accounts, cards, payees and history on top.

Base ids stay below the task ranges (customers < 2000, accounts < 5000, cards < 7000, payees <
3000, transactions < 100000, transfers < 20000), so a task's own rows never collide with the
distractor data.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from functools import cache
from typing import Any

Row = dict[str, Any]

TODAY = dt.date(2026, 6, 15)  # the bank's "today"; mirrors policy.md
TIER_LIMITS = {1: Decimal(1000), 2: Decimal(5000), 3: Decimal(20000)}  # daily transfer limit by KYC tier
COMPLIANCE_REVIEW_AT = Decimal(10000)  # a single transfer this large needs a compliance review
REPLACEMENT_FEES = {"standard": Decimal(12), "plus": Decimal(6), "premium": Decimal(0)}
DISPUTE_WINDOW_DAYS = 60
PLANS = ("standard", "plus", "premium")
FIRST_NAMES = ("Amara", "Benedikt", "Carmen", "Darius", "Eleni", "Farid", "Greta", "Hiro", "Isla", "Jonah",
               "Keira", "Luca", "Mina", "Nikolai", "Odette", "Pavel", "Rania", "Soren", "Tamsin", "Umar",
               "Vera", "Wes", "Ximena", "Yusuf", "Zoe", "Anouk", "Bram", "Cyrus", "Dalia", "Emeka")
LAST_NAMES = ("Abbott", "Brandt", "Cardenas", "Dufresne", "Eriksen", "Fontaine", "Gallo", "Hartmann", "Ismail",
              "Jovanovic", "Kaplan", "Lund", "Moreno", "Nakashima", "Oduya", "Petersen", "Quiroga", "Rahman",
              "Sandoval", "Thorne", "Ulloa", "Valdez", "Winslow", "Yamada", "Zeller")
MERCHANTS = ("Lumen Coffee", "Cartwheel Grocery", "Northline Rail", "Pixelbox Games", "Harbor Pharmacy",
             "Bluefin Sushi", "Ridge Outdoor Supply", "Streamly Subscription", "Corner Books", "Metro Fuel",
             "Atlas Electronics", "Juniper Florist", "Quickcab Rides", "Golden Crust Bakery", "Verve Fitness")
PAYEE_NAMES = ("Greenleaf Property Mgmt", "City Water Utility", "Jonas Weber", "Aiko Tanaka", "Bright Dental",
               "Maple Day Care", "Ravi Iyer", "Sofia Rossi", "Summit Auto Loans", "Elena Novak", "Kwame Mensah",
               "Harlow & Finch LLP", "Lakeside Tutoring", "Omar Haddad")


def days_ago(days: int) -> str:
    return (TODAY - dt.timedelta(days=days)).isoformat()


def money(value: Decimal) -> float:
    """A dollar amount as the float a reference step or check carries (exact to the cent)."""
    return float(Decimal(value).quantize(Decimal("0.01")))


def amount_between(rng: random.Random, low: Decimal, high: Decimal) -> Decimal:
    """A random amount in [low, high], whole dollars half of the time."""
    value = Decimal(rng.randrange(int(low * 100), int(high * 100) + 1)) / 100
    return value.quantize(Decimal(1)) if rng.random() < 0.5 and value.quantize(Decimal(1)) >= low else value


def new_card_last4(card_id: int) -> str:
    """The last four digits a replacement card gets: derived from its id, so states reproduce."""
    return f"{(card_id * 7919 + 4321) % 10000:04d}"


class Bank:
    """Builds one customer's rows; `ids` holds the next free id per table and is advanced."""

    def __init__(self, rng: random.Random, ids: dict[str, int], numbers: set[str]):
        self.rng, self.ids, self.numbers = rng, ids, numbers
        self.rows: dict[str, list[Row]] = {}

    def _next(self, table: str) -> int:
        self.ids[table] += 1
        return self.ids[table] - 1

    def _add(self, table: str, row: Row) -> Row:
        self.rows.setdefault(table, []).append(row)
        return row

    def _number(self, digits: int) -> str:
        while True:
            number = str(self.rng.randrange(10 ** (digits - 1), 10 ** digits))
            if number not in self.numbers:
                self.numbers.add(number)
                return number

    def customer(self, tier: int, plan: str, kyc_status: str = "verified") -> Row:
        rng = self.rng
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        birth = dt.date(1958, 1, 1) + dt.timedelta(days=rng.randrange(365 * 45))
        return self._add("customers", {
            "id": self._next("customers"), "customer_number": self._number(8), "first_name": first, "last_name": last,
            "date_of_birth": birth.isoformat(), "email": f"{first.lower()}.{last.lower()}@inbox.example",
            "kyc_tier": tier, "kyc_status": kyc_status, "plan": plan, "updated_at": None})

    def account(self, owner: Row, kind: str, balance: Decimal, status: str = "active") -> Row:
        return self._add("accounts", {"id": self._next("accounts"), "customer_id": owner["id"],
                                      "account_number": self._number(10), "kind": kind, "balance": balance,
                                      "status": status, "updated_at": None})

    def card(self, account: Row, kind: str = "physical", status: str = "active") -> Row:
        return self._add("cards", {"id": self._next("cards"), "customer_id": account["customer_id"],
                                   "account_id": account["id"], "last4": f"{self.rng.randrange(10000):04d}",
                                   "kind": kind, "status": status, "replaces_card_id": None, "issue_reason": "new",
                                   "updated_at": None})

    def payee(self, owner: Row, name: str) -> Row:
        return self._add("payees", {"id": self._next("payees"), "customer_id": owner["id"], "name": name,
                                    "routing_number": f"0{self.rng.randrange(10**7, 10**8)}",
                                    "account_number": self._number(10)})

    def transaction(self, account: Row, days: int, description: str, amount: Decimal, kind: str,
                    card: Row | None = None) -> Row:
        return self._add("transactions", {
            "id": self._next("transactions"), "account_id": account["id"], "card_id": card["id"] if card else None,
            "posted_on": days_ago(days), "description": description, "amount": amount, "kind": kind,
            "status": "posted"})

    def transfer(self, account: Row, payee: Row, amount: Decimal, days: int) -> tuple[Row, Row]:
        sent = self._add("transfers", {"id": self._next("transfers"), "account_id": account["id"],
                                       "payee_id": payee["id"], "amount": amount, "status": "completed",
                                       "created_on": days_ago(days), "memo": None})
        return sent, self.transaction(account, days, f"Transfer to {payee['name']}", -amount, "transfer")

    def purchase(self, account: Row, card: Row, days: int, merchant: str | None = None,
                 amount: Decimal | None = None) -> Row:
        value = amount if amount is not None else Decimal(self.rng.randrange(300, 18000)) / 100
        return self.transaction(account, days, merchant or self.rng.choice(MERCHANTS), -value, "card", card)

    def history(self, account: Row, card: Row | None, count: int) -> None:
        """A salary deposit and `count` ordinary card purchases over the last 100 days."""
        self.transaction(account, self.rng.randrange(3, 30), "Payroll deposit",
                         Decimal(self.rng.randrange(1500, 6000)), "deposit")
        for _ in range(count if card else 0):
            self.purchase(account, card, self.rng.randrange(1, 100))


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260615)
    ids = {"customers": 1001, "accounts": 1, "cards": 1, "payees": 1, "transactions": 1, "transfers": 1}
    bank = Bank(rng, ids, set())
    for n in range(30):
        owner = bank.customer(1 + n % 3, PLANS[n % 3], "pending_documents" if n % 10 == 9 else "verified")
        balance = Decimal(rng.randrange(200, 15000))
        checking = bank.account(owner, "checking", balance, "frozen" if n == 17 else "active")
        card = bank.card(checking, status="frozen" if n % 11 == 5 else "active")
        bank.history(checking, card, 3)
        if n % 2:
            bank.account(owner, "savings", Decimal(rng.randrange(500, 40000)))
        for name in rng.sample(PAYEE_NAMES, 2):
            payee = bank.payee(owner, name)
            if rng.random() < 0.5:
                bank.transfer(checking, payee, Decimal(rng.randrange(20, 900)), rng.randrange(0, 40))
    rows = bank.rows
    owner_of = {a["id"]: a["customer_id"] for a in rows["accounts"]}
    charge = next(t for t in rows["transactions"] if t["kind"] == "card" and owner_of[t["account_id"]] == 1002)
    charge["status"] = "disputed"
    rows["disputes"] = [{"id": 1, "customer_id": 1002, "transaction_id": charge["id"], "amount": -charge["amount"],
                         "reason_code": "duplicate", "status": "open", "description": "charged twice"}]
    account = next(a for a in rows["accounts"] if a["customer_id"] == 1003)
    payee = next(p for p in rows["payees"] if p["customer_id"] == 1003)
    rows["compliance_reviews"] = [{"id": 1, "customer_id": 1003, "account_id": account["id"], "payee_id": payee["id"],
                                   "amount": Decimal(12500), "status": "cleared", "reason": "house deposit"}]
    rows["support_cases"] = [{"id": 1, "customer_id": 1008, "account_id": None, "transaction_id": None,
                              "category": "other", "status": "open", "summary": "Asked about joint accounts."}]
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every neobank task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
