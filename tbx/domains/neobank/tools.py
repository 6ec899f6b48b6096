"""Neobank domain tools: what the bank's support agent may read and write.

The tools enforce only hard invariants (a record exists and belongs to the customer, a frozen
account cannot send money, a balance cannot go negative, a transaction is disputed once). Business
rules such as daily transfer limits, the compliance threshold, the dispute window or card fees
live in policy.md and are the agent's to follow: the tools would let the agent break them, which
is exactly what a task checks.
"""

from decimal import Decimal

from sqlalchemy import func, insert, select, update

from tbx.domains.kit import add_row, fetch_one, parse_money, record_once
from tbx.domains.neobank.schema import (
    accounts,
    audit_log,
    cards,
    compliance_reviews,
    customers,
    disputes,
    identity_checks,
    payees,
    support_cases,
    transactions,
    transfers,
)
from tbx.domains.neobank.seed import TODAY, new_card_last4
from tbx.tools import ToolFailure, tool

REPLACE_REASONS = ("damaged", "lost", "stolen")
DISPUTE_REASONS = ("unauthorized", "duplicate", "not_received", "wrong_amount")
CASE_CATEGORIES = ("identity_verification_failed", "account_frozen", "kyc_incomplete", "dispute_ineligible", "other")
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _log(db, event: str) -> None:
    add_row(db, audit_log, event=event)


def _rows(db, query) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "updated_at"} for r in db.execute(query).mappings()]


def _debit(db, account: dict, value: Decimal, description: str, kind: str) -> int:
    """Take `value` from an account and record the transaction; returns the transaction id."""
    if Decimal(str(account["balance"])) < value:
        raise ToolFailure(f"account {account['id']} has insufficient funds ({account['balance']} available)")
    db.execute(update(accounts).where(accounts.c.id == account["id"])
               .values(balance=accounts.c.balance - value, updated_at=MODIFIED))
    return add_row(db, transactions, account_id=account["id"], card_id=None, posted_on=TODAY.isoformat(),
                description=description, amount=-value, kind=kind, status="posted")


def _card_status(db, card_id: int, expected: str, new: str) -> dict:
    card = fetch_one(db, cards, card_id, "card")
    if card["status"] != expected:
        raise ToolFailure(f"card {card_id} is {card['status']}, not {expected}")
    db.execute(update(cards).where(cards.c.id == card_id).values(status=new, updated_at=MODIFIED))
    _log(db, f"card {card_id} {expected} -> {new}")
    return {"card_id": card_id, "last4": card["last4"], "status": new}


@tool("write")
def verify_customer(db, customer_number: str, date_of_birth: str, card_last4: str) -> dict:
    """Verify a caller: customer number, date of birth and the last four digits of one of their cards
    (active or frozen), as the caller stated them. A success is recorded on the customer's file.

    Returns {"verified": true, "customer": profile} when all three match, otherwise
    {"verified": false, "reason": ...} and no profile.

    Args:
        customer_number: The 8-digit customer number.
        date_of_birth: Date of birth as YYYY-MM-DD.
        card_last4: The last four digits of one of the customer's cards.
    """
    row = db.execute(select(customers).where(customers.c.customer_number == customer_number.strip())
                     ).mappings().first()
    # A mismatch is an answer, not a tool error: policy.md tells the agent what to do next.
    if row is None:
        return {"verified": False, "reason": "no customer has this customer number"}
    if date_of_birth.strip() != row["date_of_birth"]:
        return {"verified": False, "reason": "the date of birth does not match"}
    last4 = db.execute(select(cards.c.last4).where(cards.c.customer_id == row["id"],
                                                   cards.c.status != "cancelled")).scalars().all()
    if card_last4.strip() not in last4:
        return {"verified": False, "reason": "no active or frozen card of this customer ends in these digits"}
    record_once(db, identity_checks, customer_id=row["id"])
    return {"verified": True, "customer": {k: v for k, v in row.items() if k not in ("date_of_birth", "updated_at")}}


@tool("read")
def get_accounts(db, customer_id: int) -> list[dict]:
    """List a customer's accounts with balance and status.

    Args:
        customer_id: The customer's numeric ID (from verify_customer).
    """
    fetch_one(db, customers, customer_id, "customer")
    return _rows(db, select(accounts).where(accounts.c.customer_id == customer_id).order_by(accounts.c.id))


@tool("read")
def list_cards(db, customer_id: int) -> list[dict]:
    """List a customer's cards (any status) with their last four digits and linked account.

    Args:
        customer_id: The customer's numeric ID.
    """
    fetch_one(db, customers, customer_id, "customer")
    return _rows(db, select(cards).where(cards.c.customer_id == customer_id).order_by(cards.c.id))


