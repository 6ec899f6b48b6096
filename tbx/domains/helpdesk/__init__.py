"""IT helpdesk domain (training split): users, technicians, assets, tickets with priority SLAs,
comments, escalations and software licences, under a service desk policy with identity checks,
routing, SLA escalation and licence rules."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="train",
    volatile=("audit_log", "tickets.updated_at", "users.updated_at", "assets.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "add_comment", "arguments": {"ticket_id": 7, "visibility": "internal",
                                              "body": "Spare part ordered."}},
        {"tool": "unlock_account", "arguments": {"user_id": 30}},
    ),
)
