"""Retail domain tables: an online store's customers, catalog with stock, orders, money and cases.

Dates are ISO strings (YYYY-MM-DD). Money is `Numeric(12, 2)`. New rows get their ids from the
tools (max id + 1) rather than from the database, so every backend numbers them the same way.
`updated_at` columns and `audit_log` are bookkeeping the checks ignore (declared volatile);
`identity_checks` is a record the checks require where a task authenticates its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table, support_cases_table

metadata = MetaData()

customers = Table(
    "customers", metadata,
    Column("id", Integer, primary_key=True),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("email", String(120), nullable=False, unique=True),
    Column("phone", String(20)),
    Column("zip_code", String(10), nullable=False),  # billing ZIP code: one of the identity proofs
    Column("loyalty_tier", String(10), nullable=False),  # bronze | silver | gold
    Column("store_credit", Numeric(12, 2), nullable=False),  # balance usable on future orders
    Column("updated_at", String(32)),
)

products = Table(
    "products", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False),
    Column("category", String(20), nullable=False),  # apparel, footwear, electronics, home, personal_care, gift_card
)

variants = Table(
    "variants", metadata,
    Column("id", Integer, primary_key=True),
    Column("product_id", Integer, ForeignKey("products.id"), nullable=False),
    Column("option", String(40), nullable=False),  # size, colour or denomination
    Column("price", Numeric(12, 2), nullable=False),
    Column("stock", Integer, nullable=False),
)

orders = Table(
    "orders", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_number", String(10), nullable=False, unique=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("status", String(12), nullable=False),  # processing | shipped | delivered | cancelled
    Column("placed_on", String(10), nullable=False),
    Column("promised_by", String(10), nullable=False),  # the delivery date promised at checkout
    Column("delivered_on", String(10)),
    Column("ship_street", String(80), nullable=False),
    Column("ship_city", String(40), nullable=False),
    Column("ship_zip", String(10), nullable=False),
    Column("total_amount", Numeric(12, 2), nullable=False),
    Column("updated_at", String(32)),
)

order_items = Table(
    "order_items", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False),
    Column("variant_id", Integer, ForeignKey("variants.id"), nullable=False),
    Column("quantity", Integer, nullable=False),
    Column("unit_price", Numeric(12, 2), nullable=False),
    # ordered | delivered | return_requested | exchange_requested | cancelled
    Column("status", String(20), nullable=False),
)

payments = Table(
    "payments", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False),
    Column("method", String(20), nullable=False),  # credit_card | paypal | gift_card
    Column("card_last4", String(4)),
    Column("amount", Numeric(12, 2), nullable=False),
)

refunds = Table(
    "refunds", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False),
    Column("payment_id", Integer, ForeignKey("payments.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # issued
    Column("reason", String(200)),
)

returns = Table(
    "returns", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False),
    Column("order_item_id", Integer, ForeignKey("order_items.id"), nullable=False),
    Column("kind", String(10), nullable=False),  # return | exchange
    Column("new_variant_id", Integer, ForeignKey("variants.id")),  # exchanges only
    Column("status", String(12), nullable=False),  # requested
    Column("reason", String(200)),
)

credit_ledger = Table(
    "credit_ledger", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("order_id", Integer, ForeignKey("orders.id")),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("kind", String(12), nullable=False),  # goodwill
    Column("note", String(200)),
)

credit_approvals = Table(
    "credit_approvals", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # pending | approved | rejected
    Column("reason", String(200)),
)

support_cases = support_cases_table(
    metadata,
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
    Column("order_id", Integer, ForeignKey("orders.id")),
)

# one row per customer the agent authenticated (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False),
)

audit_log = audit_log_table(metadata, autoincrement="auto")
