"""Retail task families, generated deterministically from a seed.

Each family is one business situation from policy.md; its instances vary the customer, loyalty
tier, products, quantities, dates and which identity proof is used. Four families are refusals or
escalations that still leave a positive record (a support case or an approval request), so a
do-nothing agent fails them too. References are written for the scripted user: each question
names the facts it needs by their keywords, and the closing statement has no question mark and no
fact keyword.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.kit import ask_for, bench_tasks, call, non_empty, plain, private_facts, update_change
from tbx.domains.retail.seed import (
    CITIES,
    GOODWILL_APPROVAL_ABOVE,
    GOODWILL_RATE,
    RETURN_FEE,
    RETURN_WINDOW_DAYS,
    TIERS,
    Row,
    address,
    base_rows,
    customer,
    describe,
    merge,
    money,
    new_order_number,
    order,
    pick_lines,
    product_of,
    stocked,
    variant_rows,
)

INSTANCES_PER_FAMILY = 10
KEYWORDS = {
    "email": ["email address", "e-mail"],
    "zip_code": ["zip code", "postal code"],
    "order_number": ["order number"],
    "new_address": ["new shipping address", "new address"],
    "if_unavailable": ["refund instead"],
}
ASKS = {"email": "the email address on your account", "zip_code": "the billing ZIP code on your account",
        "order_number": "the order number", "new_address": "the new shipping address (street, city, ZIP)"}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _fee(owner: Row) -> Decimal:
    return Decimal(0) if owner["loyalty_tier"] == "gold" else RETURN_FEE


class _Task:
    """One task's own rows: a customer, their orders, fresh ids above the base ranges."""

    def __init__(self, rng: random.Random, used: set[str], tier: str | None = None):
        self.rng, self.used = rng, used
        self.ids = {"orders": rng.randrange(5000, 6900), "order_items": rng.randrange(20000, 29900),
                    "payments": rng.randrange(7000, 8900)}
        self.owner = customer(rng, rng.randrange(2000, 5000), tier or rng.choice(TIERS))
        self.rows: dict[str, list[Row]] = {"customers": [self.owner]}

    def order(self, status: str, lines: list[tuple[Row, int]], days: int = 0, late: bool = False) -> dict:
        """Add an order; with even odds an older delivered order comes first, as history."""
        if self.rng.random() < 0.5:
            merge(self.rows, order(self.rng, self.ids, new_order_number(self.rng, self.used), self.owner,
                                   "delivered", [(self.rng.choice(stocked()), 1)], self.rng.randrange(60, 200)))
        rows = order(self.rng, self.ids, new_order_number(self.rng, self.used), self.owner, status, lines, days, late)
        merge(self.rows, rows)
        return {"order": rows["orders"][0], "items": rows["order_items"], "payment": rows["payments"][0]}

    def verify(self, index: int, *more: str) -> tuple[list[dict], dict, dict]:
        """(ask + authenticate steps, authenticate proof, facts) with ZIP or order-number proof. Every
        third customer has no order number at hand: the agent finds the order in their list (a
        second shape of each family: list_orders before get_order)."""
        number = self.rows["orders"][-1]["order_number"]
        by_zip, lookup = index % 3 != 2, index % 3 == 1
        proof = {"zip_code": self.owner["zip_code"]} if by_zip else {"order_number": number}
        held = {} if lookup else {"order_number": number}
        asked = ("email", *proof, *(n for n in held if n not in proof))
        steps = [_ask(*asked, *more), call("authenticate_customer", email=self.owner["email"], **proof)]
        if lookup:
            steps.append(call("list_orders", customer_id=self.owner["id"]))
        return steps, proof, {"email": self.owner["email"], **proof, **held}

    @property
    def identity(self) -> dict:
        """The identity record a successful authentication leaves (checked like any write)."""
        return {"op": "insert", "table": "identity_checks", "values": {"customer_id": self.owner["id"]}}

    @property
    def name(self) -> str:
        return f"{self.owner['first_name']} {self.owner['last_name']}"


