"""Corporate travel domain: employees and managers, hotel and flight bookings, payments, refunds,
approval requests and support cases, under a travel policy with approval and refund rules."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="bench",
    volatile=("audit_log", "bookings.updated_at", "employees.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "update_profile", "arguments": {"employee_id": 1040, "field": "phone", "value": "+1-617-555-0100"}},
        {"tool": "open_support_case", "arguments": {"employee_id": 1039, "category": "other",
                                                    "summary": "Asked about visa letters.", "booking_id": 0}},
    ),
)
