"""Retail domain tools: what the store's customer-service agent may read and write.

The tools enforce only hard invariants (a record exists, an item belongs to a delivered order,
stock is not negative, refunds never exceed what was paid). Business rules such as the return
window, non-returnable categories or the goodwill approval threshold live in policy.md and are the
agent's to follow: the tools would let the agent break them, which is exactly what a task checks.
"""

import datetime as dt
from decimal import Decimal

from sqlalchemy import func, select, update

from tbx.domains.kit import add_row, fetch_one, parse_money, record_once
from tbx.domains.retail.schema import (
    audit_log,
    credit_approvals,
    credit_ledger,
    customers,
    identity_checks,
    order_items,
    orders,
    payments,
    products,
    refunds,
    returns,
    support_cases,
    variants,
)
from tbx.domains.retail.seed import TODAY
from tbx.tools import ToolFailure, tool

CASE_CATEGORIES = ("return_exception", "address_change_after_shipment", "identity_verification_failed", "other")
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _log(db, event: str) -> None:
    add_row(db, audit_log, event=event)


def _order_by_number(db, order_number: str) -> dict:
    row = db.execute(select(orders.c.id).where(orders.c.order_number == order_number.strip().upper())).first()
    if row is None:
        raise ToolFailure(f"no order with number {order_number!r}")
    return fetch_one(db, orders, row.id, "order")


def _customer_by_email(db, email: str) -> dict:
    row = db.execute(select(customers.c.id).where(func.lower(customers.c.email) == email.strip().lower())).first()
    if row is None:
        raise ToolFailure(f"no customer with email {email!r}")
    return fetch_one(db, customers, row.id, "customer")


def _delivered_item(db, order_item_id: int) -> tuple[dict, dict]:
    item = fetch_one(db, order_items, order_item_id, "order item")
    placed = fetch_one(db, orders, item["order_id"], "order")
    if placed["status"] != "delivered":
        raise ToolFailure(f"order {placed['order_number']} is {placed['status']}; only delivered items can be "
                          "returned or exchanged")
    if item["status"] != "delivered":
        raise ToolFailure(f"order item {order_item_id} is already {item['status']}")
    return item, placed


@tool("write")
def authenticate_customer(db, email: str, zip_code: str = "", order_number: str = "") -> dict:
    """Verify a customer's identity: their email address plus their billing ZIP code or one of their
    order numbers, as the customer stated them. A success is recorded on the customer's file.

    Returns {"verified": true, "customer": profile} when every detail given matches, otherwise
    {"verified": false, "reason": ...} and no profile.

    Args:
        email: The email address on the customer's account.
        zip_code: The billing ZIP code on the account.
        order_number: The number of one of the customer's orders, e.g. "R482913".
    """
    if not zip_code.strip() and not order_number.strip():
        raise ToolFailure("give zip_code or order_number together with email")
    row = db.execute(select(customers).where(func.lower(customers.c.email) == email.strip().lower())
                     ).mappings().first()
    # A mismatch is an answer, not a tool error: policy.md tells the agent what to do next.
    if row is None:
        return {"verified": False, "reason": "no account has this email address"}
    if zip_code.strip() and zip_code.strip() != row["zip_code"]:
        return {"verified": False, "reason": "the ZIP code does not match the account"}
    if order_number.strip():
        owner = db.execute(select(orders.c.customer_id).where(
            orders.c.order_number == order_number.strip().upper())).scalar()
        if owner != row["id"]:
            return {"verified": False, "reason": "the order number does not belong to this account"}
    record_once(db, identity_checks, customer_id=row["id"])
    return {"verified": True, "customer": {k: v for k, v in row.items() if k not in ("zip_code", "updated_at")}}


@tool("read")
def list_orders(db, customer_id: int) -> list[dict]:
    """List a customer's orders (newest first) with status and total.

    Args:
        customer_id: The customer's numeric ID.
    """
    fetch_one(db, customers, customer_id, "customer")
    rows = db.execute(select(orders.c.id, orders.c.order_number, orders.c.status, orders.c.placed_on,
                             orders.c.total_amount).where(orders.c.customer_id == customer_id)
                      .order_by(orders.c.placed_on.desc(), orders.c.id)).mappings()
    return [dict(r) for r in rows]


@tool("read")
def get_order(db, order_number: str) -> dict:
    """Show an order by its number: status, dates (with days since delivery as of today), shipping
    address, items (product, category, variant, price, status), payments, refunds and returns.

    Args:
        order_number: The order number, e.g. "R482913".
    """
    placed = _order_by_number(db, order_number)
    placed["today"] = TODAY.isoformat()
    if placed["delivered_on"]:
        placed["days_since_delivery"] = (TODAY - dt.date.fromisoformat(placed["delivered_on"])).days
    rows = db.execute(select(order_items, products.c.id.label("product_id"), products.c.name.label("product"),
                             products.c.category, variants.c.option)
                      .join(variants, variants.c.id == order_items.c.variant_id)
                      .join(products, products.c.id == variants.c.product_id)
                      .where(order_items.c.order_id == placed["id"]).order_by(order_items.c.id)).mappings()
    placed["items"] = [dict(r) for r in rows]
    for table, key in ((payments, "payments"), (refunds, "refunds"), (returns, "returns")):
        placed[key] = [dict(r) for r in db.execute(select(table).where(table.c.order_id == placed["id"])
                                                   .order_by(table.c.id)).mappings()]
    return placed