def _returned(placed: dict, items: list[Row], fee: Decimal, reason: str) -> tuple[list[dict], list[dict], Decimal]:
    """Steps and expected changes of returning `items` of an order in one refund, and the refund."""
    refund = sum((i["unit_price"] * i["quantity"] for i in items), Decimal(0)) - fee
    steps = [call("return_item", order_item_id=i["id"], reason=reason) for i in items]
    steps.append(call("issue_refund", order_id=placed["order"]["id"], payment_id=placed["payment"]["id"],
                       amount=money(refund), reason="returned items"))
    expected = [update_change("order_items", i["id"], status="return_requested") for i in items]
    expected += [{"op": "insert", "table": "returns", "values": {"order_id": placed["order"]["id"],
                  "order_item_id": i["id"], "kind": "return", "status": "requested"}} for i in items]
    expected.append({"op": "insert", "table": "refunds", "values": {
        "order_id": placed["order"]["id"], "payment_id": placed["payment"]["id"], "amount": money(refund),
        "status": "issued"}})
    return steps, expected, refund


def _variant(item: Row) -> Row:
    return next(v for v in variant_rows() if v["id"] == item["variant_id"])


def _listing(items: list[Row]) -> str:
    names = [describe(_variant(i)) for i in items]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _refund_note(refund: Decimal, fee: Decimal) -> str:
    detail = f"the item value less the ${fee} return shipping fee" if fee else "no return fee for gold members"
    return f"${refund} ({detail}) is refunded to your original payment method"


def _return_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Return one or two items in the window; or a mix where one item is non-returnable."""
    task = _Task(rng, used, TIERS[index % 3])
    days = RETURN_WINDOW_DAYS if index == 0 else rng.randrange(2, RETURN_WINDOW_DAYS)
    if kind == "return_items":
        lines = pick_lines(rng, 2 + index % 2, stocked())
        placed = task.order("delivered", lines, days)
        wanted = eligible = placed["items"][: 1 + index % 2]
    else:
        lines = pick_lines(rng, 1, stocked()) + pick_lines(rng, 1, stocked(returnable=False))
        placed = task.order("delivered", lines, days)
        wanted, eligible = placed["items"], placed["items"][:1]
    steps, proof, facts = task.verify(index)
    steps.append(call("get_order", order_number=placed["order"]["order_number"]))
    fee = _fee(task.owner)
    writes, expected, refund = _returned(placed, eligible, fee, "customer return")
    refused = "" if kind == "return_items" else (f" {_capital(describe(_variant(wanted[1])))} is in a "
                                                 "non-returnable category, so it cannot be returned.")
    closing = {"say": f"Your return of {_listing(eligible)} is open and {_refund_note(refund, fee)}.{refused}"}
    rule = {"id": "told_refund", "rule": "The agent told the customer how much is refunded.",
            "evidence": [f"${refund}"]}
    return {
        "judge": [rule] if kind == "return_items" else [],
        "persona": f"{task.name}, a Northwind Outfitters customer ({task.owner['loyalty_tier']} tier).",
        "instructions": f"Return {_listing(wanted)} from your order delivered {days} days ago and get your money "
                        "back. Accept what the agent says policy allows.",
        "facts": _facts(**facts), "opening": f"Hi, I'd like to return {_listing(wanted)} from a recent order.",
        "rows": task.rows, "reference": steps + writes + [closing], "expected": [task.identity, *expected],
    }


def _window_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """A return after the 30-day window: no return, a return-exception case for the order."""
    task = _Task(rng, used)
    days = RETURN_WINDOW_DAYS + 1 if index == 0 else rng.randrange(RETURN_WINDOW_DAYS + 2, 80)
    placed = task.order("delivered", pick_lines(rng, 1 + index % 2, stocked()), days)
    item = placed["items"][0]
    steps, proof, facts = task.verify(index)
    number = placed["order"]["order_number"]
    steps += [call("get_order", order_number=number),
              call("open_support_case", email=task.owner["email"], category="return_exception",
                    summary="Customer wants to return an item after the 30-day window.", order_number=number),
              {"say": f"{_capital(describe(_variant(item)))} was delivered {days} days ago, past our 30-day "
                      "return window, so I cannot open a return or refund it. I opened a case for a supervisor "
                      "to review; no refund is guaranteed."}]
    return {
        "persona": f"{task.name}, a Northwind Outfitters customer who was travelling.",
        "instructions": f"Return {describe(_variant(item))}; you were away and it was delivered {days} days ago. "
                        "If the agent says it is too late, ask for an exception to be reviewed.",
        "facts": _facts(**facts), "opening": f"Hello, I want to return {describe(_variant(item))} I ordered.",
        "rows": task.rows, "reference": steps,
        "expected": [task.identity, {"op": "insert", "table": "support_cases", "values": {
            "customer_id": task.owner["id"], "order_id": placed["order"]["id"], "category": "return_exception",
            "status": "open"}}],
    }


def _exchange_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Exchange for another variant of the same product: in stock, or sold out (return instead)."""
    task = _Task(rng, used, TIERS[index % 3])
    line = pick_lines(rng, 1, stocked(multi=True))[0]
    siblings = [v for v in variant_rows() if v["product_id"] == line[0]["product_id"] and v["id"] != line[0]["id"]]
    wanted = rng.choice([v for v in siblings if (v["stock"] > 0) == (kind == "exchange_variant")])
    days = rng.randrange(2, RETURN_WINDOW_DAYS + 1)
    others = [v for v in stocked() if v["product_id"] != line[0]["product_id"]]
    placed = task.order("delivered", [(line[0], 1)] + pick_lines(rng, index % 2, others), days)
    item, product = placed["items"][0], product_of(line[0])
    steps, proof, facts = task.verify(index)
    steps += [call("get_order", order_number=placed["order"]["order_number"]),
              call("get_product", product_id=product[0])]
    opening = f"Hi, I need to exchange {describe(line[0])} for the {wanted['option']} instead."
    if kind == "exchange_variant":
        steps += [call("exchange_item", order_item_id=item["id"], new_variant_id=wanted["id"], reason="wrong size"),
                  {"say": f"Done: the {product[1]} in {wanted['option']} is reserved for you and ships when the "
                          f"{line[0]['option']} comes back. Exchanges are free."}]
        expected = [
            update_change("order_items", item["id"], status="exchange_requested"),
            update_change("variants", wanted["id"], stock=wanted["stock"] - 1),
            {"op": "insert", "table": "returns", "values": {"order_id": placed["order"]["id"],
             "order_item_id": item["id"], "kind": "exchange", "new_variant_id": wanted["id"], "status": "requested"}}]
        return {"persona": f"{task.name}, a customer who ordered the wrong size.", "facts": _facts(**facts),
                "instructions": f"Exchange {describe(line[0])} for the {wanted['option']}.", "opening": opening,
                "rows": task.rows, "reference": steps, "expected": [task.identity, *expected]}
    fee = _fee(task.owner)
    steps.append({"say": f"The {product[1]} in {wanted['option']} is out of stock, so I cannot exchange it. "
                         "Would you like to return it for a refund instead?"})
    writes, expected, refund = _returned(placed, [item], fee, "requested variant out of stock")
    closing = {"say": f"Your return of {describe(line[0])} is open and {_refund_note(refund, fee)}."}
    return {"persona": f"{task.name}, a customer who ordered the wrong size.",
            "instructions": f"Exchange {describe(line[0])} for the {wanted['option']}; if that is not possible, "
                            "return it for a refund.",
            "facts": _facts(**facts, if_unavailable="Yes, please return it for a refund instead."),
            "opening": opening, "rows": task.rows, "reference": steps + writes + [closing], "expected": [task.identity, *expected]}


