"""Consulting operations domain: clients and their billing contacts, engagements with purchase
orders, consultants, rate cards and staffing, timesheets, invoices with credits and discounts,
partner approvals, expenses under per-diem rules, PO change requests and cases."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="bench",
    volatile=("audit_log", "clients.updated_at", "engagements.updated_at", "purchase_orders.updated_at",
              "time_entries.updated_at", "time_entries.note", "invoices.updated_at", "expenses.updated_at",
              "expenses.decision_note"),
    records=("identity_checks",),
    distractors=(
        {"tool": "open_case", "arguments": {"category": "other", "client_code": "GCFL-126", "consultant_id": 0,
                                            "summary": "Asked for invoices to be sent by post."}},
        {"tool": "approve_expense", "arguments": {"expense_id": 19}},
    ),
)
