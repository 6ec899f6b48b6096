"""Clinic task families (training split), generated deterministically from a seed.

Difficulty is in each family's name. Easy families are one write by appointment number, with
every fact in the opening message and no identity check. Medium ones need a lookup (the date, the
no-show history, the referral, the prescription) or held-back facts; hard ones refuse by policy
while still leaving a positive record (a referral request, a renewal request, a case), so a
do-nothing agent fails them too. References suit the scripted user: each question names the
facts it needs by their keywords; the closing statement has neither '?' nor keyword.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from tbx.domains.clinic.seed import (
    DRUGS,
    LATE_CANCEL_FEE,
    NO_SHOW_FEE,
    PLANS,
    SPECIALTIES,
    TIMES_AM,
    TIMES_PM,
    Row,
    appointment,
    day,
    patient,
    prescription,
    slot,
)
from tbx.domains.kit import Built, IdPool, call, identity_records, private_facts, training_tasks

EASY_INSTANCES, INSTANCES = 10, 8
# Easy tasks offer a short tool list: the full one does not fit a 2k-token model context next to the
# policy. The two easy writes come first in tools.py, so few-shot examples show them; the last tool
# is the first distractor's, so the extra-write mutation can be played in an episode.
EASY_TOOLS = ["cancel_appointment", "check_in_appointment", "get_appointment", "open_front_desk_case"]
KEYWORDS = {
    "patient_id": ["patient number", "patient id"],
    "date_of_birth": ["date of birth", "birth date", "birthday"],
    "member_id": ["member id", "member number"],
}
SPECIALISTS = {"cardiology": (5, 6), "dermatology": (7, 8), "orthopedics": (9, 10), "neurology": (11, 12)}


def _ask(member: bool = False) -> dict:
    more = ", your date of birth and the member ID on your new card" if member else " and your date of birth"
    return {"say": f"I can help with that. Could you please give me your patient number{more}?"}


def _facts(row: Row, date_of_birth: str | None = None, **more: Any) -> dict:
    values = {"patient_id": row["id"], "date_of_birth": date_of_birth or row["date_of_birth"], **more}
    return private_facts(KEYWORDS, **values)


def _built(persona: str, instructions: str, opening: str, rows: dict, reference: list, expected: list,
           facts: dict | None = None) -> Built:
    """A task's record; the identity records its reference's verifications leave head the expected changes."""
    verified = identity_records(reference, "verify_patient", "patient_id", rows.get("patients", []))
    return {"persona": persona, "instructions": instructions, "facts": facts or {}, "opening": opening,
            "rows": rows, "reference": reference, "expected": [*verified, *expected]}


def _patient(rng: random.Random, ids: IdPool) -> Row:
    return patient(rng, ids(2000, 5000), rng.randrange(1, 5), rng.choice((None, 1, 2, 3, 4, 5, 6)))


def _name(row: Row) -> str:
    return f"{row['first_name']} {row['last_name']}"


def _visit(rng: random.Random, ids: IdPool, who: Row, offset: int, status: str = "booked",
           practitioner_id: int | None = None) -> tuple[Row, Row]:
    """(slot, appointment) of `who` `offset` days from today."""
    held = slot(ids(10000, 20000), practitioner_id or rng.randrange(1, 13), day(offset),
                rng.choice(TIMES_AM + TIMES_PM), "booked")
    return held, appointment(ids(4000, 10000), who, held, status)


def _cancel(rng: random.Random, index: int, late: bool) -> Built:
    """Cancel by number: free two or more days ahead, a late-cancellation fee today or tomorrow."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    held, visit = _visit(rng, ids, who, index % 2 if late else rng.randrange(2, 30))
    steps = [call("cancel_appointment", appointment_id=visit["id"])]
    expected = [{"op": "update", "table": "appointments", "key": {"id": visit["id"]}, "values": {"status": "cancelled"}},
                {"op": "update", "table": "slots", "key": {"id": held["id"]}, "values": {"status": "open"}}]
    closing = f"Done: appointment {visit['id']} on {held['date']} is cancelled."
    if late:
        steps = [call("get_appointment", appointment_id=visit["id"]), *steps,
                 call("add_charge", patient_id=who["id"], appointment_id=visit["id"], kind="late_cancel_fee",
                       amount=LATE_CANCEL_FEE)]
        expected.append({"op": "insert", "table": "charges", "values": {
            "patient_id": who["id"], "appointment_id": visit["id"], "kind": "late_cancel_fee",
            "amount": LATE_CANCEL_FEE, "status": "billed"}})
        closing += f" As it was less than two days away, a ${LATE_CANCEL_FEE} late-cancellation fee is billed."
    return _built(
        f"{_name(who)}, a patient of the clinic.", f"Have appointment {visit['id']} cancelled.",
        f"Cancel appointment {visit['id']}.", {"patients": [who], "slots": [held], "appointments": [visit]},
        steps + [{"say": closing}], expected)