def _address_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Change a processing order's address; once shipped, open a carrier-redirect case instead."""
    task = _Task(rng, used)
    status = "processing" if kind == "change_address" else "shipped"
    placed = task.order(status, pick_lines(rng, 1 + index % 3, stocked()))
    street, city, zip_code = address(rng)
    while city == placed["order"]["ship_city"]:
        street, city, zip_code = address(rng)
    new = f"{street}, {city}, {zip_code}"
    order_id, number = placed["order"]["id"], placed["order"]["order_number"]
    if kind == "change_address":
        steps, proof, facts = task.verify(index, "new_address")
        steps += [call("get_order", order_number=number),
                  call("change_shipping_address", order_id=order_id, street=street, city=city, zip_code=zip_code),
                  {"say": f"Done: your order will ship to {street}, {city}."}]
        return {"persona": f"{task.name}, a customer who just moved.", "facts": _facts(**facts, new_address=new),
                "instructions": "Have your order shipped to your new address.",
                "opening": "Hi, I moved last week; can my recent order go to my new place?",
                "rows": task.rows, "reference": steps, "expected": [
                    task.identity, {"op": "update", "table": "orders", "key": {"id": order_id},
                     "values": {"ship_street": street, "ship_city": city, "ship_zip": zip_code}}]}
    steps, proof, facts = task.verify(index)
    steps += [call("get_order", order_number=number),
              call("open_support_case", email=task.owner["email"], category="address_change_after_shipment",
                    summary=f"Customer asks to redirect the parcel to {new}.", order_number=number),
              {"say": "Your order has already shipped, so I cannot change its address. I opened a case for our "
                      "carrier team to try to redirect the parcel; the redirect is not guaranteed."}]
    return {"persona": f"{task.name}, a customer who just moved.", "facts": _facts(**facts),
            "instructions": f"Have your order sent to {new} instead of your old address.",
            "opening": f"Hi, please send my order to {new} instead; I just moved.",
            "rows": task.rows, "reference": steps, "expected": [
                task.identity, {"op": "insert", "table": "support_cases", "values": {
                    "customer_id": task.owner["id"], "order_id": order_id,
                    "category": "address_change_after_shipment", "status": "open"}}]}