@tool("read")
def get_product(db, product_id: int) -> dict:
    """Show a product with all its variants (option, price, units in stock).

    Args:
        product_id: The product's numeric ID (shown on order items).
    """
    product = fetch_one(db, products, product_id, "product")
    product["variants"] = [dict(r) for r in db.execute(select(variants).where(variants.c.product_id == product_id)
                                                       .order_by(variants.c.id)).mappings()]
    return product


@tool("write", free_args=("reason",))
def return_item(db, order_item_id: int, reason: str) -> dict:
    """Open a return for one delivered order item. Money is not moved: refund separately.

    Args:
        order_item_id: The order item's numeric ID (from get_order).
        reason: Why the customer returns it, in a few words.
    """
    item, placed = _delivered_item(db, order_item_id)
    db.execute(update(order_items).where(order_items.c.id == order_item_id).values(status="return_requested"))
    new_id = add_row(db, returns, order_id=placed["id"], order_item_id=order_item_id, kind="return",
                  new_variant_id=None, status="requested", reason=reason)
    _log(db, f"return_item item={order_item_id} return={new_id}")
    return {"return_id": new_id, "order_item_id": order_item_id, "item_value": item["unit_price"] * item["quantity"]}


@tool("write", free_args=("reason",))
def exchange_item(db, order_item_id: int, new_variant_id: int, reason: str) -> dict:
    """Exchange one delivered order item for another variant; one unit of the new variant is
    reserved from stock and ships when the original comes back. No money moves.

    Args:
        order_item_id: The order item's numeric ID (from get_order).
        new_variant_id: The variant to send instead (from get_product).
        reason: Why the customer exchanges it, in a few words.
    """
    item, placed = _delivered_item(db, order_item_id)
    variant = fetch_one(db, variants, new_variant_id, "variant")
    if new_variant_id == item["variant_id"]:
        raise ToolFailure(f"order item {order_item_id} already is variant {new_variant_id}")
    if variant["stock"] < item["quantity"]:
        raise ToolFailure(f"variant {new_variant_id} has {variant['stock']} in stock, {item['quantity']} needed")
    db.execute(update(variants).where(variants.c.id == new_variant_id)
               .values(stock=variants.c.stock - item["quantity"]))
    db.execute(update(order_items).where(order_items.c.id == order_item_id).values(status="exchange_requested"))
    new_id = add_row(db, returns, order_id=placed["id"], order_item_id=order_item_id, kind="exchange",
                  new_variant_id=new_variant_id, status="requested", reason=reason)
    _log(db, f"exchange_item item={order_item_id} return={new_id}")
    return {"return_id": new_id, "order_item_id": order_item_id, "new_variant_id": new_variant_id}


@tool("write", free_args=("reason",))
def issue_refund(db, order_id: int, payment_id: int, amount: float, reason: str) -> dict:
    """Refund an amount of an order to one of the order's payments (its original payment method).

    The refunds of a payment can never add up to more than the payment.

    Args:
        order_id: The order's numeric ID.
        payment_id: The ID of the order's payment to refund to (from get_order).
        amount: Dollars to refund, greater than zero, at most two decimals.
        reason: Why the refund is made, in a few words.
    """
    value = parse_money(amount)
    placed = fetch_one(db, orders, order_id, "order")
    paid = fetch_one(db, payments, payment_id, "payment")
    if paid["order_id"] != order_id:
        raise ToolFailure(f"payment {payment_id} does not belong to order {placed['order_number']}")
    refunded = db.execute(select(func.coalesce(func.sum(refunds.c.amount), 0))
                          .where(refunds.c.payment_id == payment_id)).scalar_one()
    available = Decimal(str(paid["amount"])) - Decimal(str(refunded))
    if value > available:
        raise ToolFailure(f"refund of {value} exceeds the {available} still refundable on payment {payment_id}")
    new_id = add_row(db, refunds, order_id=order_id, payment_id=payment_id, amount=value, status="issued",
                  reason=reason)
    _log(db, f"issue_refund order={order_id} refund={new_id}")
    return {"refund_id": new_id, "amount": value, "method": paid["method"], "card_last4": paid["card_last4"]}


