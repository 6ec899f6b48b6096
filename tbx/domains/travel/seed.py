"""Travel domain seed: the deterministic base rows every task starts from, and the row builders
that tasks use to add their own records on top.

Base ids live below the task ranges (employees < 2000, bookings < 5000, payments < 6000, flights
< 9000, approvals < 8000), so a task's own rows never collide with the distractor data.
"""

from __future__ import annotations

import datetime as dt
import random
from functools import cache
from typing import Any

Row = dict[str, Any]

GRADE_LIMITS = {"G1": 180, "G2": 240, "G3": 320, "G4": 450, "G5": 600}  # nightly limit; mirrors policy.md
ROOM_NAMES = ("Standard Queen", "Standard King", "Deluxe King", "Executive Suite")
ROOM_FACTORS = (1.0, 1.12, 1.38, 2.0)
HOTELS = (  # id, name, city, rates of the four room types
    (1, "Harborview Grand", "Boston", (210, 235, 290, 420)),
    (2, "Lakeshore Suites", "Chicago", None),
    (3, "Bayside Inn", "San Francisco", None),
    (4, "Midtown Plaza", "New York", None),
    (5, "Pine Street Hotel", "Seattle", None),
    (6, "Mile High Lodge", "Denver", None),
    (7, "Peachtree Court", "Atlanta", None),
    (8, "Congress Avenue Hotel", "Austin", None),
)
BASE_RATES = {2: 180, 3: 230, 4: 260, 5: 170, 6: 150, 7: 160, 8: 155}
AIRPORTS = ("BOS", "ORD", "SFO", "JFK", "SEA", "DEN", "ATL", "AUS")
FIRST_NAMES = ("Priya", "Marcus", "Elena", "Tomas", "Aisha", "Daniel", "Mei", "Jonas", "Sofia", "Kwame",
               "Laura", "Ravi", "Hannah", "Diego", "Yuki", "Olivia", "Samir", "Grace", "Mateo", "Ingrid",
               "Noah", "Fatima", "Lucas", "Chloe", "Omar", "Zoe", "Victor", "Anya", "Felix", "Leila")
LAST_NAMES = ("Shah", "Okafor", "Lindqvist", "Novak", "Haddad", "Brennan", "Tanaka", "Weber", "Rossi",
              "Mensah", "Fischer", "Iyer", "Kowalski", "Alvarez", "Sato", "Murphy", "Khan", "Dubois",
              "Silva", "Berg", "Nakamura", "Costa", "Petrov", "Larsen", "Moreau", "Quinn", "Hughes",
              "Ortega", "Varga", "Ahmed")
DEPARTMENTS = ("Consulting", "Sales", "Engineering", "Finance", "Legal", "Marketing")
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
FIRST_DAY = dt.date(2026, 3, 2)
MANAGERS = (1002, 1003, 1004, 1005, 1006, 1007)


def room_type_rows() -> list[Row]:
    rows = []
    for hotel_id, _, _, fixed in HOTELS:
        rates = fixed or tuple(round(BASE_RATES[hotel_id] * f) for f in ROOM_FACTORS)
        for k, (name, rate) in enumerate(zip(ROOM_NAMES, rates, strict=True), start=1):
            rows.append({"id": hotel_id * 10 + k, "hotel_id": hotel_id, "name": name, "nightly_rate": rate})
    return rows


def day(offset: int) -> str:
    return (FIRST_DAY + dt.timedelta(days=offset)).isoformat()


def new_code(rng: random.Random, used: set[str]) -> str:
    """A confirmation code not in `used` (which it joins)."""
    while True:
        code = "".join(rng.choice(CODE_ALPHABET) for _ in range(6))
        if code not in used:
            used.add(code)
            return code


def person(rng: random.Random, employee_id: int, grade: str, manager_id: int | None) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    birth = dt.date(1962, 1, 1) + dt.timedelta(days=rng.randrange(365 * 38))
    return {
        "id": employee_id, "first_name": first, "last_name": last, "date_of_birth": birth.isoformat(),
        "email": f"{first.lower()}.{last.lower()}{employee_id % 100}@acme.example",
        "phone": f"+1-617-555-{rng.randrange(10000):04d}", "department": rng.choice(DEPARTMENTS),
        "grade": grade, "manager_id": manager_id,
        "frequent_flyer_number": f"FF{rng.randrange(10**7):07d}" if rng.random() < 0.6 else None,
        "hotel_loyalty_number": f"HL{rng.randrange(10**6):06d}" if rng.random() < 0.5 else None,
        "updated_at": None,
    }


def hotel_booking(booking_id: int, code: str, employee_id: int, room: Row, nights: int, refundable: int,
                  check_in: str, status: str = "confirmed") -> Row:
    return {
        "id": booking_id, "confirmation_code": code, "employee_id": employee_id, "kind": "hotel",
        "status": status, "refundable": refundable, "room_type_id": room["id"], "check_in": check_in,
        "nights": nights, "nightly_rate": room["nightly_rate"], "flight_id": None,
        "total_amount": room["nightly_rate"] * nights, "updated_at": None,
    }