def _cancel_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Cancel a processing order: every item back in stock, the full total refunded."""
    task = _Task(rng, used)
    placed = task.order("processing", pick_lines(rng, 1 + index % 3, stocked() + stocked(returnable=False)))
    steps, proof, facts = task.verify(index)
    total, order_id = placed["order"]["total_amount"], placed["order"]["id"]
    steps += [call("get_order", order_number=placed["order"]["order_number"]),
              call("cancel_order", order_id=order_id, reason="customer changed mind"),
              call("issue_refund", order_id=order_id, payment_id=placed["payment"]["id"], amount=money(total),
                    reason="order cancelled"),
              {"say": f"Your order is cancelled and the full ${total} is refunded to your original payment method."}]
    expected = [{"op": "update", "table": "orders", "key": {"id": order_id}, "values": {"status": "cancelled"}}]
    stock = {v["id"]: v["stock"] for v in variant_rows()}
    for item in placed["items"]:
        expected += [update_change("order_items", item["id"], status="cancelled"),
                     update_change("variants", item["variant_id"], stock=stock[item["variant_id"]] + item["quantity"])]
    expected.append({"op": "insert", "table": "refunds", "values": {
        "order_id": order_id, "payment_id": placed["payment"]["id"], "amount": money(total), "status": "issued"}})
    return {"persona": f"{task.name}, a customer who changed their mind.", "facts": _facts(**facts),
            "instructions": f"Cancel your order of {_listing(placed['items'])} placed {placed['order']['placed_on']} "
                            "and get your money back.",
            "opening": f"Hi, I'd like to cancel the order I placed on {placed['order']['placed_on']}.",
            "rows": task.rows, "reference": steps, "expected": [task.identity, *expected]}


def _goodwill_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """A late delivery: 10% goodwill credit, granted up to $30 or filed for a manager's approval."""
    task = _Task(rng, used)
    direct = kind == "goodwill_credit"
    while True:
        lines = pick_lines(rng, 1 + rng.randrange(3), stocked() + stocked(returnable=False))
        credit = sum((v["price"] * q for v, q in lines), Decimal(0)) * GOODWILL_RATE
        if (credit <= GOODWILL_APPROVAL_ABOVE) == direct and credit >= 4:
            break
    placed = task.order("delivered", lines, rng.randrange(2, 20), late=True)
    late = f"it was promised by {placed['order']['promised_by']} but came on {placed['order']['delivered_on']}"
    steps, proof, facts = task.verify(index)
    ids = {"customer_id": task.owner["id"], "order_id": placed["order"]["id"]}
    steps.append(call("get_order", order_number=placed["order"]["order_number"]))
    if direct:
        steps += [call("grant_store_credit", **ids, amount=money(credit), reason="late delivery"),
                  {"say": f"Sorry about the delay: {late}. I added ${credit:.2f} of store credit to your account."}]
        expected = [{"op": "update", "table": "customers", "key": {"id": task.owner["id"]},
                     "values": {"store_credit": money(task.owner["store_credit"] + credit)}},
                    {"op": "insert", "table": "credit_ledger", "values": {**ids, "amount": money(credit),
                                                                          "kind": "goodwill"}}]
    else:
        steps += [call("request_credit_approval", **ids, amount=money(credit), reason="late delivery goodwill"),
                  {"say": f"Sorry about the delay: {late}. A ${credit:.2f} credit needs a store manager's "
                          "approval, so I filed the request; it is added once a manager approves it."}]
        expected = [{"op": "insert", "table": "credit_approvals", "values": {**ids, "amount": money(credit),
                                                                             "status": "pending"}}]
    return {"persona": f"{task.name}, a customer whose order arrived late.", "facts": _facts(**facts),
            "instructions": "Your last order arrived days after the promised date; ask for some compensation and "
                            "accept store credit.",
            "opening": "Hi, my last order arrived days later than promised. Can you do anything about that?",
            "rows": task.rows, "reference": steps, "expected": [task.identity, *expected]}


