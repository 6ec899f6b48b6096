"""Travel domain tools: what the travel-desk agent may read and write.

The tools enforce only hard invariants (a record exists, a room belongs to the booking's hotel, a
refund never exceeds what was paid, a cancelled booking stays cancelled). Business rules such as
"a room downgrade needs a manager's approval" live in policy.md and are the agent's to follow:
the tools would let the agent break them, which is exactly what a task checks.
"""

from decimal import Decimal

from sqlalchemy import func, insert, select, update

from tbx.domains.kit import fetch_one, parse_money, record_once
from tbx.domains.travel.schema import (
    approvals,
    audit_log,
    bookings,
    employees,
    flights,
    hotels,
    identity_checks,
    payments,
    refunds,
    room_types,
    support_cases,
)
from tbx.tools import ToolFailure, tool

PROFILE_FIELDS = ("phone", "email", "frequent_flyer_number", "hotel_loyalty_number")
REQUEST_TYPES = ("room_downgrade", "room_upgrade")
CASE_CATEGORIES = ("nonrefundable_cancellation", "nonrefundable_change", "identity_verification_failed", "other")
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _employee(db, employee_id: int) -> dict:
    row = db.execute(select(employees).where(employees.c.id == employee_id)).mappings().first()
    if row is None:
        raise ToolFailure(f"employee {employee_id} not found")
    return dict(row)


def _profile(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("date_of_birth", "updated_at")}


def _booking(db, booking_id: int) -> dict:
    return fetch_one(db, bookings, booking_id, "booking")


def _confirmed(db, booking_id: int, kind: str) -> dict:
    booking = _booking(db, booking_id)
    if booking["kind"] != kind:
        raise ToolFailure(f"booking {booking_id} is a {booking['kind']} booking, not a {kind} booking")
    if booking["status"] != "confirmed":
        raise ToolFailure(f"booking {booking_id} is {booking['status']} and cannot be changed")
    return booking


def _room(db, room_type_id: int) -> dict:
    return fetch_one(db, room_types, room_type_id, "room type")  # no updated_at: the whole row


def _flight(db, flight_id: int) -> dict:
    return fetch_one(db, flights, flight_id, "flight")  # no updated_at: the whole row


def _original_payment(db, booking_id: int) -> dict:
    row = db.execute(select(payments).where(payments.c.booking_id == booking_id)
                     .order_by(payments.c.id)).mappings().first()
    if row is None:
        raise ToolFailure(f"booking {booking_id} has no payment on file")
    return dict(row)


