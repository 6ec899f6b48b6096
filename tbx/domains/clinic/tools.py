"""Clinic domain tools: what the clinic front-desk assistant may read and write.

The tools enforce only hard invariants (records exist, a slot is booked once, a cancelled
appointment stays cancelled, a refill needs refills left). Business rules such as the
late-cancellation and no-show fees, referral requirements, controlled substances and identity
checks live in policy.md and are the agent's to follow: the tools would let the agent break
them, which a task then checks.
"""

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Literal, get_args

from sqlalchemy import func, insert, select, update

from tbx.domains.clinic.schema import (
    appointments,
    audit_log,
    cases,
    charges,
    identity_checks,
    insurance_members,
    insurance_plans,
    patients,
    practitioners,
    prescriptions,
    referrals,
    refill_orders,
    slots,
)
from tbx.domains.clinic.seed import SPECIALTIES, TODAY
from tbx.domains.kit import fetch_one, record_once
from tbx.tools import ToolFailure, tool

# Closed choices are Literal types, so the schema the agent sees lists them as an enum.
FeeKind = Literal["late_cancel_fee", "no_show_fee"]
CaseCategory = Literal["identity_verification_failed", "billing_question", "other"]
Specialty = Literal["cardiology", "dermatology", "orthopedics", "neurology"]
AnySpecialty = Literal["general", "cardiology", "dermatology", "orthopedics", "neurology"]
FEE_KINDS, CASE_CATEGORIES = get_args(FeeKind), get_args(CaseCategory)
assert get_args(Specialty) == SPECIALTIES
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _appointment(db, appointment_id: int, status: str | None = None) -> dict:
    found = fetch_one(db, appointments, appointment_id, "appointment")
    if status and found["status"] != status:
        raise ToolFailure(f"appointment {appointment_id} is {found['status']}, not {status}")
    when = fetch_one(db, slots, found["slot_id"], "slot")
    found |= {"date": when["date"], "start_time": when["start_time"]}
    return found


def _set_appointment(db, appointment_id: int, status: str) -> None:
    db.execute(update(appointments).where(appointments.c.id == appointment_id).values(
        status=status, updated_at=MODIFIED))
    _log(db, f"appointment {appointment_id} -> {status}")