@tool("read")
def list_transactions(db, account_id: int) -> list[dict]:
    """List all transactions of an account, newest first. Amounts are negative for money out;
    kind is card, transfer, fee or deposit; card_id is set for card payments.

    Args:
        account_id: The account's numeric ID.
    """
    fetch_one(db, accounts, account_id, "account")
    return _rows(db, select(transactions).where(transactions.c.account_id == account_id)
                 .order_by(transactions.c.posted_on.desc(), transactions.c.id.desc()))


@tool("read")
def list_payees(db, customer_id: int) -> list[dict]:
    """List the payees a customer can send transfers to.

    Args:
        customer_id: The customer's numeric ID.
    """
    fetch_one(db, customers, customer_id, "customer")
    return _rows(db, select(payees).where(payees.c.customer_id == customer_id).order_by(payees.c.id))


@tool("read")
def list_transfers(db, customer_id: int) -> list[dict]:
    """List the transfers sent from all of a customer's accounts, newest first, with their dates.

    Args:
        customer_id: The customer's numeric ID.
    """
    fetch_one(db, customers, customer_id, "customer")
    query = (select(transfers).join(accounts, accounts.c.id == transfers.c.account_id)
             .where(accounts.c.customer_id == customer_id)
             .order_by(transfers.c.created_on.desc(), transfers.c.id.desc()))
    return _rows(db, query)


@tool("write")
def freeze_card(db, card_id: int) -> dict:
    """Freeze an active card: it declines every payment until unfrozen.

    Args:
        card_id: The card's numeric ID (from list_cards).
    """
    return _card_status(db, card_id, "active", "frozen")


@tool("write")
def unfreeze_card(db, card_id: int) -> dict:
    """Unfreeze a frozen card so it can pay again.

    Args:
        card_id: The card's numeric ID (from list_cards).
    """
    return _card_status(db, card_id, "frozen", "active")


@tool("write")
def replace_card(db, card_id: int, reason_code: str) -> dict:
    """Cancel a card at once and issue a replacement on the same account. No fee is charged here:
    charge any replacement fee separately with charge_fee.

    Args:
        card_id: The numeric ID of the card to replace (from list_cards).
        reason_code: One of "damaged", "lost", "stolen".
    """
    if reason_code not in REPLACE_REASONS:
        raise ToolFailure(f"reason_code must be one of {', '.join(REPLACE_REASONS)}, not {reason_code!r}")
    card = fetch_one(db, cards, card_id, "card")
    if card["status"] == "cancelled":
        raise ToolFailure(f"card {card_id} is already cancelled")
    db.execute(update(cards).where(cards.c.id == card_id).values(status="cancelled", updated_at=MODIFIED))
    new_id = db.execute(select(func.max(cards.c.id))).scalar_one() + 1
    db.execute(insert(cards).values(id=new_id, customer_id=card["customer_id"], account_id=card["account_id"],
                                    last4=new_card_last4(new_id), kind=card["kind"], status="active",
                                    replaces_card_id=card_id, issue_reason=reason_code))
    _log(db, f"replace_card card={card_id} new={new_id}")
    return {"old_card_id": card_id, "old_status": "cancelled", "new_card_id": new_id,
            "new_last4": new_card_last4(new_id)}


@tool("write", free_args=("description",))
def charge_fee(db, account_id: int, amount: float, description: str) -> dict:
    """Charge a fee to an account (recorded as a fee transaction).

    Args:
        account_id: The account's numeric ID.
        amount: Dollars to charge, greater than zero, at most two decimals.
        description: What the fee is for, in a few words.
    """
    value = parse_money(amount)
    account = fetch_one(db, accounts, account_id, "account")
    transaction_id = _debit(db, account, value, description or "Fee", "fee")
    _log(db, f"charge_fee account={account_id} transaction={transaction_id}")
    return {"transaction_id": transaction_id, "amount": value}


@tool("write", free_args=("description",))
def file_dispute(db, transaction_id: int, reason_code: str, description: str) -> dict:
    """File a dispute (chargeback claim) on a posted outgoing transaction; it is marked disputed.

    Args:
        transaction_id: The transaction's numeric ID (from list_transactions).
        reason_code: One of "unauthorized", "duplicate", "not_received", "wrong_amount".
        description: What the customer says happened, in a sentence.
    """
    if reason_code not in DISPUTE_REASONS:
        raise ToolFailure(f"reason_code must be one of {', '.join(DISPUTE_REASONS)}, not {reason_code!r}")
    txn = fetch_one(db, transactions, transaction_id, "transaction")
    if txn["status"] != "posted":
        raise ToolFailure(f"transaction {transaction_id} is already {txn['status']}")
    if Decimal(str(txn["amount"])) >= 0:
        raise ToolFailure(f"transaction {transaction_id} is money received; only payments out can be disputed")
    owner = fetch_one(db, accounts, txn["account_id"], "account")["customer_id"]
    db.execute(update(transactions).where(transactions.c.id == transaction_id).values(status="disputed"))
    new_id = add_row(db, disputes, customer_id=owner, transaction_id=transaction_id, amount=-Decimal(str(txn["amount"])),
                  reason_code=reason_code, status="open", description=description)
    _log(db, f"file_dispute transaction={transaction_id} dispute={new_id}")
    return {"dispute_id": new_id, "status": "open"}


