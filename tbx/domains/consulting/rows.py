"""The reads and writes of rows the consulting tools share: a record by the key a caller gives (a missing one is
a tool error the agent reads, naming the key), an amount in dollars checked with this domain's messages, an
audit-log line, and an expense decided once.

Beside tools.py so that tools.py stays readable; run identity hashes it with tools.py (tbx/runs/identity.py DOMAIN_PARTS).
"""

from decimal import Decimal

from sqlalchemy import insert, update

from tbx.domains.consulting.schema import audit_log, clients, consultants, engagements, expenses, invoices
from tbx.domains.kit import fetch_one, parse_money
from tbx.tools import ToolFailure

MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def client_row(db, client_code: str) -> dict:
    return fetch_one(db, clients, client_code.strip().upper(), "client", clients.c.client_code, quote=True)


def consultant_row(db, consultant_id: int) -> dict:
    return fetch_one(db, consultants, consultant_id, "consultant", quote=True)


def engagement_row(db, code: str) -> dict:
    return fetch_one(db, engagements, code.strip().upper(), "engagement", engagements.c.code, quote=True)


def invoice_row(db, invoice_number: str) -> dict:
    return fetch_one(db, invoices, invoice_number.strip().upper(), "invoice", invoices.c.invoice_number, quote=True)


def money(value: float, name: str, allow_zero: bool = False) -> Decimal:
    return parse_money(value, name, allow_zero, cents_message="{name} {amount} has more than two decimals",
                       sign_message="{name} must be " + ("zero or more" if allow_zero else "greater than zero"))


def log_event(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


def decide_expense(db, expense_id: int, status: str, note: str | None) -> dict:
    row = fetch_one(db, expenses, expense_id, "expense", quote=True)
    if row["status"] != "submitted":
        raise ToolFailure(f"expense {expense_id} is already {row['status']}")
    db.execute(update(expenses).where(expenses.c.id == expense_id).values(status=status, decision_note=note,
                                                                          updated_at=MODIFIED))
    log_event(db, f"{status} expense={expense_id}")
    return {"expense_id": expense_id, "status": status, "amount": row["amount"]}
