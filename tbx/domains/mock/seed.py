"""Mock domain base rows (deterministic)."""


def base_rows() -> dict[str, list[dict]]:
    return {
        "accounts": [
            {"id": 1, "owner": "Ada", "nickname": None, "balance": 100, "frozen": 0, "updated_at": None},
            {"id": 2, "owner": "Bob", "nickname": None, "balance": 50, "frozen": 0, "updated_at": None},
            {"id": 3, "owner": "Cy", "nickname": None, "balance": 10, "frozen": 1, "updated_at": None},
        ]
    }
