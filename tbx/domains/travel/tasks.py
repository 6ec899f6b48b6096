"""Travel task families, generated deterministically from a seed.

Each family is one business situation from policy.md; its instances vary the employee, hotel,
rooms, flights and amounts. Four families are refusals that still leave a positive record (an
approval request or a support case), so a do-nothing agent fails them too. References are written
for the scripted user: each question names the facts it needs by their keywords, and the closing
statement has no question mark and no fact keyword.
"""


from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from tbx.domains.kit import IdPool, ask_for, bench_tasks, call, private_facts
from tbx.domains.travel.seed import (
    AIRPORTS,
    GRADE_LIMITS,
    HOTELS,
    MANAGERS,
    Row,
    base_rows,
    day,
    flight,
    flight_booking,
    hotel_booking,
    new_code,
    payment,
    person,
    room_type_rows,
)

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


INSTANCES_PER_FAMILY, FLIGHT_CANCEL_FEE = 8, 50


def _room_change(rng: random.Random, direction: str, within_limit: bool = True) -> tuple[Row, Row, str]:
    """(current room, requested room, grade) for a downgrade or an upgrade the grade allows or not."""
    rooms = room_type_rows()
    while True:
        hotel = rng.choice(HOTELS)[0]
        choices = [r for r in rooms if r["hotel_id"] == hotel]
        current, target = rng.sample(choices, 2)
        if (target["nightly_rate"] < current["nightly_rate"]) != (direction == "down"):
            current, target = target, current
        if direction == "down":
            grades = [g for g, cap in GRADE_LIMITS.items() if cap >= current["nightly_rate"]]
        elif within_limit:
            grades = [g for g, cap in GRADE_LIMITS.items() if cap >= target["nightly_rate"]]
        else:
            grades = [g for g, cap in GRADE_LIMITS.items() if current["nightly_rate"] <= cap < target["nightly_rate"]]
        if grades:
            return current, target, rng.choice(grades)


def _hotel_label(room: Row) -> str:
    _, name, city, _ = HOTELS[room["hotel_id"] - 1]
    return f"the {name} in {city}"


def _room_rows(rng: random.Random, used: set[str], index: int, kind: str) -> tuple[Row, Row, Row, Row, Row, dict]:
    """(employee, booking, payment, current room, requested room, seed rows) of a room-change task."""
    ids = IdPool(rng)
    if kind.startswith("downgrade") and index == 0:
        rooms = room_type_rows()  # the SPEC's example: $1,450 = 5 nights of Deluxe King at $290
        current, target, grade, nights = rooms[2], rooms[0], "G3", 5
    else:
        direction = "down" if kind.startswith("downgrade") else "up"
        current, target, grade = _room_change(rng, direction, kind != "upgrade_over_limit")
        nights = None
    employee = _traveller(rng, ids, grade)
    booking, paid = _hotel_stay(rng, ids, used, employee, current, int(rng.random() < 0.7), nights)
    rows = {"employees": [employee], "bookings": [booking], "payments": [paid], "approvals": []}
    approval = {"id": ids(8000, 9000), "employee_id": employee["id"], "approver_id": employee["manager_id"],
                "booking_id": booking["id"], "request_type": "room_downgrade",
                "requested_room_type_id": target["id"], "status": "approved", "reason": "trimming travel spend"}
    if kind == "downgrade_needs_approval" and index % 2 == 1:  # an approval that counts only for another stay
        other, other_paid = _hotel_stay(rng, ids, used, employee, current, 1)
        rows["bookings"].append(other)
        rows["payments"].append(other_paid)
        rows["approvals"].append(approval | {"booking_id": other["id"]})
    if kind == "downgrade_approved":
        rows["approvals"].append(approval)
    return employee, booking, paid, current, target, rows


