"""A tiny domain for tests: accounts and transfers, two families."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="train",
    volatile=("audit_log", "accounts.updated_at"),
    distractors=({"tool": "set_nickname", "arguments": {"account_id": 3, "nickname": "spare"}},),
)