def flight_booking(booking_id: int, code: str, employee_id: int, flight_row: Row, refundable: int,
                   status: str = "confirmed") -> Row:
    return {
        "id": booking_id, "confirmation_code": code, "employee_id": employee_id, "kind": "flight",
        "status": status, "refundable": refundable, "room_type_id": None, "check_in": None, "nights": None,
        "nightly_rate": None, "flight_id": flight_row["id"], "total_amount": flight_row["fare"], "updated_at": None,
    }


def flight(rng: random.Random, flight_id: int, origin: str, destination: str, date: str, fare: int) -> Row:
    return {
        "id": flight_id, "flight_number": f"{rng.choice(('AX', 'NQ', 'TB'))}{rng.randrange(100, 1000)}",
        "origin": origin, "destination": destination, "departure_date": date,
        "departure_time": f"{rng.randrange(6, 21):02d}:{rng.choice((0, 15, 30, 45)):02d}",
        "fare": fare, "seats_available": rng.randrange(3, 40),
    }


def payment(rng: random.Random, payment_id: int, booking: Row) -> Row:
    method = "corporate_card" if rng.random() < 0.8 else "personal_card"
    return {"id": payment_id, "booking_id": booking["id"], "method": method,
            "card_last4": f"{rng.randrange(10000):04d}", "amount": booking["total_amount"], "note": None}


def _base_people(rng: random.Random) -> list[Row]:
    people = [person(rng, 1001, "G5", None)]
    people += [person(rng, m, "G4", 1001) for m in MANAGERS]
    people += [person(rng, i, rng.choice(("G1", "G2", "G2", "G3")), rng.choice(MANAGERS)) for i in range(1008, 1041)]
    return people


def _base_bookings(rng: random.Random, people: list[Row], rooms: list[Row], flights_: list[Row]) -> dict[str, list]:
    used: set[str] = set()
    rows: dict[str, list] = {"bookings": [], "payments": [], "refunds": []}
    for booking_id in range(1, 41):
        traveller = rng.choice(people[7:])
        status = "cancelled" if rng.random() < 0.15 else "confirmed"
        refundable = int(rng.random() < 0.6)
        if rng.random() < 0.5:
            affordable = [r for r in rooms if r["nightly_rate"] <= GRADE_LIMITS[traveller["grade"]]]
            row = hotel_booking(booking_id, new_code(rng, used), traveller["id"], rng.choice(affordable),
                                rng.randrange(1, 6), refundable, day(rng.randrange(90)), status)
        else:
            row = flight_booking(booking_id, new_code(rng, used), traveller["id"], rng.choice(flights_),
                                 refundable, status)
        rows["bookings"].append(row)
        rows["payments"].append(payment(rng, booking_id, row))
        if status == "cancelled" and refundable:
            rows["refunds"].append({"id": len(rows["refunds"]) + 1, "booking_id": booking_id,
                                    "payment_id": booking_id, "amount": row["total_amount"], "status": "issued",
                                    "reason": "cancelled by traveller"})
    return rows


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260301)
    people = _base_people(rng)
    rooms = room_type_rows()
    flights_ = []
    for flight_id in range(101, 141):
        origin, destination = rng.sample(AIRPORTS, 2)
        flights_.append(flight(rng, flight_id, origin, destination, day(rng.randrange(90)), rng.randrange(36, 130) * 5))
    rows = {"employees": people, "hotels": [{"id": h, "name": n, "city": c} for h, n, c, _ in HOTELS],
            "room_types": rooms, "flights": flights_}
    rows.update(_base_bookings(rng, people, rooms, flights_))
    hotel_bookings = [b for b in rows["bookings"]
                      if b["kind"] == "hotel" and b["status"] == "confirmed" and b["room_type_id"] % 10 != 1]
    rows["approvals"] = []
    for approval_id, (booking, status) in enumerate(zip(hotel_bookings, ("approved", "rejected", "pending"), strict=False), 1):
        owner = next(p for p in people if p["id"] == booking["employee_id"])
        hotel = booking["room_type_id"] // 10
        rows["approvals"].append({
            "id": approval_id, "employee_id": owner["id"], "approver_id": owner["manager_id"],
            "booking_id": booking["id"], "request_type": "room_downgrade",
            "requested_room_type_id": hotel * 10 + 1, "status": status, "reason": "project budget cut"})
    rows["support_cases"] = [{"id": 1, "employee_id": hotel_bookings[3]["employee_id"],
                              "booking_id": hotel_bookings[3]["id"], "category": "other", "status": "open",
                              "summary": "Asked for a late check-out; hotel to confirm."}]
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every travel task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