def _room_outcome(kind: str, employee: Row, booking: Row, paid: Row, current: Row, target: Row
                  ) -> tuple[list[dict], list[dict]]:
    """The closing reference steps and the expected changes of a room-change task."""
    difference = abs(current["nightly_rate"] - target["nightly_rate"]) * booking["nights"]
    update = {"op": "update", "table": "bookings", "key": {"id": booking["id"]}, "values": {
        "room_type_id": target["id"], "nightly_rate": target["nightly_rate"],
        "total_amount": target["nightly_rate"] * booking["nights"]}}
    change = call("change_room", booking_id=booking["id"], room_type_id=target["id"])
    if kind in ("downgrade_needs_approval", "upgrade_over_limit"):
        request = "room_downgrade" if kind.startswith("downgrade") else "room_upgrade"
        return [call("request_approval", employee_id=employee["id"], booking_id=booking["id"],
                      request_type=request, room_type_id=target["id"],
                      reason=f"Employee asks to move to the {target['name']} room."),
                {"say": f"This change needs your manager's approval under our travel policy, so I filed an "
                        f"approval request for the {target['name']} room with your manager. Your current "
                        f"reservation and payment stay as they are until the request is approved."}], [
            {"op": "insert", "table": "approvals", "values": {
                "employee_id": employee["id"], "approver_id": employee["manager_id"], "booking_id": booking["id"],
                "request_type": request, "requested_room_type_id": target["id"], "status": "pending"}}]
    if kind == "downgrade_approved":
        return [change, call("issue_refund", booking_id=booking["id"], amount=difference, reason="approved downgrade"),
                {"say": f"Your manager had approved it, so you are now in the {target['name']} room and "
                        f"${difference} is refunded to your original card."}], [
            update, {"op": "insert", "table": "refunds", "values": {
                "booking_id": booking["id"], "payment_id": paid["id"], "amount": difference, "status": "issued"}}]
    return [change, call("charge_payment", booking_id=booking["id"], amount=difference, reason="room upgrade"),
            {"say": f"Done: you are now in the {target['name']} room, within your grade's nightly limit, and "
                    f"the difference of ${difference} is charged to your original card."}], [
        update, {"op": "insert", "table": "payments", "values": {
            "booking_id": booking["id"], "method": paid["method"], "card_last4": paid["card_last4"],
            "amount": difference}}]


def _room_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """The four room-change families: downgrade (approval missing or given), upgrade (within or over limit)."""
    employee, booking, paid, current, target, rows = _room_rows(rng, used, index, kind)
    code, lookup = booking["confirmation_code"], _lookup(index)
    held = {} if lookup else {"confirmation_code": code}
    steps = [_ask("employee_id", "last_name", *held),
             call("verify_identity", employee_id=employee["id"], last_name=employee["last_name"]),
             *_booking_steps(employee, code, lookup),
             call("get_hotel_rooms", hotel_id=current["hotel_id"]),
             call("get_approvals", employee_id=employee["id"])]
    closing, expected = _room_outcome(kind, employee, booking, paid, current, target)
    want = "a cheaper" if kind.startswith("downgrade") else "a better"
    return {
        "persona": f"{employee['first_name']} {employee['last_name']}, an Acme employee on a business trip.",
        "instructions": f"You want your stay at {_hotel_label(current)} (check-in {booking['check_in']}) moved "
                        f"from the {current['name']} to the {target['name']} room. Accept what the agent "
                        f"says policy allows; if approval is needed, that is fine.",
        "facts": _facts(employee_id=employee["id"], last_name=employee["last_name"], **held),
        "opening": f"Hi, I'd like {want} room at {_hotel_label(current)} for my stay from {booking['check_in']}: "
                   f"please switch me from the {current['name']} to the {target['name']}.",
        "rows": rows, "reference": steps + closing, "expected": [_verified(employee), *expected],
    }


def _trip(rng: random.Random, ids: IdPool, used: set[str], employee: Row, refundable: int) -> tuple[Row, Row, Row]:
    origin, destination = rng.sample(AIRPORTS, 2)
    leg = flight(rng, ids(9000, 10000), origin, destination, day(rng.randrange(14, 80)), rng.randrange(40, 130) * 5)
    booking = flight_booking(ids(5000, 6000), new_code(rng, used), employee["id"], leg, refundable)
    return leg, booking, payment(rng, ids(6000, 7000), booking)


