"""Mock task families: a plain transfer, and a nickname change with a held-back fact."""


def generate_tasks(seed: int = 0) -> list[dict]:
    tasks = []
    for amount in (5, 20):
        tasks.append({
            "id": f"mock/transfer/{amount}",
            "domain": "mock",
            "split": "train",
            "family": "transfer",
            "user": {
                "persona": "Ada, a customer.",
                "instructions": f"Send {amount} dollars from account 1 to account 2.",
                "private_facts": {"owner_name": {"value": "Ada", "keywords": ["name", "owner"]}},
                "opening_message": f"Please send ${amount} from my account 1 to account 2.",
            },
            "reference": [
                {"say": "Can you confirm the owner name on the account?"},
                {"tool": "get_account", "arguments": {"account_id": 1}},
                {"tool": "transfer", "arguments": {"from_account": 1, "to_account": 2, "amount": amount,
                                                   "memo": "requested"}},
                {"say": "Done: the transfer is complete."},
            ],
            "checks": {
                "expected": [
                    {"op": "update", "table": "accounts", "key": {"id": 1}, "values": {"balance": 100 - amount}},
                    {"op": "update", "table": "accounts", "key": {"id": 2}, "values": {"balance": 50 + amount}},
                    {"op": "insert", "table": "transfers",
                     "values": {"from_account": 1, "to_account": 2, "amount": amount}},
                ],
            },
            "turn_limit": 10,
        })
    tasks.append({
        "id": "mock/nickname/1",
        "domain": "mock",
        "split": "train",
        "family": "nickname",
        "user": {
            "persona": "Bob.",
            "instructions": "Name account 2 'savings'.",
            "private_facts": {"nickname": {"value": "savings", "keywords": ["nickname", "name"]}},
            "opening_message": "I want to give my account 2 a nickname.",
        },
        "reference": [
            {"say": "Which nickname would you like?"},
            {"tool": "set_nickname", "arguments": {"account_id": 2, "nickname": "savings"}},
            {"say": "Done."},
        ],
        "turn_limit": 10,
    })
    return tasks