def _log(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


@tool("write")
def verify_identity(db, employee_id: int, last_name: str = "", date_of_birth: str = "") -> dict:
    """Verify a caller's identity against the employee record; a success is recorded on file.

    Give the employee ID and at least one of last name or date of birth, as the user stated them.
    Returns {"verified": true, "employee": profile} when every detail given matches, otherwise
    {"verified": false, "reason": ...} and no profile.

    Args:
        employee_id: The employee's numeric ID.
        last_name: The employee's last name (case does not matter).
        date_of_birth: The employee's date of birth as YYYY-MM-DD.
    """
    if not last_name.strip() and not date_of_birth.strip():
        raise ToolFailure("give last_name or date_of_birth together with employee_id")
    employee = _employee(db, employee_id)
    # A mismatch is an answer, not a tool error: policy.md tells the agent what to do next.
    if last_name.strip() and last_name.strip().lower() != employee["last_name"].lower():
        return {"verified": False, "reason": f"the last name does not match employee {employee_id}"}
    if date_of_birth.strip() and date_of_birth.strip() != employee["date_of_birth"]:
        return {"verified": False, "reason": f"the date of birth does not match employee {employee_id}"}
    record_once(db, identity_checks, employee_id=employee_id)
    return {"verified": True, "employee": _profile(employee)}


@tool("read")
def find_bookings(db, employee_id: int) -> list[dict]:
    """List all bookings (hotel and flight, any status) of an employee.

    Args:
        employee_id: The employee's numeric ID.
    """
    _employee(db, employee_id)
    rows = db.execute(select(bookings).where(bookings.c.employee_id == employee_id)
                      .order_by(bookings.c.id)).mappings()
    keep = ("id", "confirmation_code", "kind", "status", "refundable", "check_in", "flight_id", "total_amount")
    return [{k: row[k] for k in keep} for row in rows]


@tool("read")
def get_booking(db, confirmation_code: str) -> dict:
    """Show a booking by its confirmation code, with its hotel room or flight, payments and refunds.

    Args:
        confirmation_code: The booking's confirmation code, e.g. "K7QX2M".
    """
    code = confirmation_code.strip().upper()
    row = db.execute(select(bookings.c.id).where(bookings.c.confirmation_code == code)).first()
    if row is None:
        raise ToolFailure(f"no booking with confirmation code {confirmation_code!r}")
    booking = _booking(db, row.id)
    if booking["kind"] == "hotel":
        room = _room(db, booking["room_type_id"])
        hotel = db.execute(select(hotels).where(hotels.c.id == room["hotel_id"])).mappings().one()
        booking["hotel"] = dict(hotel)
        booking["room_type"] = room["name"]
    else:
        booking["flight"] = _flight(db, booking["flight_id"])
    booking["payments"] = [dict(r) for r in db.execute(
        select(payments).where(payments.c.booking_id == row.id).order_by(payments.c.id)).mappings()]
    booking["refunds"] = [dict(r) for r in db.execute(
        select(refunds).where(refunds.c.booking_id == row.id).order_by(refunds.c.id)).mappings()]
    return booking


@tool("read")
def get_hotel_rooms(db, hotel_id: int) -> list[dict]:
    """List a hotel's room types with their current nightly rates.

    Args:
        hotel_id: The hotel's numeric ID (shown on a hotel booking).
    """
    rows = db.execute(select(room_types).where(room_types.c.hotel_id == hotel_id)
                      .order_by(room_types.c.nightly_rate)).mappings().all()
    if not rows:
        raise ToolFailure(f"hotel {hotel_id} not found")
    return [dict(r) for r in rows]


@tool("read")
def get_approvals(db, employee_id: int) -> list[dict]:
    """List all approval requests filed for an employee, with their status.

    Args:
        employee_id: The employee's numeric ID.
    """
    _employee(db, employee_id)
    rows = db.execute(select(approvals).where(approvals.c.employee_id == employee_id)
                      .order_by(approvals.c.id)).mappings()
    return [dict(r) for r in rows]


@tool("read")
def search_flights(db, origin: str, destination: str, departure_date: str) -> list[dict]:
    """Find flights on a route and day, with fares and seats left.

    Args:
        origin: Origin airport code, e.g. "BOS".
        destination: Destination airport code, e.g. "ORD".
        departure_date: Day of departure as YYYY-MM-DD.
    """
    rows = db.execute(select(flights).where(
        flights.c.origin == origin.strip().upper(), flights.c.destination == destination.strip().upper(),
        flights.c.departure_date == departure_date.strip()).order_by(flights.c.departure_time)).mappings()
    return [dict(r) for r in rows]


@tool("write")
def change_room(db, booking_id: int, room_type_id: int) -> dict:
    """Move a confirmed hotel booking to another room type of the same hotel.

    The booking takes the room type's current nightly rate and its total becomes rate × nights.
    Money is not moved: refund or charge the difference separately.

    Args:
        booking_id: The booking's numeric ID.
        room_type_id: The new room type's ID (from get_hotel_rooms).
    """
    booking = _confirmed(db, booking_id, "hotel")
    current, new = _room(db, booking["room_type_id"]), _room(db, room_type_id)
    if new["hotel_id"] != current["hotel_id"]:
        raise ToolFailure(f"room type {room_type_id} belongs to another hotel")
    if room_type_id == booking["room_type_id"]:
        raise ToolFailure(f"booking {booking_id} already has room type {room_type_id}")
    total = Decimal(new["nightly_rate"]) * booking["nights"]
    db.execute(update(bookings).where(bookings.c.id == booking_id).values(
        room_type_id=room_type_id, nightly_rate=new["nightly_rate"], total_amount=total, updated_at=MODIFIED))
    _log(db, f"change_room booking={booking_id} room_type={room_type_id}")
    return {"booking_id": booking_id, "room_type": new["name"], "old_nightly_rate": booking["nightly_rate"],
            "new_nightly_rate": new["nightly_rate"], "nights": booking["nights"],
            "old_total": booking["total_amount"], "new_total": total}


@tool("write", free_args=("reason",))
def cancel_booking(db, booking_id: int, reason: str) -> dict:
    """Cancel a confirmed hotel or flight booking. Money is not moved: refund separately.

    Args:
        booking_id: The booking's numeric ID.
        reason: Why the booking is cancelled, in a few words.
    """
    booking = _booking(db, booking_id)
    if booking["status"] != "confirmed":
        raise ToolFailure(f"booking {booking_id} is already {booking['status']}")
    db.execute(update(bookings).where(bookings.c.id == booking_id).values(status="cancelled", updated_at=MODIFIED))
    if booking["kind"] == "flight":
        db.execute(update(flights).where(flights.c.id == booking["flight_id"])
                   .values(seats_available=flights.c.seats_available + 1))
    _log(db, f"cancel_booking booking={booking_id}")
    return {"booking_id": booking_id, "status": "cancelled"}


@tool("write")
def rebook_flight(db, booking_id: int, flight_id: int) -> dict:
    """Move a confirmed flight booking to another flight on the same route.

    The booking's total becomes the new flight's fare; one seat moves from the new flight to the
    old. Money is not moved: charge or refund the fare difference separately.

    Args:
        booking_id: The booking's numeric ID.
        flight_id: The new flight's numeric ID (from search_flights).
    """
    booking = _confirmed(db, booking_id, "flight")
    old, new = _flight(db, booking["flight_id"]), _flight(db, flight_id)
    if (new["origin"], new["destination"]) != (old["origin"], old["destination"]):
        raise ToolFailure(f"flight {flight_id} flies {new['origin']}-{new['destination']}, "
                          f"not the booked route {old['origin']}-{old['destination']}")
    if flight_id == old["id"]:
        raise ToolFailure(f"booking {booking_id} is already on flight {flight_id}")
    if new["seats_available"] < 1:
        raise ToolFailure(f"flight {flight_id} is full")
    db.execute(update(bookings).where(bookings.c.id == booking_id).values(
        flight_id=flight_id, total_amount=new["fare"], updated_at=MODIFIED))
    db.execute(update(flights).where(flights.c.id == old["id"]).values(seats_available=old["seats_available"] + 1))
    db.execute(update(flights).where(flights.c.id == flight_id).values(seats_available=new["seats_available"] - 1))
    _log(db, f"rebook_flight booking={booking_id} flight={flight_id}")
    return {"booking_id": booking_id, "flight_number": new["flight_number"], "departure_date": new["departure_date"],
            "departure_time": new["departure_time"], "old_fare": booking["total_amount"], "new_fare": new["fare"]}


@tool("write", free_args=("reason",))
def issue_refund(db, booking_id: int, amount: float, reason: str) -> dict:
    """Refund an amount of a booking to the booking's original payment method.

    The refunds of a booking can never add up to more than was paid for it.

    Args:
        booking_id: The booking's numeric ID.
        amount: Dollars to refund, greater than zero, at most two decimals.
        reason: Why the refund is made, in a few words.
    """
    value = parse_money(amount)
    _booking(db, booking_id)
    payment = _original_payment(db, booking_id)
    paid = db.execute(select(func.coalesce(func.sum(payments.c.amount), 0))
                      .where(payments.c.booking_id == booking_id)).scalar_one()
    refunded = db.execute(select(func.coalesce(func.sum(refunds.c.amount), 0))
                          .where(refunds.c.booking_id == booking_id)).scalar_one()
    available = Decimal(str(paid)) - Decimal(str(refunded))
    if value > available:
        raise ToolFailure(f"refund of {value} exceeds the {available} still refundable on booking {booking_id}")
    new_id = db.execute(insert(refunds).values(booking_id=booking_id, payment_id=payment["id"], amount=value,
                                               status="issued", reason=reason)).inserted_primary_key[0]
    _log(db, f"issue_refund booking={booking_id} refund={new_id}")
    return {"refund_id": new_id, "amount": value, "method": payment["method"], "card_last4": payment["card_last4"]}


@tool("write", free_args=("reason",))
def charge_payment(db, booking_id: int, amount: float, reason: str) -> dict:
    """Charge an extra amount for a confirmed booking to the booking's original payment method.

    Args:
        booking_id: The booking's numeric ID.
        amount: Dollars to charge, greater than zero, at most two decimals.
        reason: What the charge is for, in a few words.
    """
    value = parse_money(amount)
    booking = _booking(db, booking_id)
    if booking["status"] != "confirmed":
        raise ToolFailure(f"booking {booking_id} is {booking['status']}; nothing can be charged to it")
    payment = _original_payment(db, booking_id)
    new_id = db.execute(insert(payments).values(booking_id=booking_id, method=payment["method"],
                                                card_last4=payment["card_last4"], amount=value,
                                                note=reason)).inserted_primary_key[0]
    _log(db, f"charge_payment booking={booking_id} payment={new_id}")
    return {"payment_id": new_id, "amount": value, "method": payment["method"], "card_last4": payment["card_last4"]}


@tool("write", free_args=("reason",))
def request_approval(db, employee_id: int, booking_id: int, request_type: str, room_type_id: int,
                     reason: str) -> dict:
    """File an approval request for a hotel room change; it goes to the employee's manager.

    Filing changes nothing on the booking; the change is made once the request is approved.

    Args:
        employee_id: The requesting employee's numeric ID.
        booking_id: The hotel booking's numeric ID.
        request_type: "room_downgrade" or "room_upgrade".
        room_type_id: The requested room type's ID (from get_hotel_rooms).
        reason: The request as the manager will read it, in a sentence.
    """
    if request_type not in REQUEST_TYPES:
        raise ToolFailure(f"request_type must be one of {', '.join(REQUEST_TYPES)}, not {request_type!r}")
    employee = _employee(db, employee_id)
    booking = _confirmed(db, booking_id, "hotel")
    if booking["employee_id"] != employee_id:
        raise ToolFailure(f"booking {booking_id} does not belong to employee {employee_id}")
    if _room(db, room_type_id)["hotel_id"] != _room(db, booking["room_type_id"])["hotel_id"]:
        raise ToolFailure(f"room type {room_type_id} belongs to another hotel")
    if employee["manager_id"] is None:
        raise ToolFailure(f"employee {employee_id} has no manager on file to approve requests")
    new_id = db.execute(insert(approvals).values(
        employee_id=employee_id, approver_id=employee["manager_id"], booking_id=booking_id,
        request_type=request_type, requested_room_type_id=room_type_id, status="pending",
        reason=reason)).inserted_primary_key[0]
    _log(db, f"request_approval approval={new_id}")
    return {"approval_id": new_id, "status": "pending", "approver_id": employee["manager_id"]}


@tool("write")
def update_profile(db, employee_id: int, field: str, value: str) -> dict:
    """Change one field of an employee's traveller profile.

    Args:
        employee_id: The employee's numeric ID.
        field: One of "phone", "email", "frequent_flyer_number", "hotel_loyalty_number".
        value: The new value, exactly as the employee gave it.
    """
    if field not in PROFILE_FIELDS:
        raise ToolFailure(f"field must be one of {', '.join(PROFILE_FIELDS)}, not {field!r}")
    _employee(db, employee_id)
    value = value.strip()
    if not value:
        raise ToolFailure("value must not be empty")
    if field == "email" and "@" not in value:
        raise ToolFailure(f"{value!r} is not an email address")
    db.execute(update(employees).where(employees.c.id == employee_id).values({field: value, "updated_at": MODIFIED}))
    _log(db, f"update_profile employee={employee_id} field={field}")
    return {"employee_id": employee_id, field: value}


@tool("write", free_args=("summary",))
def open_support_case(db, employee_id: int, category: str, summary: str, booking_id: int = 0) -> dict:
    """Open a support case for the travel team to follow up.

    Args:
        employee_id: The employee's numeric ID.
        category: One of "nonrefundable_cancellation", "nonrefundable_change",
            "identity_verification_failed", "other".
        summary: What happened and what the employee wants, in a sentence or two.
        booking_id: The booking's numeric ID, or 0 when the case concerns no booking.
    """
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    _employee(db, employee_id)
    if booking_id:
        _booking(db, booking_id)
    new_id = db.execute(insert(support_cases).values(
        employee_id=employee_id, booking_id=booking_id or None, category=category, status="open",
        summary=summary)).inserted_primary_key[0]
    _log(db, f"open_support_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