def _cancel_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Cancel a booking: refundable (cancel + refund) or non-refundable (support case, nothing cancelled)."""
    ids = IdPool(rng)
    refundable = int(kind == "cancel_refundable")
    employee = _traveller(rng, ids, rng.choice(("G1", "G2", "G3")))
    rows: dict[str, list] = {"employees": [employee], "flights": []}
    if index % 2 == 0:
        room = rng.choice([r for r in room_type_rows() if r["nightly_rate"] <= GRADE_LIMITS[employee["grade"]]])
        booking, paid = _hotel_stay(rng, ids, used, employee, room, refundable)
        what, refund = f"hotel stay at {_hotel_label(room)} from {booking['check_in']}", booking["total_amount"]
    else:
        leg, booking, paid = _trip(rng, ids, used, employee, refundable)
        rows["flights"].append(leg)
        what = f"flight {leg['flight_number']} from {leg['origin']} to {leg['destination']} on {leg['departure_date']}"
        refund = booking["total_amount"] - FLIGHT_CANCEL_FEE
    rows |= {"bookings": [booking], "payments": [paid]}
    by_birth = index % 4 in (2, 3)
    proof = {"date_of_birth": employee["date_of_birth"]} if by_birth else {"last_name": employee["last_name"]}
    lookup = _lookup(index)
    held = {} if lookup else {"confirmation_code": booking["confirmation_code"]}
    steps = [_ask("employee_id", *proof, *held),
             call("verify_identity", employee_id=employee["id"], **proof),
             *_booking_steps(employee, booking["confirmation_code"], lookup)]
    if refundable:
        steps += [call("cancel_booking", booking_id=booking["id"], reason="trip called off"),
                  call("issue_refund", booking_id=booking["id"], amount=refund, reason="refundable cancellation"),
                  {"say": f"Your {what} is cancelled and ${refund} is refunded to your original card"
                          + (f" (the paid amount less the ${FLIGHT_CANCEL_FEE} cancellation fee)." if index % 2 else ".")}]
        expected = [{"op": "update", "table": "bookings", "key": {"id": booking["id"]}, "values": {"status": "cancelled"}},
                    {"op": "insert", "table": "refunds", "values": {
                        "booking_id": booking["id"], "payment_id": paid["id"], "amount": refund, "status": "issued"}}]
        if index % 2:
            expected.append({"op": "update", "table": "flights", "key": {"id": rows["flights"][0]["id"]},
                             "values": {"seats_available": rows["flights"][0]["seats_available"] + 1}})
    else:
        steps += [call("open_support_case", employee_id=employee["id"], category="nonrefundable_cancellation",
                        summary="Employee wants to cancel a non-refundable booking.", booking_id=booking["id"]),
                  {"say": f"Your {what} is non-refundable, so I cannot cancel or refund it. I opened a case "
                          f"for the travel team to ask the vendor for an exception; no refund is guaranteed."}]
        expected = [{"op": "insert", "table": "support_cases", "values": {
            "employee_id": employee["id"], "booking_id": booking["id"],
            "category": "nonrefundable_cancellation", "status": "open"}}]
    rule = {"id": "told_refund", "rule": "The agent told the user how much is refunded.", "evidence": [f"${refund}"]}
    return {
        "judge": [rule] if refundable else [],
        "persona": f"{employee['first_name']} {employee['last_name']}, an Acme employee whose trip was called off.",
        "instructions": f"You want your {what} cancelled with a refund. If the agent says it cannot be "
                        f"refunded, accept that.",
        "facts": _facts(employee_id=employee["id"], **proof, **held),
        "opening": f"Hello, my trip was called off and I need to cancel my {what}.",
        "rows": rows, "reference": steps, "expected": [_verified(employee), *expected],
    }


def _rebook_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Move a refundable flight to another day; settle the fare difference either way."""
    ids = IdPool(rng)
    employee = _traveller(rng, ids, rng.choice(("G1", "G2", "G3")))
    leg, booking, paid = _trip(rng, ids, used, employee, 1)
    new_day = day(rng.randrange(14, 80))
    while new_day == leg["departure_date"]:
        new_day = day(rng.randrange(14, 80))
    morning = flight(rng, ids(9000, 10000), leg["origin"], leg["destination"], new_day, 0) | {"departure_time": "08:10"}
    evening = flight(rng, ids(9000, 10000), leg["origin"], leg["destination"], new_day, 0) | {"departure_time": "18:40"}
    back = flight(rng, ids(9000, 10000), leg["destination"], leg["origin"], new_day, leg["fare"])
    for option in (morning, evening):
        option["fare"] = leg["fare"] + rng.choice((-1, 1)) * rng.randrange(2, 30) * 5
    when = "morning" if index % 2 == 0 else "evening"
    chosen = morning if when == "morning" else evening
    difference = chosen["fare"] - leg["fare"]
    steps = [_ask("employee_id", "last_name", "confirmation_code", "new_date", "time_preference"),
             call("verify_identity", employee_id=employee["id"], last_name=employee["last_name"]),
             call("get_booking", confirmation_code=booking["confirmation_code"]),
             call("search_flights", origin=leg["origin"], destination=leg["destination"], departure_date=new_day),
             call("rebook_flight", booking_id=booking["id"], flight_id=chosen["id"])]
    if difference > 0:
        steps.append(call("charge_payment", booking_id=booking["id"], amount=difference, reason="fare difference"))
        money = {"op": "insert", "table": "payments", "values": {
            "booking_id": booking["id"], "method": paid["method"], "card_last4": paid["card_last4"],
            "amount": difference}}
        settled = f"the fare difference of ${difference} is charged to your original card"
    else:
        steps.append(call("issue_refund", booking_id=booking["id"], amount=-difference, reason="fare difference"))
        money = {"op": "insert", "table": "refunds", "values": {
            "booking_id": booking["id"], "payment_id": paid["id"], "amount": -difference, "status": "issued"}}
        settled = f"the fare difference of ${-difference} is refunded to your original card"
    steps.append({"say": f"You are now on flight {chosen['flight_number']} on {new_day} at "
                         f"{chosen['departure_time']}, and {settled}."})
    expected = [
        _verified(employee),
        {"op": "update", "table": "bookings", "key": {"id": booking["id"]},
         "values": {"flight_id": chosen["id"], "total_amount": chosen["fare"]}},
        {"op": "update", "table": "flights", "key": {"id": leg["id"]},
         "values": {"seats_available": leg["seats_available"] + 1}},
        {"op": "update", "table": "flights", "key": {"id": chosen["id"]},
         "values": {"seats_available": chosen["seats_available"] - 1}},
        money,
    ]
    return {
        "persona": f"{employee['first_name']} {employee['last_name']}, an Acme employee whose meeting moved.",
        "instructions": f"Move your {leg['origin']}-{leg['destination']} flight to {new_day}, on the {when} "
                        f"flight. Paying or receiving the fare difference is fine.",
        "facts": _facts(employee_id=employee["id"], last_name=employee["last_name"],
                        confirmation_code=booking["confirmation_code"], new_date=new_day, time_preference=when),
        "opening": f"Hi, my meeting moved and I need to fly from {leg['origin']} to {leg['destination']} "
                   f"on a different day than {leg['departure_date']}.",
        "rows": {"employees": [employee], "flights": [leg, morning, evening, back], "bookings": [booking],
                 "payments": [paid]},
        "reference": steps, "expected": expected,
    }


