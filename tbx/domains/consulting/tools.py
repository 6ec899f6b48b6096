"""Consulting tools: what the operations-desk agent may read and write.

The tools enforce only hard invariants (records exist, a paid invoice is not credited, only a
draft invoice is re-discounted, an expense is decided once, credits never exceed the invoice).
Business rules such as "only the billing contact may change an invoice", the closed-period rule,
the partner-approval threshold, per-diem limits and PO budgets live in policy.md and are the
agent's to follow: the tools would let the agent break them, which is exactly what a task checks.
"""


from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import func, insert, select, update

from tbx.domains.consulting.schema import (
    approval_requests,
    assignments,
    audit_log,
    cases,
    clients,
    consultants,
    engagements,
    expenses,
    identity_checks,
    invoice_credits,
    invoice_lines,
    invoices,
    po_change_requests,
    purchase_orders,
    rate_cards,
    time_entries,
    timesheet_periods,
)
from tbx.domains.kit import CENT, fetch_one, fetch_rows, parse_money, record_once
from tbx.tools import ToolFailure, tool

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


CASE_CATEGORIES = ("unauthorized_invoice_request", "closed_period_correction", "other")


@tool("write")
def verify_billing_contact(db, client_code: str, email: str) -> dict:
    """Check that a caller is the named billing contact of a client; a success is recorded on file.

    Returns {"verified": true, ...} when the email is the client's billing-contact email,
    otherwise {"verified": false, "reason": ...}.

    Args:
        client_code: The client code the caller gave, e.g. "NL-482".
        email: The caller's email address.
    """
    row = client_row(db, client_code)
    if email.strip().lower() != row["billing_contact_email"].lower():
        return {"verified": False, "reason": f"{email.strip()} is not the billing contact of {row['client_code']}"}
    record_once(db, identity_checks, client_id=row["id"], consultant_id=None)
    return {"verified": True, "client_code": row["client_code"], "billing_contact": row["billing_contact_name"]}


@tool("write")
def verify_consultant(db, consultant_id: int, email: str) -> dict:
    """Check that a caller is the firm's consultant with this ID (by their work email); a success is
    recorded on file.

    Args:
        consultant_id: The consultant's numeric ID.
        email: The caller's work email address.
    """
    row = consultant_row(db, consultant_id)
    if email.strip().lower() != row["email"].lower():
        return {"verified": False, "reason": f"the email does not match consultant {consultant_id}"}
    record_once(db, identity_checks, client_id=None, consultant_id=consultant_id)
    return {"verified": True, "consultant": row}


@tool("read")
def get_client(db, client_code: str) -> dict:
    """Show a client (tier, billing contact name) with its engagements and invoices.

    Args:
        client_code: The client code, e.g. "NL-482".
    """
    row = client_row(db, client_code)
    row.pop("billing_contact_email")
    row["engagements"] = fetch_rows(db, select(engagements.c.id, engagements.c.code, engagements.c.name,
                                          engagements.c.status).where(engagements.c.client_id == row["id"]))
    row["invoices"] = fetch_rows(db, select(invoices.c.id, invoices.c.invoice_number, invoices.c.status,
                                       invoices.c.total).where(invoices.c.client_id == row["id"]))
    return row


@tool("read")
def get_engagement(db, engagement_code: str) -> dict:
    """Show an engagement with its client's tier, lead partner, purchase orders and staffing.

    Args:
        engagement_code: The engagement code, e.g. "ENG-4821".
    """
    row = engagement_row(db, engagement_code)
    row["client"] = fetch_rows(db, select(clients.c.client_code, clients.c.name, clients.c.tier)
                          .where(clients.c.id == row["client_id"]))[0]
    orders = fetch_rows(db, select(purchase_orders).where(purchase_orders.c.engagement_id == row["id"]))
    for order in orders:
        order.pop("updated_at")
        order["remaining"] = Decimal(str(order["budget_cap"])) - Decimal(str(order["committed"]))
    row["purchase_orders"] = orders
    row["assignments"] = fetch_rows(db, select(assignments).where(assignments.c.engagement_id == row["id"]))
    return row


