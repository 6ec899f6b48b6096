"""Helpdesk domain tables: an IT service desk with users, technicians, assets, tickets under
priority-based SLAs, comments, escalations and software licences.

Dates are ISO strings (YYYY-MM-DD). Money is `Numeric(12, 2)`. `updated_at` columns and
`audit_log` are bookkeeping the checks ignore (the domain declares them volatile); `identity_checks`
is a record the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table

metadata = MetaData()

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True),  # the employee ID callers give
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("email", String(120), nullable=False),
    Column("department", String(40), nullable=False),
    Column("manager_id", Integer, ForeignKey("users.id")),
    Column("account_status", String(10), nullable=False),  # active | locked | disabled
    Column("updated_at", String(32)),
)

technicians = Table(
    "technicians", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False),
    Column("team", String(20), nullable=False),  # service_desk | hardware | network | applications | security
    Column("level", Integer, nullable=False),
    Column("on_call", Integer, nullable=False),  # 1: takes new tickets of the team (policy.md)
)

assets = Table(
    "assets", metadata,
    Column("id", Integer, primary_key=True),
    Column("asset_tag", String(12), nullable=False, unique=True),
    Column("kind", String(20), nullable=False),  # laptop | monitor | phone | dock
    Column("model", String(60), nullable=False),
    Column("assigned_user_id", Integer, ForeignKey("users.id")),
    Column("status", String(10), nullable=False),  # in_use | spare | in_repair | retired
    Column("updated_at", String(32)),
)

tickets = Table(
    "tickets", metadata,
    Column("id", Integer, primary_key=True),  # the ticket number
    Column("requester_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("category", String(12), nullable=False),  # hardware | software | network | access | security | licence
    Column("priority", String(10), nullable=False),  # low | medium | high | critical
    Column("status", String(12), nullable=False),  # open | in_progress | on_hold | closed
    Column("assignee_id", Integer, ForeignKey("technicians.id")),
    Column("asset_id", Integer, ForeignKey("assets.id")),
    Column("subject", String(200), nullable=False),
    Column("created_on", String(10), nullable=False),
    Column("due_on", String(10), nullable=False),  # created_on + SLA days of the priority
    Column("escalation_level", Integer, nullable=False),  # 1..3
    Column("resolution", String(12)),  # resolved | duplicate | wont_fix, once closed
    Column("updated_at", String(32)),
)

ticket_comments = Table(
    "ticket_comments", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ticket_id", Integer, ForeignKey("tickets.id"), nullable=False),
    Column("visibility", String(10), nullable=False),  # public | internal
    Column("body", String(1000), nullable=False),
)

escalations = Table(
    "escalations", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ticket_id", Integer, ForeignKey("tickets.id"), nullable=False),
    Column("from_level", Integer, nullable=False),
    Column("to_level", Integer, nullable=False),
    Column("reason", String(400)),
)

licences = Table(
    "licences", metadata,
    Column("id", Integer, primary_key=True),
    Column("software", String(60), nullable=False, unique=True),
    Column("seats_total", Integer, nullable=False),
    Column("seats_used", Integer, nullable=False),
    Column("cost_per_seat", Numeric(12, 2), nullable=False),
)

licence_assignments = Table(
    "licence_assignments", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("licence_id", Integer, ForeignKey("licences.id"), nullable=False),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("status", String(10), nullable=False),  # active | revoked
)

# one row per user the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
)

audit_log = audit_log_table(metadata)