def _account_and_payee(db, account_id: int, payee_id: int) -> tuple[dict, dict]:
    account = fetch_one(db, accounts, account_id, "account")
    payee = fetch_one(db, payees, payee_id, "payee")
    if payee["customer_id"] != account["customer_id"]:
        raise ToolFailure(f"payee {payee_id} is not a payee of the owner of account {account_id}")
    return account, payee


@tool("write", free_args=("memo",))
def send_transfer(db, account_id: int, payee_id: int, amount: float, memo: str = "") -> dict:
    """Send money now from an account to one of its owner's payees.

    Args:
        account_id: The paying account's numeric ID.
        payee_id: The payee's numeric ID (from list_payees).
        amount: Dollars to send, greater than zero, at most two decimals.
        memo: A note for the payee.
    """
    value = parse_money(amount)
    account, payee = _account_and_payee(db, account_id, payee_id)
    if account["status"] != "active":
        raise ToolFailure(f"account {account_id} is {account['status']} and cannot send money")
    transaction_id = _debit(db, account, value, f"Transfer to {payee['name']}", "transfer")
    new_id = add_row(db, transfers, account_id=account_id, payee_id=payee_id, amount=value, status="completed",
                  created_on=TODAY.isoformat(), memo=memo)
    _log(db, f"send_transfer transfer={new_id} transaction={transaction_id}")
    return {"transfer_id": new_id, "amount": value, "status": "completed"}


@tool("write")
def add_payee(db, customer_id: int, name: str, routing_number: str, account_number: str) -> dict:
    """Add a payee (someone the customer can send transfers to).

    Args:
        customer_id: The customer's numeric ID.
        name: The payee's name as the customer gave it.
        routing_number: The payee bank's 9-digit routing number.
        account_number: The payee's account number (6 to 17 digits).
    """
    fetch_one(db, customers, customer_id, "customer")
    name, routing_number, account_number = name.strip(), routing_number.strip(), account_number.strip()
    if not name:
        raise ToolFailure("name must not be empty")
    if len(routing_number) != 9 or not routing_number.isdigit():
        raise ToolFailure(f"{routing_number!r} is not a 9-digit routing number")
    if not 6 <= len(account_number) <= 17 or not account_number.isdigit():
        raise ToolFailure(f"{account_number!r} is not an account number of 6 to 17 digits")
    new_id = add_row(db, payees, customer_id=customer_id, name=name, routing_number=routing_number,
                  account_number=account_number)
    _log(db, f"add_payee payee={new_id}")
    return {"payee_id": new_id, "name": name}


@tool("write", free_args=("reason",))
def open_compliance_review(db, account_id: int, payee_id: int, amount: float, reason: str) -> dict:
    """Hold a transfer for the compliance team instead of sending it. Nothing is sent or debited.

    Args:
        account_id: The paying account's numeric ID.
        payee_id: The payee's numeric ID (from list_payees).
        amount: Dollars the customer wants to send, greater than zero, at most two decimals.
        reason: What the customer says the transfer is for, in a sentence.
    """
    value = parse_money(amount)
    account, _ = _account_and_payee(db, account_id, payee_id)
    new_id = add_row(db, compliance_reviews, customer_id=account["customer_id"], account_id=account_id,
                  payee_id=payee_id, amount=value, status="pending", reason=reason)
    _log(db, f"open_compliance_review review={new_id}")
    return {"review_id": new_id, "status": "pending"}


@tool("write", free_args=("summary",))
def open_support_case(db, customer_number: str, category: str, summary: str, account_id: int = 0,
                      transaction_id: int = 0) -> dict:
    """Open a support case for the back-office team to follow up.

    Args:
        customer_number: The 8-digit customer number the case is about.
        category: One of "identity_verification_failed", "account_frozen", "kyc_incomplete",
            "dispute_ineligible", "other".
        summary: What happened and what the customer wants, in a sentence or two.
        account_id: The account concerned, or 0 for none.
        transaction_id: The transaction concerned, or 0 for none.
    """
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    owner = db.execute(select(customers.c.id).where(customers.c.customer_number == customer_number.strip())).scalar()
    if owner is None:
        raise ToolFailure(f"no customer with customer number {customer_number!r}")
    if account_id:
        fetch_one(db, accounts, account_id, "account")
    if transaction_id:
        fetch_one(db, transactions, transaction_id, "transaction")
    new_id = add_row(db, support_cases, customer_id=owner, account_id=account_id or None,
                  transaction_id=transaction_id or None, category=category, status="open", summary=summary)
    _log(db, f"open_support_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