@tool("read")
def get_invoice(db, invoice_number: str) -> dict:
    """Show an invoice with its lines (consultant, hours, rate, amount) and applied credits.

    Args:
        invoice_number: The invoice number, e.g. "INV-26-4821".
    """
    row = invoice_row(db, invoice_number)
    row["lines"] = fetch_rows(db, select(invoice_lines).where(invoice_lines.c.invoice_id == row["id"])
                         .order_by(invoice_lines.c.id))
    row["credits_applied"] = fetch_rows(db, select(invoice_credits).where(invoice_credits.c.invoice_id == row["id"]))
    return row


@tool("read")
def find_consultants(db, last_name: str) -> list[dict]:
    """Find the firm's consultants by last name (with level and status).

    Args:
        last_name: The consultant's last name (case does not matter).
    """
    # An equality, not ILIKE: "%" must not list every consultant, and SQLite refuses a LIKE pattern
    # over 50,000 bytes with an OperationalError (a harness crash) instead of matching nothing.
    name = func.lower(last_name.strip())  # the database folds case on both sides, as ILIKE did
    rows = fetch_rows(db, select(consultants).where(func.lower(consultants.c.last_name) == name).order_by(consultants.c.id))
    return [{k: v for k, v in r.items() if k != "email"} for r in rows]


@tool("read")
def get_rate_cards(db) -> list[dict]:
    """List the rate cards: the standard hourly rate of each level and the day each card took effect."""
    return fetch_rows(db, select(rate_cards).order_by(rate_cards.c.effective_from, rate_cards.c.id))


@tool("read")
def list_time_entries(db, consultant_id: int) -> list[dict]:
    """List a consultant's time entries with their engagement code and timesheet period status.

    Args:
        consultant_id: The consultant's numeric ID.
    """
    consultant_row(db, consultant_id)
    query = (select(time_entries.c.id, time_entries.c.work_date, time_entries.c.hours, time_entries.c.status,
                    engagements.c.code.label("engagement_code"), time_entries.c.period_id,
                    timesheet_periods.c.status.label("period_status"))
             .join(engagements, engagements.c.id == time_entries.c.engagement_id)
             .join(timesheet_periods, timesheet_periods.c.id == time_entries.c.period_id)
             .where(time_entries.c.consultant_id == consultant_id).order_by(time_entries.c.work_date))
    return fetch_rows(db, query)


@tool("read")
def list_periods(db) -> list[dict]:
    """List the timesheet periods with their dates and status (open or closed)."""
    return fetch_rows(db, select(timesheet_periods).order_by(timesheet_periods.c.id))


@tool("read")
def list_expenses(db, consultant_id: int) -> list[dict]:
    """List a consultant's expense claims (any status) with category, city, amount and receipt flag.

    Args:
        consultant_id: The consultant's numeric ID.
    """
    consultant_row(db, consultant_id)
    rows = fetch_rows(db, select(expenses).where(expenses.c.consultant_id == consultant_id).order_by(expenses.c.id))
    return [{k: v for k, v in r.items() if k != "updated_at"} for r in rows]


@tool("write", free_args=("reason",))
def apply_invoice_credit(db, invoice_number: str, amount: float, reason: str) -> dict:
    """Apply a credit to an issued or draft invoice: the invoice total drops by the amount.

    Args:
        invoice_number: The invoice number, e.g. "INV-26-4821".
        amount: The credit in dollars, greater than zero, at most two decimals.
        reason: Why the credit is given, in a sentence.
    """
    value = money(amount, "amount")
    row = invoice_row(db, invoice_number)
    if row["status"] == "paid":
        raise ToolFailure(f"invoice {row['invoice_number']} is paid; credits on paid invoices go through finance")
    if value > Decimal(str(row["total"])):
        raise ToolFailure(f"a credit of {value} exceeds the invoice total {row['total']}")
    new_id = db.execute(insert(invoice_credits).values(invoice_id=row["id"], amount=value, status="applied",
                                                       reason=reason)).inserted_primary_key[0]
    total = Decimal(str(row["total"])) - value
    db.execute(update(invoices).where(invoices.c.id == row["id"]).values(
        credits=Decimal(str(row["credits"])) + value, total=total, updated_at=MODIFIED))
    log_event(db, f"apply_invoice_credit invoice={row['id']} credit={new_id}")
    return {"credit_id": new_id, "invoice_number": row["invoice_number"], "new_total": total}


