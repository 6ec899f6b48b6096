"""Retail domain seed: the deterministic base rows every task starts from (catalog, customers,
orders), and the row builders tasks use to add their own customers and orders on top.

Base ids stay below the task ranges (customers < 2000, orders < 5000, order items < 20000,
payments < 7000), so a task's own rows never collide with the distractor data. Variants are base
rows only: their stock follows a fixed pattern, so a task picks a variant in or out of stock.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from functools import cache
from typing import Any

Row = dict[str, Any]

TODAY = dt.date(2026, 6, 15)  # the store's "today"; mirrors policy.md
RETURN_WINDOW_DAYS = 30
NON_RETURNABLE = ("personal_care", "gift_card")
RETURN_FEE = Decimal("5.95")  # deducted from return refunds unless the customer is gold
GOODWILL_RATE = Decimal("0.10")
GOODWILL_APPROVAL_ABOVE = Decimal("30.00")
TIERS = ("bronze", "silver", "gold")
CATALOG = (  # id, name, category, price, options (variant id = product id × 10 + position)
    (1, "Merino Crew Sweater", "apparel", "89.00", ("S", "M", "L", "XL")),
    (2, "Classic Oxford Shirt", "apparel", "49.50", ("S", "M", "L", "XL")),
    (3, "Trail Runner 2 Shoes", "footwear", "129.90", ("US 8", "US 9", "US 10", "US 11")),
    (4, "Canvas Low-Top Sneakers", "footwear", "64.00", ("US 7", "US 8", "US 9", "US 10")),
    (5, "Wireless Earbuds Pro", "electronics", "149.00", ("Black", "White", "Navy")),
    (6, "Smart Desk Lamp", "electronics", "59.90", ("Black", "Silver", "White")),
    (7, "Linen Duvet Cover", "home", "119.00", ("Full", "Queen", "King")),
    (8, "Cast Iron Skillet", "home", "39.90", ("8 inch", "10 inch", "12 inch")),
    (9, "Vitamin C Serum", "personal_care", "28.50", ("30 ml", "50 ml")),
    (10, "Electric Toothbrush", "personal_care", "79.90", ("White", "Black")),
    (11, "Store Gift Card", "gift_card", "50.00", ("$50",)),
    (12, "Rain Shell Jacket", "apparel", "139.00", ("S", "M", "L", "XL")),
    (13, "Yoga Leggings", "apparel", "58.00", ("XS", "S", "M", "L")),
    (14, "Ceramic Pour-Over Set", "home", "44.90", ("White", "Sage")),
)
FIRST_NAMES = ("Avery", "Jordan", "Priya", "Mateo", "Hana", "Elliot", "Nia", "Oscar", "Lucia", "Theo",
               "Imani", "Rowan", "Sana", "Felix", "Maya", "Caleb", "Ines", "Kofi", "Lena", "Arjun",
               "Clara", "Dmitri", "Esme", "Hugo", "Zara", "Idris", "Talia", "Bruno", "Yara", "Quinn")
LAST_NAMES = ("Bennett", "Castillo", "Nguyen", "Hoffman", "Adeyemi", "Marsh", "Kaur", "Lindgren", "Ferraro",
              "Okoro", "Pham", "Delgado", "Hayes", "Yilmaz", "Sorensen", "Barros", "Chen", "Whitaker",
              "Mbeki", "Laurent", "Novak", "Greer", "Ibarra", "Koch", "Ruiz", "Tanner", "Vance", "Wolfe")
STREETS = ("Maple Ave", "Harbor Lane", "Cedar St", "Willow Way", "Birch Rd", "Elm St", "Juniper Ct",
           "Orchard Blvd", "Summit Dr", "Lakeview Ter", "Mill Race Rd", "Aspen Pl")
CITIES = (("Portland", "04101"), ("Burlington", "05401"), ("Madison", "53703"), ("Boulder", "80302"),
          ("Asheville", "28801"), ("Savannah", "31401"), ("Tucson", "85701"), ("Eugene", "97401"),
          ("Ann Arbor", "48104"), ("Providence", "02903"), ("Santa Fe", "87501"), ("Duluth", "55802"))


def days_ago(days: int) -> str:
    return (TODAY - dt.timedelta(days=days)).isoformat()


def money(value: Decimal) -> float:
    """A dollar amount as the float a reference step or check carries (exact to the cent)."""
    return float(value.quantize(Decimal("0.01")))


def variant_rows() -> list[Row]:
    """Every variant of the catalog; position 3 of a product (or 2 of a two-variant one) is sold out."""
    rows = []
    for product_id, _, _, price, options in CATALOG:
        sold_out = 3 if len(options) > 2 else 2 if product_id in (9, 14) else 0
        for k, option in enumerate(options, start=1):
            stock = 0 if k == sold_out else 4 + (product_id * 7 + k * 5) % 19
            rows.append({"id": product_id * 10 + k, "product_id": product_id, "option": option,
                         "price": Decimal(price), "stock": stock})
    return rows


def product_of(variant: Row) -> tuple:
    return next(p for p in CATALOG if p[0] == variant["product_id"])


def describe(variant: Row) -> str:
    """'the Trail Runner 2 Shoes (US 9)'."""
    return f"the {product_of(variant)[1]} ({variant['option']})"


def stocked(returnable: bool = True, multi: bool = False) -> list[Row]:
    """In-stock variants (of returnable products, of products with three or more variants)."""
    return [v for v in variant_rows() if v["stock"] > 0
            and (product_of(v)[2] not in NON_RETURNABLE) == returnable and (not multi or len(product_of(v)[4]) > 2)]


def pick_lines(rng: random.Random, count: int, pool: list[Row]) -> list[tuple[Row, int]]:
    """`count` variants of distinct products from `pool`, each with a quantity."""
    chosen: list[Row] = []
    for variant in rng.sample(pool, len(pool)) if count else ():
        if all(v["product_id"] != variant["product_id"] for v in chosen):
            chosen.append(variant)
        if len(chosen) == count:
            break
    return [(v, rng.choice((1, 1, 1, 2))) for v in chosen]


def new_order_number(rng: random.Random, used: set[str]) -> str:
    while True:
        number = f"R{rng.randrange(100000, 1000000)}"
        if number not in used:
            used.add(number)
            return number


def customer(rng: random.Random, customer_id: int, tier: str) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    _, zip_code = rng.choice(CITIES)
    return {"id": customer_id, "first_name": first, "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{customer_id % 1000}@mail.example",
            "phone": f"+1-555-{rng.randrange(100, 1000)}-{rng.randrange(10000):04d}", "zip_code": zip_code,
            "loyalty_tier": tier, "store_credit": Decimal(rng.choice((0, 0, 0, 5, 10, 15))), "updated_at": None}


def address(rng: random.Random) -> tuple[str, str, str]:
    city, zip_code = rng.choice(CITIES)
    return f"{rng.randrange(2, 990)} {rng.choice(STREETS)}", city, zip_code


def order_dates(rng: random.Random, status: str, delivered_days_ago: int, late: bool) -> dict[str, str | None]:
    """placed_on, promised_by, delivered_on for an order in `status`."""
    if status in ("delivered", "cancelled") and delivered_days_ago:
        delivered = delivered_days_ago
        promised = delivered + rng.randrange(2, 6) if late else delivered - rng.randrange(0, 3)
        return {"placed_on": days_ago(max(promised, delivered) + rng.randrange(4, 8)),
                "promised_by": days_ago(promised),
                "delivered_on": days_ago(delivered) if status == "delivered" else None}
    placed = rng.randrange(1, 4) if status == "processing" else rng.randrange(3, 6)
    return {"placed_on": days_ago(placed), "promised_by": days_ago(-rng.randrange(2, 6)), "delivered_on": None}


def order(rng: random.Random, ids: dict[str, int], number: str, owner: Row, status: str, lines: list[tuple[Row, int]],
          delivered_days_ago: int = 0, late: bool = False) -> dict[str, list[Row]]:
    """One order of `owner` with its items and its payment; `ids` gives the first free id per table
    (order, item, payment) and is advanced."""
    street, city, zip_code = address(rng)
    total = sum((v["price"] * q for v, q in lines), Decimal(0))
    order_id = ids["orders"]
    row = {"id": order_id, "order_number": number, "customer_id": owner["id"], "status": status,
           **order_dates(rng, status, delivered_days_ago, late), "ship_street": street, "ship_city": city,
           "ship_zip": zip_code, "total_amount": total, "updated_at": None}
    item_status = {"delivered": "delivered", "cancelled": "cancelled"}.get(status, "ordered")
    items = []
    for variant, quantity in lines:
        items.append({"id": ids["order_items"], "order_id": order_id, "variant_id": variant["id"],
                      "quantity": quantity, "unit_price": variant["price"], "status": item_status})
        ids["order_items"] += 1
    method = rng.choice(("credit_card", "credit_card", "credit_card", "paypal"))
    paid = {"id": ids["payments"], "order_id": order_id, "method": method,
            "card_last4": f"{rng.randrange(10000):04d}" if method == "credit_card" else None, "amount": total}
    ids["orders"] += 1
    ids["payments"] += 1
    return {"orders": [row], "order_items": items, "payments": [paid]}


def merge(into: dict[str, list[Row]], more: dict[str, list[Row]]) -> dict[str, list[Row]]:
    for table, rows in more.items():
        into.setdefault(table, []).extend(rows)
    return into


def _base_orders(rng: random.Random, people: list[Row], stock: list[Row]) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    ids = {"orders": 1, "order_items": 1, "payments": 1}
    used: set[str] = set()
    statuses = ("delivered",) * 5 + ("shipped", "processing", "cancelled")
    for n in range(45):
        owner = people[n % len(people)]
        status = "processing" if n == 0 else statuses[n % len(statuses)]
        lines = [(v, rng.choice((1, 1, 2))) for v in rng.sample(stock, rng.randrange(1, 4))]
        merge(rows, order(rng, ids, new_order_number(rng, used), owner, status, lines,
                          rng.randrange(2, 90), rng.random() < 0.2))
    delivered = [o for o in rows["orders"] if o["status"] == "delivered"]
    first_item = {i["order_id"]: i for i in reversed(rows["order_items"])}
    rows["returns"], rows["refunds"] = [], []
    for k, placed in enumerate(delivered[:3], start=1):
        item = first_item[placed["id"]]
        item["status"] = "return_requested"
        rows["returns"].append({"id": k, "order_id": placed["id"], "order_item_id": item["id"], "kind": "return",
                                "new_variant_id": None, "status": "requested", "reason": "did not fit"})
        rows["refunds"].append({"id": k, "order_id": placed["id"], "payment_id": placed["id"],
                                "amount": item["unit_price"] * item["quantity"], "status": "issued",
                                "reason": "returned item"})
    return rows


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260615)
    people = [customer(rng, 1001 + n, TIERS[n % 3]) for n in range(30)]
    stock = variant_rows()
    rows = {"customers": people, "products": [{"id": p, "name": n, "category": c} for p, n, c, _, _ in CATALOG],
            "variants": stock}
    rows.update(_base_orders(rng, people, [v for v in stock if v["stock"] > 0]))
    rows["credit_ledger"] = [{"id": 1, "customer_id": 1004, "order_id": None, "amount": Decimal(10),
                              "kind": "goodwill", "note": "birthday credit"}]
    rows["credit_approvals"] = [{"id": 1, "customer_id": 1007, "order_id": 7, "amount": Decimal("42.00"),
                                 "status": "approved", "reason": "late delivery"}]
    rows["support_cases"] = [{"id": 1, "customer_id": 1010, "order_id": None, "category": "other",
                              "status": "open", "summary": "Asked about a price match."}]
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every retail task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
