"""The parts every travel task family (tasks.py) is built from: the keywords the scripted user knows
each fact by and how the agent asks for it, the identity record and booking look-up steps, a traveller and
a hotel stay. Apart from tasks.py so that both stay readable; what counts toward a run's identity is the
tasks they generate, not these files.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from tbx.domains.kit import IdPool, ask_for, call, private_facts
from tbx.domains.travel.seed import MANAGERS, Row, day, hotel_booking, new_code, payment, person

KEYWORDS = {
    "employee_id": ["employee id", "employee number"],
    "last_name": ["last name", "surname", "family name"],
    "date_of_birth": ["date of birth", "birth date", "birthday"],
    "confirmation_code": ["confirmation code", "confirmation number", "booking reference"],
    "new_date": ["new date", "which date", "what date", "which day"],
    "time_preference": ["departure time", "what time", "morning or evening"],
    "phone": ["phone number", "new phone"],
    "email": ["email address", "new email"],
    "frequent_flyer_number": ["frequent flyer"],
    "hotel_loyalty_number": ["loyalty number", "hotel loyalty"],
}
ASKS = {
    "employee_id": "your employee ID", "last_name": "your last name", "date_of_birth": "your date of birth",
    "confirmation_code": "the confirmation code of the booking", "new_date": "the new date you want to fly",
    "time_preference": "your preferred departure time (morning or evening)", "phone": "the new phone number",
    "email": "the new email address", "frequent_flyer_number": "the new frequent flyer number",
    "hotel_loyalty_number": "the new hotel loyalty number",
}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _verified(employee: Row) -> dict:
    """The identity record a successful verification of `employee` leaves (checked like any write)."""
    return {"op": "insert", "table": "identity_checks", "values": {"employee_id": employee["id"]}}


def _lookup(index: int) -> bool:
    """Whether the user of instance `index` has no confirmation code at hand, so the agent finds the
    booking among the employee's (a second shape of a family: find_bookings before get_booking)."""
    return index % 3 == 2


def _booking_steps(employee: Row, code: str, lookup: bool) -> list[dict]:
    found = [call("find_bookings", employee_id=employee["id"])] if lookup else []
    return [*found, call("get_booking", confirmation_code=code)]


def _traveller(rng: random.Random, ids: IdPool, grade: str) -> Row:
    return person(rng, ids(2000, 5000), grade, rng.choice(MANAGERS))


def _hotel_stay(rng: random.Random, ids: IdPool, used: set[str], employee: Row, room: Row, refundable: int,
                nights: int | None = None) -> tuple[Row, Row]:
    booking = hotel_booking(ids(5000, 6000), new_code(rng, used), employee["id"], room,
                            nights or rng.randrange(2, 7), refundable, day(rng.randrange(14, 80)))
    return booking, payment(rng, ids(6000, 7000), booking)