def _log(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


# The desk's two most common actions come first: a model's few-shot examples show the
# first tools of the list (tbx.policies.prompting.demonstrations_for).
@tool("write")
def cancel_appointment(db, appointment_id: int) -> dict:
    """Cancel a booked appointment; its slot becomes open again. Fees are not charged here.

    Args:
        appointment_id: The appointment number.
    """
    found = _appointment(db, appointment_id, "booked")
    _set_appointment(db, appointment_id, "cancelled")
    db.execute(update(slots).where(slots.c.id == found["slot_id"]).values(status="open"))
    return {"appointment_id": appointment_id, "status": "cancelled", "date": found["date"]}


@tool("write")
def check_in_appointment(db, appointment_id: int) -> dict:
    """Check a patient in for a booked appointment that takes place today.

    Args:
        appointment_id: The appointment number.
    """
    found = _appointment(db, appointment_id, "booked")
    if found["date"] != TODAY.isoformat():
        raise ToolFailure(f"appointment {appointment_id} is on {found['date']}, not today")
    _set_appointment(db, appointment_id, "checked_in")
    return {"appointment_id": appointment_id, "status": "checked_in"}


@tool("write")
def verify_patient(db, patient_id: int, date_of_birth: str) -> dict:
    """Check a caller's identity: their patient number and date of birth, as the caller stated them.

    Returns {"verified": true} when both match (recorded on file), otherwise {"verified": false}.

    Args:
        patient_id: The patient number the caller gave.
        date_of_birth: The date of birth the caller gave, as YYYY-MM-DD.
    """
    if date_of_birth.strip() != fetch_one(db, patients, patient_id, "patient")["date_of_birth"]:
        return {"verified": False, "reason": f"the date of birth does not match patient {patient_id}"}
    record_once(db, identity_checks, patient_id=patient_id)
    return {"verified": True, "patient_id": patient_id}


@tool("read")
def get_patient(db, patient_id: int) -> dict:
    """Show a patient's record: primary practitioner, insurance, referrals, prescriptions and
    appointments (with dates and statuses).

    Args:
        patient_id: The patient number.
    """
    found = {k: v for k, v in fetch_one(db, patients, patient_id, "patient").items() if k != "date_of_birth"}
    for name, table in (("referrals", referrals), ("prescriptions", prescriptions)):
        found[name] = [{k: v for k, v in r.items() if k != "updated_at"} for r in db.execute(
            select(table).where(table.c.patient_id == patient_id).order_by(table.c.id)).mappings()]
    found["appointments"] = [dict(r) for r in db.execute(
        select(appointments.c.id, slots.c.date, slots.c.start_time, appointments.c.practitioner_id,
               appointments.c.status).join(slots, slots.c.id == appointments.c.slot_id)
        .where(appointments.c.patient_id == patient_id).order_by(appointments.c.id)).mappings()]
    return found


@tool("read")
def get_appointment(db, appointment_id: int) -> dict:
    """Show an appointment: patient, practitioner, date and time, status, and days until it from today.

    Args:
        appointment_id: The appointment number.
    """
    found = _appointment(db, appointment_id)
    doctor = fetch_one(db, practitioners, found["practitioner_id"], "practitioner")
    found |= {"practitioner": doctor["name"], "specialty": doctor["specialty"], "today": TODAY.isoformat(),
              "days_until": (dt.date.fromisoformat(found["date"]) - TODAY).days}
    return found


@tool("read")
def find_slots(db, specialty: AnySpecialty, date: str) -> list[dict]:
    """List the open appointment slots of a specialty on a day, with practitioner and start time.

    Args:
        specialty: One of "general", "cardiology", "dermatology", "orthopedics", "neurology".
        date: The day, as YYYY-MM-DD.
    """
    specialty = specialty.strip().lower()
    if specialty not in ("general", *SPECIALTIES):
        raise ToolFailure(f"specialty must be general or one of {', '.join(SPECIALTIES)}, not {specialty!r}")
    rows = db.execute(select(slots.c.id.label("slot_id"), slots.c.date, slots.c.start_time,
                             practitioners.c.id.label("practitioner_id"), practitioners.c.name)
                      .join(practitioners, practitioners.c.id == slots.c.practitioner_id)
                      .where(practitioners.c.specialty == specialty, slots.c.date == date.strip(),
                             slots.c.status == "open").order_by(slots.c.start_time, slots.c.id)).mappings()
    return [dict(r) for r in rows]


@tool("read")
def check_eligibility(db, plan_name: str, member_id: str) -> dict:
    """Ask an insurer whether a member ID is covered by its plan today.

    Args:
        plan_name: The insurance plan's name, e.g. "BlueRiver PPO" (case does not matter).
        member_id: The member ID on the insurance card.
    """
    plan = db.execute(select(insurance_plans).where(
        func.lower(insurance_plans.c.name) == plan_name.strip().lower())).mappings().first()
    if plan is None:
        raise ToolFailure(f"no insurance plan named {plan_name!r}")
    member = db.execute(select(insurance_members).where(
        insurance_members.c.plan_id == plan["id"], insurance_members.c.member_id == member_id.strip().upper())
    ).mappings().first()
    eligible = member is not None and member["status"] == "active"
    return {"plan_id": plan["id"], "plan": plan["name"], "eligible": eligible, "copay": plan["copay"],
            "member_status": member["status"] if member else "not found"}


@tool("write")
def mark_no_show(db, appointment_id: int) -> dict:
    """Record that the patient did not come to a booked appointment of today or earlier.

    Args:
        appointment_id: The appointment number.
    """
    found = _appointment(db, appointment_id, "booked")
    if found["date"] > TODAY.isoformat():
        raise ToolFailure(f"appointment {appointment_id} is on {found['date']}, still in the future")
    _set_appointment(db, appointment_id, "no_show")
    return {"appointment_id": appointment_id, "status": "no_show"}


@tool("write")
def add_charge(db, patient_id: int, appointment_id: int, kind: FeeKind, amount: float) -> dict:
    """Bill a fee to a patient for an appointment.

    Args:
        patient_id: The patient number.
        appointment_id: The appointment number the fee is for.
        kind: "late_cancel_fee" or "no_show_fee".
        amount: Dollars, greater than zero.
    """
    kind = kind.strip().lower()
    if kind not in FEE_KINDS:
        raise ToolFailure(f"kind must be one of {', '.join(FEE_KINDS)}, not {kind!r}")
    try:
        value = Decimal(str(amount))
    except InvalidOperation as exc:
        raise ToolFailure(f"amount {amount!r} is not a number") from exc
    if not value.is_finite() or value <= 0:
        raise ToolFailure("amount must be greater than zero")
    if _appointment(db, appointment_id)["patient_id"] != patient_id:
        raise ToolFailure(f"appointment {appointment_id} is not patient {patient_id}'s")
    new_id = db.execute(insert(charges).values(patient_id=patient_id, appointment_id=appointment_id, kind=kind,
                                               amount=value, status="billed")).inserted_primary_key[0]
    _log(db, f"add_charge charge={new_id}")
    return {"charge_id": new_id, "kind": kind, "amount": value, "status": "billed"}


@tool("write")
def book_appointment(db, patient_id: int, slot_id: int, referral_id: int = 0) -> dict:
    """Book an open slot for a patient. For a specialist, give the referral used (it becomes used).

    Args:
        patient_id: The patient number.
        slot_id: The open slot's numeric ID (from find_slots).
        referral_id: The referral's numeric ID for a specialist visit, or 0 for none.
    """
    fetch_one(db, patients, patient_id, "patient")
    opening = fetch_one(db, slots, slot_id, "slot")
    if opening["status"] != "open":
        raise ToolFailure(f"slot {slot_id} is already {opening['status']}")
    if referral_id:
        referral = fetch_one(db, referrals, referral_id, "referral")
        if referral["patient_id"] != patient_id or referral["status"] != "active":
            raise ToolFailure(f"referral {referral_id} is not an active referral of patient {patient_id}")
        db.execute(update(referrals).where(referrals.c.id == referral_id).values(status="used"))
    new_id = (db.execute(select(func.max(appointments.c.id))).scalar_one() or 0) + 1
    db.execute(insert(appointments).values(id=new_id, patient_id=patient_id, slot_id=slot_id,
                                           practitioner_id=opening["practitioner_id"], status="booked",
                                           referral_id=referral_id or None))
    db.execute(update(slots).where(slots.c.id == slot_id).values(status="booked"))
    _log(db, f"book_appointment appointment={new_id}")
    return {"appointment_id": new_id, "date": opening["date"], "start_time": opening["start_time"]}


@tool("write")
def request_referral(db, patient_id: int, specialty: Specialty) -> dict:
    """Ask the patient's primary practitioner for a referral to a specialty (status requested).

    Args:
        patient_id: The patient number.
        specialty: One of "cardiology", "dermatology", "orthopedics", "neurology".
    """
    specialty = specialty.strip().lower()
    if specialty not in SPECIALTIES:
        raise ToolFailure(f"specialty must be one of {', '.join(SPECIALTIES)}, not {specialty!r}")
    found = fetch_one(db, patients, patient_id, "patient")
    new_id = db.execute(insert(referrals).values(
        patient_id=patient_id, specialty=specialty, referring_practitioner_id=found["primary_practitioner_id"],
        status="requested", expires_on=None)).inserted_primary_key[0]
    _log(db, f"request_referral referral={new_id}")
    return {"referral_id": new_id, "status": "requested", "from_practitioner_id": found["primary_practitioner_id"]}


@tool("write")
def refill_prescription(db, prescription_id: int) -> dict:
    """Send a refill of a prescription to the pharmacy (uses one of its remaining refills).

    Args:
        prescription_id: The prescription's numeric ID (from get_patient).
    """
    found = fetch_one(db, prescriptions, prescription_id, "prescription")
    if found["refills_remaining"] < 1:
        raise ToolFailure(f"prescription {prescription_id} has no refills left")
    db.execute(update(prescriptions).where(prescriptions.c.id == prescription_id).values(
        refills_remaining=found["refills_remaining"] - 1, updated_at=MODIFIED))
    new_id = db.execute(insert(refill_orders).values(prescription_id=prescription_id, kind="refill",
                                                     status="sent")).inserted_primary_key[0]
    _log(db, f"refill_prescription order={new_id}")
    return {"order_id": new_id, "drug": found["drug"], "refills_remaining": found["refills_remaining"] - 1}


@tool("write")
def request_renewal(db, prescription_id: int) -> dict:
    """Ask the prescriber to review and renew a prescription (nothing is sent to the pharmacy).

    Args:
        prescription_id: The prescription's numeric ID (from get_patient).
    """
    found = fetch_one(db, prescriptions, prescription_id, "prescription")
    new_id = db.execute(insert(refill_orders).values(prescription_id=prescription_id, kind="renewal_request",
                                                     status="pending_review")).inserted_primary_key[0]
    _log(db, f"request_renewal order={new_id}")
    return {"order_id": new_id, "drug": found["drug"], "status": "pending_review"}


@tool("write")
def update_insurance(db, patient_id: int, plan_id: int, member_id: str) -> dict:
    """Save a patient's insurance plan and member ID.

    Args:
        patient_id: The patient number.
        plan_id: The insurance plan's numeric ID (from check_eligibility).
        member_id: The member ID on the insurance card.
    """
    fetch_one(db, patients, patient_id, "patient")
    plan = fetch_one(db, insurance_plans, plan_id, "insurance plan")
    member = member_id.strip().upper()
    if not member:
        raise ToolFailure("member_id must not be empty")
    db.execute(update(patients).where(patients.c.id == patient_id).values(
        insurance_plan_id=plan_id, insurance_member_id=member, updated_at=MODIFIED))
    _log(db, f"update_insurance patient={patient_id}")
    return {"patient_id": patient_id, "plan": plan["name"], "member_id": member}


@tool("write", free_args=("summary",))
def open_front_desk_case(db, patient_id: int, category: CaseCategory, summary: str) -> dict:
    """Open a front-desk case for the clinic staff to follow up.

    Args:
        patient_id: The patient number.
        category: One of "identity_verification_failed", "billing_question", "other".
        summary: What happened and what the caller wants, in a sentence or two.
    """
    category = category.strip().lower()
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    fetch_one(db, patients, patient_id, "patient")
    new_id = db.execute(insert(cases).values(patient_id=patient_id, category=category, status="open",
                                             summary=summary)).inserted_primary_key[0]
    _log(db, f"open_front_desk_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