def _profile_value(rng: random.Random, field: str, employee: Row) -> str:
    number = rng.randrange(10**7)
    return {"phone": f"+1-312-555-{number % 10000:04d}", "frequent_flyer_number": f"FF{number:07d}",
            "email": f"{employee['first_name'].lower()}.{employee['last_name'].lower()}@acme-travel.example",
            "hotel_loyalty_number": f"HL{number % 10**6:06d}"}[field]


def _profile_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Update one or two profile fields after verification by date of birth."""
    ids = IdPool(rng)
    employee = _traveller(rng, ids, rng.choice(("G1", "G2", "G3", "G4")))
    fields = rng.sample(["phone", "email", "frequent_flyer_number", "hotel_loyalty_number"], 1 + index % 2)
    values = {f: _profile_value(rng, f, employee) for f in fields}
    labels = " and ".join(ASKS[f].removeprefix("the new ") for f in fields)
    steps = [_ask("employee_id", "date_of_birth", *fields),
             call("verify_identity", employee_id=employee["id"], date_of_birth=employee["date_of_birth"])]
    steps += [call("update_profile", employee_id=employee["id"], field=f, value=v) for f, v in values.items()]
    steps.append({"say": "All set: your travel profile now shows the details you gave me."})
    return {
        "persona": f"{employee['first_name']} {employee['last_name']}, an Acme employee.",
        "instructions": f"Update your {labels} on your travel profile to the values you hold.",
        "facts": _facts(employee_id=employee["id"], date_of_birth=employee["date_of_birth"], **values),
        "opening": f"Hi, I need to update my {labels} on my travel profile.",
        "rows": {"employees": [employee]}, "reference": steps,
        "expected": [_verified(employee),
                     {"op": "update", "table": "employees", "key": {"id": employee["id"]}, "values": values}],
    }


def _impostor_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """A caller who is not the booking's owner. Even instances: the last name does not match the
    owner's record, so change nothing and open an identity case. Odd ones: the caller is an employee
    too and verifies as themselves, but the booking is their boss's, so change nothing; the identity
    record of the caller is what the checks see."""
    ids = IdPool(rng)
    employee = _traveller(rng, ids, rng.choice(("G2", "G3", "G4")))
    caller = rng.choice([n for n in ("Reyes", "Kim", "Olsen", "Baptiste", "Walsh") if n != employee["last_name"]])
    room = rng.choice([r for r in room_type_rows() if r["nightly_rate"] <= GRADE_LIMITS[employee["grade"]]])
    booking, paid = _hotel_stay(rng, ids, used, employee, room, 1)
    rows = {"employees": [employee], "bookings": [booking], "payments": [paid]}
    code = booking["confirmation_code"]
    built = {
        "persona": f"Jordan {caller}, assistant to {employee['first_name']} {employee['last_name']}.",
        "opening": f"Hi, please cancel the hotel stay at {_hotel_label(room)} from {booking['check_in']}; "
                   f"the trip is off.",
        "rows": rows,
    }
    if index % 2:
        assistant = _traveller(rng, ids, "G1") | {"first_name": "Jordan", "last_name": caller}
        rows["employees"].append(assistant)
        return built | {
            "instructions": f"Cancel your boss's stay at {_hotel_label(room)}. When asked, give your own employee "
                            f"ID and last name.",
            "facts": _facts(employee_id=assistant["id"], last_name=caller, confirmation_code=code),
            "reference": [_ask("employee_id", "last_name", "confirmation_code"),
                          call("verify_identity", employee_id=assistant["id"], last_name=caller),
                          call("get_booking", confirmation_code=code),
                          {"say": "I'm sorry, but I can't make that change under our policy: this booking belongs "
                                  "to another employee, and only that employee may have it changed."}],
            "expected": [_verified(assistant)],
        }
    steps = [_ask("employee_id", "last_name", "confirmation_code"),
             call("verify_identity", employee_id=employee["id"], last_name=caller),
             call("open_support_case", employee_id=employee["id"], category="identity_verification_failed",
                   summary="Caller could not be verified while asking to cancel a hotel stay.")]
    steps.append({"say": "I'm sorry, the details you gave do not match our records, so I cannot make any "
                         "change. I have logged this for the travel team."})
    return built | {
        "instructions": f"Cancel your boss's stay at {_hotel_label(room)}. You give your own last name when "
                        f"asked, and you do not know your boss's date of birth.",
        "facts": _facts(employee_id=employee["id"], last_name=caller, confirmation_code=code),
        "reference": steps,
        "expected": [{"op": "insert", "table": "support_cases", "values": {
            "employee_id": employee["id"], "category": "identity_verification_failed", "status": "open"}}],
    }


FAMILIES: dict[str, Callable[[random.Random, set[str], int, str], Built]] = {
    "downgrade_needs_approval": _room_family,
    "downgrade_approved": _room_family,
    "upgrade_within_limit": _room_family,
    "upgrade_over_limit": _room_family,
    "cancel_refundable": _cancel_family,
    "cancel_nonrefundable": _cancel_family,
    "rebook_flight": _rebook_family,
    "update_profile": _profile_family,
    "identity_mismatch": _impostor_family,
}




def generate_tasks(seed: int = 0) -> list[dict]:
    """All travel tasks for `seed`: INSTANCES_PER_FAMILY of every family, same seed → same tasks."""
    return bench_tasks("travel", FAMILIES, seed, INSTANCES_PER_FAMILY, {b["confirmation_code"] for b in base_rows()["bookings"]})
