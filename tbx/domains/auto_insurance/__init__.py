"""Personal auto insurance domain: policyholders, policies with coverages, vehicles and drivers,
claims (first notice of loss, reserves, payouts, adjuster reviews), endorsements, underwriting
referrals and cancellations with pro-rated refunds."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="bench",
    volatile=("audit_log", "policies.updated_at", "policyholders.updated_at", "claims.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "update_contact", "arguments": {"policy_number": "PA-789720", "field": "phone",
                                                 "value": "+1-555-201-7788"}},
        {"tool": "open_support_case", "arguments": {"policy_number": "PA-789720", "category": "other",
                                                    "summary": "Asked for a proof-of-insurance card."}},
    ),
)
