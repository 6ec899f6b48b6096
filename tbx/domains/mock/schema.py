"""Mock domain tables."""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

metadata = MetaData()

accounts = Table(
    "accounts", metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(80), nullable=False),
    Column("nickname", String(80)),
    Column("balance", Numeric(12, 2), nullable=False),
    Column("frozen", Integer, nullable=False, default=0),
    Column("updated_at", String(32)),
)

transfers = Table(
    "transfers", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("from_account", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("to_account", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("memo", String(200)),
)

audit_log = Table(
    "audit_log", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event", String(200), nullable=False),
)