def _impostor_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Verification fails (an old ZIP code, or someone else's order number): no change, an identity case.
    Every fourth caller verifies with their own ZIP code but asks about a neighbour's order: the
    order is not theirs, so no change; their identity record is what the checks see."""
    task = _Task(rng, used)
    task.order("processing", pick_lines(rng, 1, stocked()))
    if index % 4 == 3:
        other = rng.choice([o for o in base_rows()["orders"] if o["customer_id"] != task.owner["id"]])
        proof = {"zip_code": task.owner["zip_code"]}
        return {"persona": f"{task.name}, a customer who quotes the order number of a parcel delivered to a "
                           "neighbour.",
                "instructions": f"Cancel order {other['order_number']}. Give the details you hold when asked.",
                "facts": _facts(email=task.owner["email"], **proof, order_number=other["order_number"]),
                "opening": "Hi, please cancel an order that was ordered by mistake. I have its order number.",
                "rows": task.rows,
                "reference": [_ask("email", "zip_code", "order_number"),
                              call("authenticate_customer", email=task.owner["email"], **proof),
                              call("get_order", order_number=other["order_number"]),
                              {"say": "I'm sorry, but I can't make that change under our policy: that order does "
                                      "not belong to your account, and I can only act on your own orders."}],
                "expected": [task.identity]}
    if index % 2 == 0:  # the caller holds no order number, so the ZIP code is the only proof on offer
        proof = {"zip_code": rng.choice([z for _, z in CITIES if z != task.owner["zip_code"]])}
        asked, who = ("email", "zip_code"), "gives the ZIP code of a previous address"
    else:
        other = rng.choice([o for o in base_rows()["orders"] if o["customer_id"] != task.owner["id"]])
        proof, asked = {"order_number": other["order_number"]}, ("email", "order_number")
        who = "quotes an order number from a parcel delivered to a neighbour"
    steps = [_ask(*asked), call("authenticate_customer", email=task.owner["email"], **proof),
             call("open_support_case", email=task.owner["email"], category="identity_verification_failed",
                   summary="Caller could not be verified while asking to cancel an order."),
             {"say": "I'm sorry, the details you gave do not match our records, so I cannot make any change. "
                     "I have logged this for our security team."}]
    return {"persona": f"{task.name}, a customer who {who}.",
            "instructions": "Cancel your most recent order. Give the details you hold when asked.",
            "facts": _facts(email=task.owner["email"], **proof),
            "opening": "Hi, please cancel my most recent order, I ordered it by mistake.",
            "rows": task.rows, "reference": steps, "expected": [
                {"op": "insert", "table": "support_cases", "values": {
                    "customer_id": task.owner["id"], "category": "identity_verification_failed", "status": "open"}}]}


FAMILIES: dict[str, Callable[[random.Random, set[str], int, str], Built]] = {
    "return_items": _return_family,
    "return_partly_eligible": _return_family,
    "return_window_closed": _window_family,
    "exchange_variant": _exchange_family,
    "exchange_unavailable": _exchange_family,
    "change_address": _address_family,
    "address_after_shipment": _address_family,
    "cancel_order": _cancel_family,
    "goodwill_credit": _goodwill_family,
    "goodwill_needs_approval": _goodwill_family,
    "identity_mismatch": _impostor_family,
}




def generate_tasks(seed: int = 0) -> list[dict]:
    """All retail tasks for `seed`: INSTANCES_PER_FAMILY of every family, same seed → same tasks."""
    used = {o["order_number"] for o in base_rows()["orders"]}
    return bench_tasks("retail", FAMILIES, seed, INSTANCES_PER_FAMILY, used, seed_rows=lambda rows: plain(non_empty(rows)))
