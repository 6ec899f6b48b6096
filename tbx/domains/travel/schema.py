"""Travel domain tables: corporate travel with employees, hotel and flight bookings, money, approvals.

Dates are ISO strings (YYYY-MM-DD): task files carry them as text, and SQLite's Date type only
accepts Python date objects. Money is `Numeric(12, 2)`. `updated_at` columns and `audit_log` are
bookkeeping the checks ignore (the domain declares them volatile); `identity_checks` is a record
the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table, support_cases_table

metadata = MetaData()

employees = Table(
    "employees", metadata,
    Column("id", Integer, primary_key=True),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("email", String(120), nullable=False),
    Column("phone", String(20)),
    Column("department", String(40), nullable=False),
    Column("grade", String(2), nullable=False),  # G1..G5; sets the nightly hotel limit (policy.md)
    Column("manager_id", Integer, ForeignKey("employees.id")),
    Column("frequent_flyer_number", String(20)),
    Column("hotel_loyalty_number", String(20)),
    Column("updated_at", String(32)),
)

hotels = Table(
    "hotels", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False),
    Column("city", String(40), nullable=False),
)

room_types = Table(
    "room_types", metadata,
    Column("id", Integer, primary_key=True),
    Column("hotel_id", Integer, ForeignKey("hotels.id"), nullable=False),
    Column("name", String(40), nullable=False),
    Column("nightly_rate", Numeric(12, 2), nullable=False),
)

flights = Table(
    "flights", metadata,
    Column("id", Integer, primary_key=True),
    Column("flight_number", String(8), nullable=False),
    Column("origin", String(3), nullable=False),
    Column("destination", String(3), nullable=False),
    Column("departure_date", String(10), nullable=False),
    Column("departure_time", String(5), nullable=False),
    Column("fare", Numeric(12, 2), nullable=False),
    Column("seats_available", Integer, nullable=False),
)

bookings = Table(
    "bookings", metadata,
    Column("id", Integer, primary_key=True),
    Column("confirmation_code", String(8), nullable=False, unique=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("kind", String(6), nullable=False),  # hotel | flight
    Column("status", String(10), nullable=False),  # confirmed | cancelled
    Column("refundable", Integer, nullable=False),  # 1: refundable rate or fare, 0: non-refundable
    Column("room_type_id", Integer, ForeignKey("room_types.id")),  # hotel bookings
    Column("check_in", String(10)),
    Column("nights", Integer),
    Column("nightly_rate", Numeric(12, 2)),
    Column("flight_id", Integer, ForeignKey("flights.id")),  # flight bookings
    Column("total_amount", Numeric(12, 2), nullable=False),
    Column("updated_at", String(32)),
)

payments = Table(
    "payments", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("booking_id", Integer, ForeignKey("bookings.id"), nullable=False),
    Column("method", String(20), nullable=False),  # corporate_card | personal_card
    Column("card_last4", String(4), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("note", String(200)),
)

refunds = Table(
    "refunds", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("booking_id", Integer, ForeignKey("bookings.id"), nullable=False),
    Column("payment_id", Integer, ForeignKey("payments.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # issued
    Column("reason", String(200)),
)

approvals = Table(
    "approvals", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("approver_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("booking_id", Integer, ForeignKey("bookings.id"), nullable=False),
    Column("request_type", String(20), nullable=False),  # room_downgrade | room_upgrade
    Column("requested_room_type_id", Integer, ForeignKey("room_types.id")),
    Column("status", String(10), nullable=False),  # pending | approved | rejected
    Column("reason", String(200)),
)

support_cases = support_cases_table(
    metadata,
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("booking_id", Integer, ForeignKey("bookings.id")),
    autoincrement=True,
)

# one row per employee whose identity the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    autoincrement=True,
)

audit_log = audit_log_table(metadata)
