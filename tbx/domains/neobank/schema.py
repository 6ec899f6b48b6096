"""Neobank domain tables: customers with KYC tier and plan, accounts, cards, payees, transactions,
transfers, disputes, compliance reviews and support cases.

Dates are ISO strings (YYYY-MM-DD). Money is `Numeric(12, 2)`; a transaction's amount is negative
for money leaving the account. New rows get their ids from the tools (max id + 1), so every
backend numbers them the same way. `updated_at` columns and `audit_log` are bookkeeping the checks
ignore (declared volatile); `identity_checks` is a record the checks require where a task verifies
its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table, support_cases_table

metadata = MetaData()

customers = Table(
    "customers", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_number", String(8), nullable=False, unique=True),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("email", String(120), nullable=False),
    Column("kyc_tier", Integer, nullable=False),  # 1..3; sets the daily transfer limit (policy.md)
    Column("kyc_status", String(20), nullable=False),  # verified | pending_documents
    Column("plan", String(10), nullable=False),  # standard | plus | premium; sets card fees
    Column("updated_at", String(32)),
)

accounts = Table(
    "accounts", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("account_number", String(12), nullable=False, unique=True),
    Column("kind", String(10), nullable=False),  # checking | savings
    Column("balance", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # active | frozen
    Column("updated_at", String(32)),
)

cards = Table(
    "cards", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("last4", String(4), nullable=False),
    Column("kind", String(10), nullable=False),  # physical | virtual
    Column("status", String(10), nullable=False),  # active | frozen | cancelled
    Column("replaces_card_id", Integer, ForeignKey("cards.id")),  # set on replacement cards
    Column("issue_reason", String(10)),  # new | damaged | lost | stolen
    Column("updated_at", String(32)),
)

payees = Table(
    "payees", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("name", String(80), nullable=False),
    Column("routing_number", String(9), nullable=False),
    Column("account_number", String(17), nullable=False),
)

transactions = Table(
    "transactions", metadata,
    Column("id", Integer, primary_key=True),
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("card_id", Integer, ForeignKey("cards.id")),  # card payments only
    Column("posted_on", String(10), nullable=False),
    Column("description", String(120), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),  # negative: money out
    Column("kind", String(10), nullable=False),  # card | transfer | fee | deposit
    Column("status", String(10), nullable=False),  # posted | disputed
)

transfers = Table(
    "transfers", metadata,
    Column("id", Integer, primary_key=True),
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("payee_id", Integer, ForeignKey("payees.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # completed
    Column("created_on", String(10), nullable=False),
    Column("memo", String(200)),
)

disputes = Table(
    "disputes", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("transaction_id", Integer, ForeignKey("transactions.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),  # positive: the amount disputed
    Column("reason_code", String(16), nullable=False),  # unauthorized | duplicate | not_received | wrong_amount
    Column("status", String(10), nullable=False),  # open
    Column("description", String(400)),
)

compliance_reviews = Table(
    "compliance_reviews", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("payee_id", Integer, ForeignKey("payees.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # pending | cleared
    Column("reason", String(200)),
)

support_cases = support_cases_table(
    metadata,
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("account_id", Integer, ForeignKey("accounts.id")),
    Column("transaction_id", Integer, ForeignKey("transactions.id")),
)

# one row per customer the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
)

audit_log = audit_log_table(metadata, autoincrement="auto")