@tool("write", free_args=("reason",))
def cancel_order(db, order_id: int, reason: str) -> dict:
    """Cancel an order that has not shipped yet; its items go back in stock. Money is not moved:
    refund separately.

    Args:
        order_id: The order's numeric ID.
        reason: Why the order is cancelled, in a few words.
    """
    placed = fetch_one(db, orders, order_id, "order")
    if placed["status"] != "processing":
        raise ToolFailure(f"order {placed['order_number']} is {placed['status']}; only processing orders "
                          "can be cancelled")
    items = db.execute(select(order_items).where(order_items.c.order_id == order_id)).mappings().all()
    for item in items:
        db.execute(update(variants).where(variants.c.id == item["variant_id"])
                   .values(stock=variants.c.stock + item["quantity"]))
    db.execute(update(order_items).where(order_items.c.order_id == order_id).values(status="cancelled"))
    db.execute(update(orders).where(orders.c.id == order_id).values(status="cancelled", updated_at=MODIFIED))
    _log(db, f"cancel_order order={order_id}")
    return {"order_id": order_id, "status": "cancelled", "items_restocked": len(items),
            "total_amount": placed["total_amount"]}


@tool("write")
def change_shipping_address(db, order_id: int, street: str, city: str, zip_code: str) -> dict:
    """Change the shipping address of an order that has not shipped yet.

    Args:
        order_id: The order's numeric ID.
        street: House number and street, e.g. "48 Harbor Lane".
        city: The city.
        zip_code: The five-digit ZIP code.
    """
    placed = fetch_one(db, orders, order_id, "order")
    if placed["status"] in ("cancelled", "delivered"):
        raise ToolFailure(f"order {placed['order_number']} is {placed['status']}; its address cannot change")
    street, city, zip_code = street.strip(), city.strip(), zip_code.strip()
    if not street or not city:
        raise ToolFailure("street and city must not be empty")
    if len(zip_code) != 5 or not zip_code.isdigit():
        raise ToolFailure(f"{zip_code!r} is not a five-digit ZIP code")
    db.execute(update(orders).where(orders.c.id == order_id).values(
        ship_street=street, ship_city=city, ship_zip=zip_code, updated_at=MODIFIED))
    _log(db, f"change_shipping_address order={order_id}")
    return {"order_id": order_id, "ship_street": street, "ship_city": city, "ship_zip": zip_code}


def _customer_order(db, customer_id: int, order_id: int) -> dict:
    owner = fetch_one(db, customers, customer_id, "customer")
    placed = fetch_one(db, orders, order_id, "order")
    if placed["customer_id"] != customer_id:
        raise ToolFailure(f"order {placed['order_number']} does not belong to customer {customer_id}")
    return owner


@tool("write", free_args=("reason",))
def grant_store_credit(db, customer_id: int, order_id: int, amount: float, reason: str) -> dict:
    """Add goodwill store credit to a customer's balance, recorded against one of their orders.

    Args:
        customer_id: The customer's numeric ID.
        order_id: The numeric ID of the order the credit is for.
        amount: Dollars of credit, greater than zero, at most two decimals.
        reason: Why the credit is given, in a few words.
    """
    value = parse_money(amount)
    owner = _customer_order(db, customer_id, order_id)
    balance = Decimal(str(owner["store_credit"])) + value
    db.execute(update(customers).where(customers.c.id == customer_id).values(store_credit=balance,
                                                                            updated_at=MODIFIED))
    new_id = add_row(db, credit_ledger, customer_id=customer_id, order_id=order_id, amount=value, kind="goodwill",
                  note=reason)
    _log(db, f"grant_store_credit customer={customer_id} entry={new_id}")
    return {"entry_id": new_id, "amount": value, "store_credit_balance": balance}


@tool("write", free_args=("reason",))
def request_credit_approval(db, customer_id: int, order_id: int, amount: float, reason: str) -> dict:
    """File a goodwill credit for a store manager's approval. Nothing is credited until approved.

    Args:
        customer_id: The customer's numeric ID.
        order_id: The numeric ID of the order the credit is for.
        amount: Dollars of credit requested, greater than zero, at most two decimals.
        reason: The request as the manager will read it, in a sentence.
    """
    value = parse_money(amount)
    _customer_order(db, customer_id, order_id)
    new_id = add_row(db, credit_approvals, customer_id=customer_id, order_id=order_id, amount=value,
                  status="pending", reason=reason)
    _log(db, f"request_credit_approval approval={new_id}")
    return {"approval_id": new_id, "status": "pending"}


@tool("write", free_args=("summary",))
def open_support_case(db, email: str, category: str, summary: str, order_number: str = "") -> dict:
    """Open a support case for the back-office team to follow up.

    Args:
        email: The email address of the customer account the case is about.
        category: One of "return_exception", "address_change_after_shipment",
            "identity_verification_failed", "other".
        summary: What happened and what the customer wants, in a sentence or two.
        order_number: The order the case concerns, or "" when it concerns no order.
    """
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    owner = _customer_by_email(db, email)
    order_id = _order_by_number(db, order_number)["id"] if order_number.strip() else None
    new_id = add_row(db, support_cases, customer_id=owner["id"], order_id=order_id, category=category,
                  status="open", summary=summary)
    _log(db, f"open_support_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
