"""Consulting domain tables: a consulting firm's operations desk with clients, engagements and their
purchase orders, consultants and rate cards, staffing assignments, timesheets, invoices with
lines and credits, partner approval requests, expenses, PO change requests and cases.

Dates are ISO strings (YYYY-MM-DD), money is `Numeric(12, 2)`, hours are `Numeric(6, 2)`.
`updated_at` columns and `audit_log` are bookkeeping the checks ignore (declared volatile);
`identity_checks` is a record the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table

metadata = MetaData()

clients = Table(
    "clients", metadata,
    Column("id", Integer, primary_key=True),
    Column("client_code", String(10), nullable=False, unique=True),
    Column("name", String(80), nullable=False),
    Column("tier", String(10), nullable=False),  # standard | preferred | strategic: sets discounts (policy.md)
    Column("billing_contact_name", String(80), nullable=False),
    Column("billing_contact_email", String(120), nullable=False),
    Column("updated_at", String(32)),
)

consultants = Table(
    "consultants", metadata,
    Column("id", Integer, primary_key=True),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("email", String(120), nullable=False),
    Column("level", String(20), nullable=False),  # analyst | consultant | senior_consultant | manager | partner
    Column("status", String(10), nullable=False),  # active | on_leave
)

rate_cards = Table(
    "rate_cards", metadata,
    Column("id", Integer, primary_key=True),
    Column("level", String(20), nullable=False),
    Column("hourly_rate", Numeric(12, 2), nullable=False),
    Column("effective_from", String(10), nullable=False),  # the newest card not after today applies
)

engagements = Table(
    "engagements", metadata,
    Column("id", Integer, primary_key=True),
    Column("code", String(10), nullable=False, unique=True),
    Column("client_id", Integer, ForeignKey("clients.id"), nullable=False),
    Column("name", String(80), nullable=False),
    Column("status", String(10), nullable=False),  # active | closed
    Column("partner_id", Integer, ForeignKey("consultants.id"), nullable=False),  # the lead partner
    Column("updated_at", String(32)),
)

purchase_orders = Table(
    "purchase_orders", metadata,
    Column("id", Integer, primary_key=True),
    Column("po_number", String(10), nullable=False, unique=True),
    Column("engagement_id", Integer, ForeignKey("engagements.id"), nullable=False),
    Column("budget_cap", Numeric(12, 2), nullable=False),
    Column("committed", Numeric(12, 2), nullable=False),  # sum of hourly rate × planned hours staffed
    Column("status", String(10), nullable=False),  # open | closed
    Column("updated_at", String(32)),
)

assignments = Table(
    "assignments", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("engagement_id", Integer, ForeignKey("engagements.id"), nullable=False),
    Column("consultant_id", Integer, ForeignKey("consultants.id"), nullable=False),
    Column("hourly_rate", Numeric(12, 2), nullable=False),  # the rate billed to the client
    Column("planned_hours", Numeric(6, 2), nullable=False),
    Column("status", String(10), nullable=False),  # active | ended
)

timesheet_periods = Table(
    "timesheet_periods", metadata,
    Column("id", Integer, primary_key=True),
    Column("start_date", String(10), nullable=False),
    Column("end_date", String(10), nullable=False),
    Column("status", String(10), nullable=False),  # open | closed
)

time_entries = Table(
    "time_entries", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("consultant_id", Integer, ForeignKey("consultants.id"), nullable=False),
    Column("engagement_id", Integer, ForeignKey("engagements.id"), nullable=False),
    Column("period_id", Integer, ForeignKey("timesheet_periods.id"), nullable=False),
    Column("work_date", String(10), nullable=False),
    Column("hours", Numeric(6, 2), nullable=False),
    Column("status", String(10), nullable=False),  # submitted | approved
    Column("note", String(200)),
    Column("updated_at", String(32)),
)

invoices = Table(
    "invoices", metadata,
    Column("id", Integer, primary_key=True),
    Column("invoice_number", String(14), nullable=False, unique=True),
    Column("client_id", Integer, ForeignKey("clients.id"), nullable=False),
    Column("engagement_id", Integer, ForeignKey("engagements.id"), nullable=False),
    Column("status", String(10), nullable=False),  # draft | issued | paid
    Column("issue_date", String(10)),
    Column("subtotal", Numeric(12, 2), nullable=False),  # sum of the lines
    Column("discount_percent", Numeric(5, 2), nullable=False),
    Column("discount_amount", Numeric(12, 2), nullable=False),
    Column("credits", Numeric(12, 2), nullable=False),  # sum of the applied credits
    Column("total", Numeric(12, 2), nullable=False),  # subtotal − discount − credits
    Column("updated_at", String(32)),
)

invoice_lines = Table(
    "invoice_lines", metadata,
    Column("id", Integer, primary_key=True),
    Column("invoice_id", Integer, ForeignKey("invoices.id"), nullable=False),
    Column("consultant_id", Integer, ForeignKey("consultants.id"), nullable=False),
    Column("description", String(120), nullable=False),
    Column("hours", Numeric(6, 2), nullable=False),
    Column("rate", Numeric(12, 2), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
)

invoice_credits = Table(
    "invoice_credits", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("invoice_id", Integer, ForeignKey("invoices.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # applied
    Column("reason", String(200)),
)

approval_requests = Table(
    "approval_requests", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("invoice_id", Integer, ForeignKey("invoices.id"), nullable=False),
    Column("approver_id", Integer, ForeignKey("consultants.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # pending | approved | rejected
    Column("reason", String(200)),
)

expenses = Table(
    "expenses", metadata,
    Column("id", Integer, primary_key=True),
    Column("consultant_id", Integer, ForeignKey("consultants.id"), nullable=False),
    Column("engagement_id", Integer, ForeignKey("engagements.id"), nullable=False),
    Column("category", String(20), nullable=False),  # meals | lodging | airfare | ground_transport
    Column("city", String(40), nullable=False),
    Column("expense_date", String(10), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("receipt_attached", Integer, nullable=False),  # 1: a receipt is on file
    Column("status", String(10), nullable=False),  # submitted | approved | rejected
    Column("decision_note", String(200)),
    Column("updated_at", String(32)),
)

po_change_requests = Table(
    "po_change_requests", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("po_id", Integer, ForeignKey("purchase_orders.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),  # the increase asked of the client
    Column("status", String(10), nullable=False),  # pending
    Column("reason", String(200)),
)

cases = Table(
    "cases", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("client_id", Integer, ForeignKey("clients.id")),
    Column("consultant_id", Integer, ForeignKey("consultants.id")),
    Column("category", String(40), nullable=False),
    Column("status", String(10), nullable=False),  # open
    Column("summary", String(400)),
)

# one row per billing contact (of a client) or consultant the agent verified
identity_checks = identity_checks_table(
    metadata,
    Column("client_id", Integer, ForeignKey("clients.id")),
    Column("consultant_id", Integer, ForeignKey("consultants.id")),
)

audit_log = audit_log_table(metadata)