def _cancel_appointment_easy(rng: random.Random, index: int) -> Built:
    return _cancel(rng, index, late=False)


def _late_cancel_fee_medium(rng: random.Random, index: int) -> Built:
    return _cancel(rng, index, late=True)


def _check_in_easy(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    who = _patient(rng, ids)
    held, visit = _visit(rng, ids, who, 0)
    return _built(
        "A nurse at the clinic reception.", f"Have appointment {visit['id']} checked in.",
        f"Check in appointment {visit['id']}. The patient has arrived.",
        {"patients": [who], "slots": [held], "appointments": [visit]},
        [call("check_in_appointment", appointment_id=visit["id"]),
         {"say": f"Done: {_name(who)} is checked in for appointment {visit['id']} at {held['start_time']}."}],
        [{"op": "update", "table": "appointments", "key": {"id": visit["id"]}, "values": {"status": "checked_in"}}])


def _no_show_medium(rng: random.Random, index: int) -> Built:
    """Record a no-show; bill the fee unless it is the patient's first no-show."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    held, visit = _visit(rng, ids, who, -(index % 3))
    repeat = index % 2 == 1
    old_slot, old_visit = _visit(rng, ids, who, -rng.randrange(20, 200), "no_show" if repeat else "completed")
    steps = [call("get_appointment", appointment_id=visit["id"]), call("get_patient", patient_id=who["id"]),
             call("mark_no_show", appointment_id=visit["id"])]
    expected = [{"op": "update", "table": "appointments", "key": {"id": visit["id"]}, "values": {"status": "no_show"}}]
    if repeat:
        steps.append(call("add_charge", patient_id=who["id"], appointment_id=visit["id"], kind="no_show_fee",
                           amount=NO_SHOW_FEE))
        expected.append({"op": "insert", "table": "charges", "values": {
            "patient_id": who["id"], "appointment_id": visit["id"], "kind": "no_show_fee", "amount": NO_SHOW_FEE,
            "status": "billed"}})
    outcome = f"a ${NO_SHOW_FEE} no-show fee is billed" if repeat else "as it is the first no-show, no fee is billed"
    return _built(
        "A receptionist at the clinic.", f"Have the missed appointment {visit['id']} recorded.",
        f"{_name(who)} did not come to appointment {visit['id']} on {held['date']}. Please record the no-show.",
        {"patients": [who], "slots": [old_slot, held], "appointments": [old_visit, visit]},
        steps + [{"say": f"Recorded: appointment {visit['id']} is a no-show, and {outcome}."}], expected)


def _referral(ids: IdPool, who: Row, specialty: str, status: str, expires_on: str) -> Row:
    return {"id": ids(600, 900), "patient_id": who["id"], "specialty": specialty,
            "referring_practitioner_id": who["primary_practitioner_id"], "status": status, "expires_on": expires_on}


def _specialist(rng: random.Random, index: int, referred: bool) -> Built:
    """Book a specialist with a valid referral; without one, request a referral instead."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    specialty = SPECIALTIES[index % 4]
    date = day(rng.randrange(7, 40))
    doctors = SPECIALISTS[specialty]
    when = ("morning", "afternoon")[index % 2]
    am, pm = rng.choice(TIMES_AM), rng.choice(TIMES_PM)
    offered = [slot(ids(10000, 20000), doctors[0], date, am), slot(ids(10000, 20000), doctors[1], date, pm),
               slot(ids(10000, 20000), doctors[1], date, rng.choice(TIMES_AM), "booked")]
    chosen = offered[0] if when == "morning" else offered[1]
    after = (dt.date.fromisoformat(date) + dt.timedelta(days=rng.randrange(0, 90))).isoformat()
    if referred:
        papers = [_referral(ids, who, specialty, "active", after)]
    else:  # no referral, an expired one, a used one, or one for another specialty
        other = SPECIALTIES[(index + 1) % 4]
        papers = [[], [_referral(ids, who, specialty, "active", day(rng.randrange(0, 6)))],
                  [_referral(ids, who, specialty, "used", after)],
                  [_referral(ids, who, other, "active", after)]][(index // 2) % 4]
    steps = [_ask(), call("verify_patient", patient_id=who["id"], date_of_birth=who["date_of_birth"]),
             call("get_patient", patient_id=who["id"]), call("find_slots", specialty=specialty, date=date)]
    if referred:
        steps += [call("book_appointment", patient_id=who["id"], slot_id=chosen["id"], referral_id=papers[0]["id"]),
                  {"say": f"You are booked for {specialty} on {date} at {chosen['start_time']}, using your referral."}]
        expected = [{"op": "insert", "table": "appointments", "values": {
                        "patient_id": who["id"], "slot_id": chosen["id"], "practitioner_id": chosen["practitioner_id"],
                        "status": "booked", "referral_id": papers[0]["id"]}},
                    {"op": "update", "table": "slots", "key": {"id": chosen["id"]}, "values": {"status": "booked"}},
                    {"op": "update", "table": "referrals", "key": {"id": papers[0]["id"]}, "values": {"status": "used"}}]
    else:
        steps += [call("request_referral", patient_id=who["id"], specialty=specialty),
                  {"say": f"A {specialty} visit needs an active {specialty} referral valid on {date}, and none on your "
                          f"record covers it, so I cannot book it yet. I asked your primary practitioner for a "
                          f"referral; please call back once it is approved."}]
        expected = [{"op": "insert", "table": "referrals", "values": {
            "patient_id": who["id"], "specialty": specialty, "status": "requested", "expires_on": None,
            "referring_practitioner_id": who["primary_practitioner_id"]}}]
    return _built(
        f"{_name(who)}, a patient of the clinic.",
        f"Book a {specialty} appointment on {date} in the {when}. Accept what the agent says policy allows.",
        f"Hi, I'd like to book a {specialty} appointment on {date}, in the {when} if possible.",
        {"patients": [who], "slots": offered, "referrals": papers}, steps, expected, _facts(who))


def _book_specialist_medium(rng: random.Random, index: int) -> Built:
    return _specialist(rng, index, referred=True)


def _specialist_needs_referral_hard(rng: random.Random, index: int) -> Built:
    return _specialist(rng, index, referred=False)


def _refill(rng: random.Random, index: int, allowed: bool) -> Built:
    """Refill a prescription with refills left and no controlled substance; else a renewal request."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    plain = [d for d in DRUGS if not d[2]]
    drug = rng.choice(plain if allowed or index % 2 == 0 else [d for d in DRUGS if d[2]])
    refills = rng.randrange(1, 4) if allowed or drug[2] else 0
    script = prescription(rng, ids(3000, 4000), who, drug, refills)
    other = prescription(rng, ids(3000, 4000), who, rng.choice([d for d in plain if d != drug]), rng.randrange(0, 4))
    steps = [_ask(), call("verify_patient", patient_id=who["id"], date_of_birth=who["date_of_birth"]),
             call("get_patient", patient_id=who["id"])]
    if allowed:
        steps += [call("refill_prescription", prescription_id=script["id"]),
                  {"say": f"Your {drug[0]} refill is sent to the pharmacy; {refills - 1} refill(s) remain."}]
        expected = [{"op": "update", "table": "prescriptions", "key": {"id": script["id"]},
                     "values": {"refills_remaining": refills - 1}},
                    {"op": "insert", "table": "refill_orders",
                     "values": {"prescription_id": script["id"], "kind": "refill", "status": "sent"}}]
    else:
        why = "is a controlled substance" if drug[2] else "has no refills left"
        steps += [call("request_renewal", prescription_id=script["id"]),
                  {"say": f"Your {drug[0]} prescription {why}, so I cannot send a refill. I asked your "
                          f"prescriber to review and renew it; the clinic will contact you."}]
        expected = [{"op": "insert", "table": "refill_orders", "values": {
            "prescription_id": script["id"], "kind": "renewal_request", "status": "pending_review"}}]
    return _built(
        f"{_name(who)}, a patient of the clinic.", f"Get a refill of your {drug[0]}. Accept what policy allows.",
        f"Hello, I need a refill of my {drug[0]}.", {"patients": [who], "prescriptions": [script, other]},
        steps, expected, _facts(who))


def _refill_medium(rng: random.Random, index: int) -> Built:
    return _refill(rng, index, allowed=True)


def _refill_needs_renewal_hard(rng: random.Random, index: int) -> Built:
    return _refill(rng, index, allowed=False)


def _insurance_update_medium(rng: random.Random, index: int) -> Built:
    """Check new insurance details with the insurer, then save them."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    plan_id, plan, _ = rng.choice([p for p in PLANS if p[0] != who["insurance_plan_id"]])
    member = f"M{rng.randrange(10**7):07d}"
    roster = [{"id": ids(500, 1000), "plan_id": plan_id, "member_id": member, "status": "active"},
              {"id": ids(500, 1000), "plan_id": plan_id % 6 + 1, "member_id": member, "status": "terminated"}]
    return _built(
        f"{_name(who)}, a patient of the clinic.", f"Have your new {plan} insurance saved on your record.",
        f"Hi, I have new insurance with {plan}. Please update my record.",
        {"patients": [who], "insurance_members": roster},
        [_ask(member=True), call("verify_patient", patient_id=who["id"], date_of_birth=who["date_of_birth"]),
         call("check_eligibility", plan_name=plan, member_id=member),
         call("update_insurance", patient_id=who["id"], plan_id=plan_id, member_id=member),
         {"say": f"Your {plan} coverage is confirmed as active and saved on your record."}],
        [{"op": "update", "table": "patients", "key": {"id": who["id"]},
          "values": {"insurance_plan_id": plan_id, "insurance_member_id": member}}],
        _facts(who, member_id=member))


def _identity_fails_hard(rng: random.Random, index: int) -> Built:
    """The caller's date of birth does not match: change nothing, open an identity case."""
    ids = IdPool(rng)
    who = _patient(rng, ids)
    wrong = f"{int(who['date_of_birth'][:4]) + rng.choice((-3, -1, 1, 2))}{who['date_of_birth'][4:]}"
    script = prescription(rng, ids(3000, 4000), who, rng.choice([d for d in DRUGS if not d[2]]), 2)
    want = f"a refill of my {script['drug']}" if index % 2 == 0 else "to book a check-up with my doctor"
    return _built(
        f"Someone calling about {_name(who)}'s records.",
        f"You want {want.replace('my ', 'the ')}. You give the date of birth you hold when asked.",
        f"Hello, I need {want}.", {"patients": [who], "prescriptions": [script]},
        [_ask(), call("verify_patient", patient_id=who["id"], date_of_birth=wrong),
         call("open_front_desk_case", patient_id=who["id"], category="identity_verification_failed",
               summary="Caller could not be verified."),
         {"say": "I'm sorry, the details you gave do not match our records, so I cannot make any change. "
                 "I have logged this for the clinic staff."}],
        [{"op": "insert", "table": "cases", "values": {
            "patient_id": who["id"], "category": "identity_verification_failed", "status": "open"}}],
        _facts(who, date_of_birth=wrong))


FAMILIES: dict[str, Callable[[random.Random, int], Built]] = {
    "cancel_appointment_easy": _cancel_appointment_easy,
    "check_in_easy": _check_in_easy,
    "late_cancel_fee_medium": _late_cancel_fee_medium,
    "no_show_medium": _no_show_medium,
    "book_specialist_medium": _book_specialist_medium,
    "refill_medium": _refill_medium,
    "insurance_update_medium": _insurance_update_medium,
    "specialist_needs_referral_hard": _specialist_needs_referral_hard,
    "refill_needs_renewal_hard": _refill_needs_renewal_hard,
    "identity_fails_hard": _identity_fails_hard,
}


def generate_tasks(seed: int = 0) -> list[dict]:
    """All clinic tasks for `seed`: same seed → same tasks. Easy families get more instances."""
    return training_tasks("clinic", FAMILIES, seed, (EASY_INSTANCES, INSTANCES), EASY_TOOLS)
