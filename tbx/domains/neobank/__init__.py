"""Mobile-bank domain: customers with KYC tiers and plans, accounts, cards, payees, transactions,
transfers, disputes, compliance reviews and support cases, under a bank policy with identity
checks, daily transfer limits, a compliance threshold, card fees and a dispute window."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="bench",
    volatile=("audit_log", "accounts.updated_at", "cards.updated_at", "customers.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "freeze_card", "arguments": {"card_id": 2}},
        {"tool": "open_support_case", "arguments": {"customer_number": "46028422", "category": "other",
                                                    "summary": "Asked about savings interest rates."}},
    ),
)
