"""A prompt's parts as the mock bank gives them: its tools' schemas, its policy, and requests a user makes."""

from __future__ import annotations

from tbx.messages import ToolSchema

TOOLS = [
    ToolSchema("get_account", "Look up an account by its id.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}}, "required": ["account_id"]}),
    ToolSchema("transfer", "Move money between two accounts. Frozen accounts cannot send money.",
               {"type": "object", "properties": {"from_account": {"type": "integer"}, "to_account": {"type": "integer"},
                                                 "amount": {"type": "number"}, "memo": {"type": "string"}},
                "required": ["from_account", "to_account", "amount"]}),
    ToolSchema("set_nickname", "Give an account a nickname.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}, "nickname": {"type": "string"}}}),
]
POLICY = "# Mock bank policy\n- Verify the account owner's name before moving money."
REQUESTS = ["What is the balance of account 3?", "Please look up account 12 for me.",
            "Send 50 dollars from account 1 to account 2.", "Hi, who are you?"]
