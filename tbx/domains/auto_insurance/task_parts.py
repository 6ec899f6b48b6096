"""The parts every auto insurance task family (tasks.py) is built from: the keywords the scripted user
knows each fact by and how the agent asks for it, the words of an incident, and a task's record with the
second item every third caller brings. Apart from tasks.py so that both stay readable; what counts toward a
run's identity is the tasks they generate, not these files.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from tbx.domains.auto_insurance.seed import Row
from tbx.domains.kit import ask_for, call, insert_change, private_facts, update_change

KEYWORDS = {
    "policy_number": ["policy number"],
    "date_of_birth": ["date of birth", "birth date"],
    "incident_date": ["date of the incident", "incident date"],
    "estimated_damage": ["repair estimate", "estimated damage"],
    "claim_number": ["claim number"],
    "driver_name": ["driver's full name", "driver's name"],
    "driver_birth_date": ["driver's date of birth", "driver's birth date"],
    "driver_license": ["license number", "licence number"],
    "vin": ["vehicle identification number"],
    "cancellation_date": ["cancellation date", "cancellation to take effect"],
    "new_phone": ["new phone number", "phone number"],
    "new_email": ["new email address", "email address"],
}
ASKS = {
    "policy_number": "your policy number", "date_of_birth": "your date of birth",
    "incident_date": "the date of the incident", "estimated_damage": "the repair estimate",
    "claim_number": "the claim number", "driver_name": "the new driver's full name",
    "driver_birth_date": "the new driver's date of birth", "driver_license": "their license number",
    "vin": "the car's vehicle identification number",
    "cancellation_date": "the cancellation date you want",
    "new_phone": "your new phone number", "new_email": "your new email address",
}
INCIDENTS = ("collision", "collision", "collision", "hail", "theft", "vandalism", "flood", "fire",
             "animal_strike", "glass")
WHAT_HAPPENED = {"collision": "a collision", "hail": "hail damage", "theft": "a break-in and theft of parts",
                 "vandalism": "vandalism", "flood": "flood damage", "fire": "fire damage",
                 "animal_strike": "hitting a deer", "glass": "a cracked windshield"}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _usd(amount: Any) -> str:
    return f"${float(amount):,.2f}"


def _who(rows: dict) -> tuple[Row, Row]:
    return rows["policyholders"][0], rows["policies"][0]


def _cover(rows: dict, kind: str) -> Row:
    return next(c for c in rows["coverages"] if c["coverage_type"] == kind)


def _car(car: Row) -> str:
    return f"{car['year']} {car['make']} {car['model']}"


def _task(person: Row, instructions: str, opening: str, facts: dict, rows: dict, reference: list,
          expected: list, persona: str = "", verified: bool = True) -> Built:
    """A task's record; `verified`: the reference verifies the policyholder, which leaves an identity record."""
    if verified:
        expected = [insert_change("identity_checks", policyholder_id=person["id"]), *expected]
    return {"persona": persona or f"{person['first_name']} {person['last_name']}, a Harborline Mutual "
                                  f"policyholder in {person['city']}, {person['state']}.",
            "instructions": instructions, "facts": facts, "opening": opening, "rows": rows,
            "reference": reference, "expected": expected}


def _second_item(rng: random.Random, index: int, person: Row, number: str, field: str) -> dict:
    """Every third caller also has a changed phone number or email: (facts, ask, step, expected, said)
    of that second item, or empty ones (a second shape of a family: update_contact after the change)."""
    if index % 3 != 2:
        return {"facts": {}, "ask": (), "steps": [], "expected": [], "said": "", "opening": ""}
    value = (f"+1-555-{rng.randrange(200, 999)}-{rng.randrange(10000):04d}" if field == "phone" else
             f"{person['first_name'].lower()}.{person['last_name'].lower()}@post.example")
    return {"facts": {f"new_{field}": value}, "ask": (f"new_{field}",),
            "steps": [call("update_contact", policy_number=number, field=field, value=value)],
            "expected": [update_change("policyholders", person["id"], **{field: value})],
            "said": " Your contact details are updated too.",
            "opening": f" Also, my {'phone number' if field == 'phone' else 'email address'} has changed."}