@tool("write", free_args=("reason",))
def request_partner_approval(db, invoice_number: str, amount: float, reason: str) -> dict:
    """Ask the engagement's lead partner to approve a credit on an invoice; the invoice is unchanged.

    Args:
        invoice_number: The invoice number, e.g. "INV-26-4821".
        amount: The credit to approve, in dollars.
        reason: The request as the partner will read it, in a sentence.
    """
    value = money(amount, "amount")
    row = invoice_row(db, invoice_number)
    partner = db.execute(select(engagements.c.partner_id).where(engagements.c.id == row["engagement_id"])).scalar()
    new_id = db.execute(insert(approval_requests).values(invoice_id=row["id"], approver_id=partner, amount=value,
                                                         status="pending", reason=reason)).inserted_primary_key[0]
    log_event(db, f"request_partner_approval invoice={row['id']} request={new_id}")
    return {"approval_request_id": new_id, "approver_id": partner, "status": "pending"}


@tool("write")
def set_invoice_discount(db, invoice_number: str, discount_percent: float) -> dict:
    """Set the discount percent of a draft invoice; its discount amount and total are recomputed.

    Args:
        invoice_number: The invoice number, e.g. "INV-26-4821".
        discount_percent: The discount in percent of the subtotal, e.g. 5 for 5%.
    """
    percent = money(discount_percent, "discount_percent", allow_zero=True)
    if percent >= 100:
        raise ToolFailure("discount_percent must be below 100")
    row = invoice_row(db, invoice_number)
    if row["status"] != "draft":
        raise ToolFailure(f"invoice {row['invoice_number']} is {row['status']}; only a draft invoice is re-priced")
    subtotal = Decimal(str(row["subtotal"]))
    discount = (subtotal * percent / 100).quantize(CENT, rounding=ROUND_HALF_UP)
    total = subtotal - discount - Decimal(str(row["credits"]))
    db.execute(update(invoices).where(invoices.c.id == row["id"]).values(
        discount_percent=percent, discount_amount=discount, total=total, updated_at=MODIFIED))
    log_event(db, f"set_invoice_discount invoice={row['id']} percent={percent}")
    return {"invoice_number": row["invoice_number"], "discount_amount": discount, "total": total}


@tool("write", free_args=("reason",))
def correct_time_entry(db, entry_id: int, hours: float, reason: str) -> dict:
    """Change the hours of a time entry; the entry goes back to "submitted" for re-approval.

    Args:
        entry_id: The time entry's numeric ID.
        hours: The corrected hours, more than 0 and at most 24.
        reason: Why the entry is corrected, in a few words.
    """
    value = money(hours, "hours")
    if value > 24:
        raise ToolFailure("hours must be at most 24")
    row = fetch_one(db, time_entries, entry_id, "time entry", quote=True)
    db.execute(update(time_entries).where(time_entries.c.id == entry_id).values(
        hours=value, status="submitted", note=reason, updated_at=MODIFIED))
    log_event(db, f"correct_time_entry entry={entry_id} reason={reason[:80]}")
    return {"entry_id": entry_id, "old_hours": row["hours"], "hours": value, "status": "submitted"}


@tool("write", free_args=("note",))
def log_time(db, consultant_id: int, engagement_code: str, work_date: str, hours: float, note: str) -> dict:
    """Record a new time entry for a consultant on an engagement (status "submitted").

    Args:
        consultant_id: The consultant's numeric ID.
        engagement_code: The engagement code, e.g. "ENG-4821".
        work_date: The day worked, YYYY-MM-DD.
        hours: Hours worked that day, more than 0 and at most 24.
        note: What was done, in a few words.
    """
    value = money(hours, "hours")
    if value > 24:
        raise ToolFailure("hours must be at most 24")
    consultant_row(db, consultant_id)
    eng = engagement_row(db, engagement_code)
    try:
        day = dt.date.fromisoformat(work_date.strip()).isoformat()
    except ValueError as exc:
        raise ToolFailure(f"work_date {work_date!r} is not a date; give YYYY-MM-DD") from exc
    period = db.execute(select(timesheet_periods.c.id).where(timesheet_periods.c.start_date <= day,
                                                             timesheet_periods.c.end_date >= day)).scalar()
    if period is None:
        raise ToolFailure(f"no timesheet period covers {day}")
    new_id = db.execute(insert(time_entries).values(consultant_id=consultant_id, engagement_id=eng["id"],
                                                    period_id=period, work_date=day, hours=value,
                                                    status="submitted", note=note)).inserted_primary_key[0]
    log_event(db, f"log_time entry={new_id}")
    return {"entry_id": new_id, "period_id": period, "status": "submitted"}


