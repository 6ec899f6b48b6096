"""Mock domain tools."""

from decimal import Decimal

from sqlalchemy import insert, select, update

from tbx.domains.mock.schema import accounts, audit_log, transfers
from tbx.tools import ToolFailure, tool


def _account(db, account_id: int) -> dict:
    row = db.execute(select(accounts).where(accounts.c.id == account_id)).mappings().first()
    if row is None:
        raise ToolFailure(f"account {account_id} not found")
    return dict(row)


@tool("read")
def get_account(db, account_id: int) -> dict:
    """Look up an account by its id.

    Args:
        account_id: The account's numeric id.
    """
    return _account(db, account_id)


@tool("write", free_args=("memo",))
def transfer(db, from_account: int, to_account: int, amount: float, memo: str = "") -> dict:
    """Move money between two accounts. Frozen accounts cannot send money.

    Args:
        from_account: Id of the paying account.
        to_account: Id of the receiving account.
        amount: Amount in dollars, greater than zero.
        memo: Free-text note.
    """
    source = _account(db, from_account)
    _account(db, to_account)
    value = Decimal(str(amount))
    if value <= 0:
        raise ToolFailure("amount must be greater than zero")
    if source["frozen"]:
        raise ToolFailure(f"account {from_account} is frozen")
    if source["balance"] < value:
        raise ToolFailure(f"account {from_account} has insufficient funds")
    db.execute(update(accounts).where(accounts.c.id == from_account)
               .values(balance=accounts.c.balance - value, updated_at="now"))
    db.execute(update(accounts).where(accounts.c.id == to_account)
               .values(balance=accounts.c.balance + value, updated_at="now"))
    new_id = db.execute(insert(transfers).values(from_account=from_account, to_account=to_account,
                                                 amount=value, memo=memo)).inserted_primary_key[0]
    db.execute(insert(audit_log).values(event=f"transfer {new_id}"))
    return {"transfer_id": new_id, "status": "done"}


@tool("write")
def set_nickname(db, account_id: int, nickname: str) -> str:
    """Give an account a nickname.

    Args:
        account_id: The account's numeric id.
        nickname: The new nickname.
    """
    _account(db, account_id)
    db.execute(update(accounts).where(accounts.c.id == account_id).values(nickname=nickname))
    return "ok"
