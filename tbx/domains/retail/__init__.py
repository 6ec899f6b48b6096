"""Online retail domain: customers, orders and items, a catalog with stock, payments, returns,
exchanges, refunds, goodwill store credit with manager approvals and support cases, under a store
policy with return windows, non-returnable categories and identity checks."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="bench",
    volatile=("audit_log", "orders.updated_at", "customers.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "change_shipping_address", "arguments": {"order_id": 1, "street": "9 Quarry Rd",
                                                          "city": "Duluth", "zip_code": "55802"}},
        {"tool": "open_support_case", "arguments": {"email": "zara.adeyemi29@mail.example", "category": "other",
                                                    "summary": "Asked about gift wrapping."}},
    ),
)