@tool("write")
def approve_expense(db, expense_id: int) -> dict:
    """Approve a submitted expense claim for reimbursement in full.

    Args:
        expense_id: The expense's numeric ID.
    """
    return decide_expense(db, expense_id, "approved", None)


@tool("write", free_args=("reason",))
def reject_expense(db, expense_id: int, reason: str) -> dict:
    """Reject a submitted expense claim; nothing is reimbursed.

    Args:
        expense_id: The expense's numeric ID.
        reason: Why it is rejected, in a sentence the consultant will read.
    """
    return decide_expense(db, expense_id, "rejected", reason)


@tool("write")
def assign_consultant(db, engagement_code: str, consultant_id: int, hourly_rate: float,
                      planned_hours: float) -> dict:
    """Staff a consultant on an engagement; the engagement's open PO commits hourly rate × planned hours.

    Args:
        engagement_code: The engagement code, e.g. "ENG-4821".
        consultant_id: The consultant's numeric ID.
        hourly_rate: The hourly rate billed to the client, in dollars.
        planned_hours: The hours planned for the consultant.
    """
    rate, hours = money(hourly_rate, "hourly_rate"), money(planned_hours, "planned_hours")
    eng = engagement_row(db, engagement_code)
    if eng["status"] != "active":
        raise ToolFailure(f"engagement {eng['code']} is {eng['status']}")
    if consultant_row(db, consultant_id)["status"] != "active":
        raise ToolFailure(f"consultant {consultant_id} is not active")
    order = db.execute(select(purchase_orders).where(purchase_orders.c.engagement_id == eng["id"],
                                                     purchase_orders.c.status == "open")).mappings().first()
    if order is None:
        raise ToolFailure(f"engagement {eng['code']} has no open purchase order")
    new_id = db.execute(insert(assignments).values(engagement_id=eng["id"], consultant_id=consultant_id,
                                                   hourly_rate=rate, planned_hours=hours, status="active")
                        ).inserted_primary_key[0]
    committed = Decimal(str(order["committed"])) + (rate * hours).quantize(CENT, rounding=ROUND_HALF_UP)
    db.execute(update(purchase_orders).where(purchase_orders.c.id == order["id"]).values(
        committed=committed, updated_at=MODIFIED))
    log_event(db, f"assign_consultant engagement={eng['id']} assignment={new_id}")
    return {"assignment_id": new_id, "po_number": order["po_number"], "committed": committed,
            "budget_cap": order["budget_cap"]}


@tool("write", free_args=("reason",))
def request_po_increase(db, po_number: str, amount: float, reason: str) -> dict:
    """Ask the client to raise a purchase order's budget cap by an amount; nothing is staffed.

    Args:
        po_number: The purchase order number, e.g. "PO-48213".
        amount: The increase asked for, in dollars.
        reason: What the increase is for, in a sentence.
    """
    value = money(amount, "amount")
    order = fetch_one(db, purchase_orders, po_number.strip().upper(), "purchase order", purchase_orders.c.po_number, quote=True)
    new_id = db.execute(insert(po_change_requests).values(po_id=order["id"], amount=value, status="pending",
                                                          reason=reason)).inserted_primary_key[0]
    log_event(db, f"request_po_increase po={order['id']} request={new_id}")
    return {"request_id": new_id, "status": "pending"}


@tool("write", free_args=("summary",))
def open_case(db, category: str, summary: str, client_code: str = "", consultant_id: int = 0) -> dict:
    """Open a case for the operations team to follow up, about a client, a consultant or both.

    Args:
        category: One of "unauthorized_invoice_request", "closed_period_correction", "other".
        summary: What happened and what the caller wants, in a sentence or two.
        client_code: The client code the case concerns, or "" when none.
        consultant_id: The consultant's numeric ID the case concerns, or 0 when none.
    """
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    client_id = client_row(db, client_code)["id"] if client_code.strip() else None
    if consultant_id:
        consultant_row(db, consultant_id)
    if client_id is None and not consultant_id:
        raise ToolFailure("give the client_code or the consultant_id the case is about")
    new_id = db.execute(insert(cases).values(client_id=client_id, consultant_id=consultant_id or None,
                                             category=category, status="open", summary=summary)
                        ).inserted_primary_key[0]
    log_event(db, f"open_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
