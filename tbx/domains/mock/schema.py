"""Mock domain tables."""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table

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

audit_log = audit_log_table(metadata)
