"""Clinic domain seed: the deterministic base rows every task starts from, and the row builders
tasks use to add their own records on top.

Base ids live below the task ranges (patients < 2000, practitioners < 100, slots < 10000,
appointments < 4000, referrals < 600, prescriptions < 3000, roster rows < 500). Base slots lie
on or before TODAY + 5 days, so a booking task later than that sees only its own slots.
"""

from __future__ import annotations

import datetime as dt
import random
from functools import cache
from typing import Any

Row = dict[str, Any]

TODAY = dt.date(2026, 5, 11)  # the clinic's "today"; mirrors policy.md
LATE_CANCEL_FEE, NO_SHOW_FEE = 40, 50  # mirror policy.md
SPECIALTIES = ("cardiology", "dermatology", "orthopedics", "neurology")
PLANS = ((1, "BlueRiver PPO", 25), (2, "Summit Health HMO", 15), (3, "Evergreen Choice", 30),
         (4, "Harbor Medicaid", 0), (5, "Keystone Silver", 40), (6, "Lumen Gold", 20))
DRUGS = (("Lisinopril", "10 mg daily", 0), ("Atorvastatin", "20 mg daily", 0), ("Metformin", "500 mg twice daily", 0),
         ("Levothyroxine", "50 mcg daily", 0), ("Sertraline", "50 mg daily", 0), ("Amlodipine", "5 mg daily", 0),
         ("Zolpidem", "5 mg at bedtime", 1), ("Oxycodone", "5 mg as needed", 1), ("Adderall", "10 mg daily", 1))
TIMES_AM, TIMES_PM = ("08:30", "09:15", "10:00", "11:30"), ("13:30", "14:15", "15:00", "16:30")
FIRST_NAMES = ("Amara", "Benedikt", "Chiara", "Dorian", "Elif", "Fionn", "Giulia", "Henrik", "Imani", "Jasper",
               "Kalani", "Lior", "Marisol", "Nikolai", "Odette", "Priyanka", "Rasmus", "Saoirse", "Tobias",
               "Uma", "Viggo", "Wanjiru", "Ximena", "Yosef")
LAST_NAMES = ("Abernathy", "Baptiste", "Cardenas", "Draper", "Ekström", "Fairbanks", "Gallagher", "Hashemi",
              "Iglesias", "Janssen", "Kovacs", "Lacroix", "Mbeki", "Nordin", "Okonkwo", "Pruitt", "Quiroga",
              "Rautio", "Szabo", "Trujillo", "Vance", "Wojcik")


def day(offset: int) -> str:
    """The ISO date `offset` days from TODAY (negative: in the past)."""
    return (TODAY + dt.timedelta(days=offset)).isoformat()


def patient(rng: random.Random, patient_id: int, primary_id: int, plan_id: int | None = None) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    birth = dt.date(1945, 1, 1) + dt.timedelta(days=rng.randrange(365 * 60))
    return {"id": patient_id, "first_name": first, "last_name": last, "date_of_birth": birth.isoformat(),
            "phone": f"+1-503-555-{rng.randrange(10000):04d}", "primary_practitioner_id": primary_id,
            "insurance_plan_id": plan_id, "insurance_member_id": f"M{rng.randrange(10**7):07d}" if plan_id else None,
            "updated_at": None}


def slot(slot_id: int, practitioner_id: int, date: str, start_time: str, status: str = "open") -> Row:
    return {"id": slot_id, "practitioner_id": practitioner_id, "date": date, "start_time": start_time,
            "status": status}


def appointment(appointment_id: int, patient_row: Row, slot_row: Row, status: str = "booked",
                referral_id: int | None = None) -> Row:
    return {"id": appointment_id, "patient_id": patient_row["id"], "slot_id": slot_row["id"],
            "practitioner_id": slot_row["practitioner_id"], "status": status, "referral_id": referral_id,
            "updated_at": None}


def prescription(rng: random.Random, prescription_id: int, patient_row: Row, drug: tuple[str, str, int],
                 refills: int) -> Row:
    return {"id": prescription_id, "patient_id": patient_row["id"],
            "practitioner_id": patient_row["primary_practitioner_id"], "drug": drug[0], "dosage": drug[1],
            "refills_remaining": refills, "controlled": drug[2], "updated_at": None}


def _practitioners(rng: random.Random) -> list[Row]:
    kinds = ("general",) * 4 + tuple(s for s in SPECIALTIES for _ in range(2))
    return [{"id": i, "name": f"Dr. {rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}", "specialty": kind}
            for i, kind in enumerate(kinds, 1)]


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260511)
    doctors = _practitioners(rng)
    people = [patient(rng, i, rng.randrange(1, 5), rng.choice((None, 1, 2, 3, 4, 5, 6))) for i in range(1, 41)]
    roster = [{"id": p["id"], "plan_id": p["insurance_plan_id"], "member_id": p["insurance_member_id"],
               "status": "active"} for p in people if p["insurance_plan_id"]]
    base_slots = [slot(i, doctors[i % 12]["id"], day(rng.randrange(-10, 6)), rng.choice(TIMES_AM + TIMES_PM))
                  for i in range(1, 81)]
    visits = []
    for appointment_id, booked in enumerate(base_slots[:40], 1):
        booked["status"] = "booked"
        status = "booked" if booked["date"] >= day(0) else rng.choice(("completed", "completed", "no_show"))
        visits.append(appointment(appointment_id, rng.choice(people), booked, status))
    referrals = [{"id": i, "patient_id": people[i]["id"], "specialty": rng.choice(SPECIALTIES),
                  "referring_practitioner_id": people[i]["primary_practitioner_id"],
                  "status": rng.choice(("active", "used")), "expires_on": day(rng.randrange(-30, 120))}
                 for i in range(1, 16)]
    missed = next(v for v in visits if v["status"] == "no_show")
    scripts = [prescription(rng, i, people[i % 40], rng.choice(DRUGS), rng.randrange(0, 4)) for i in range(1, 31)]
    return {"practitioners": doctors, "insurance_plans": [{"id": i, "name": n, "copay": c} for i, n, c in PLANS],
            "insurance_members": roster, "patients": people, "slots": base_slots, "appointments": visits,
            "referrals": referrals, "prescriptions": scripts,
            "refill_orders": [{"id": 1, "prescription_id": 3, "kind": "refill", "status": "sent"}],
            "charges": [{"id": 1, "patient_id": missed["patient_id"], "appointment_id": missed["id"],
                         "kind": "no_show_fee", "amount": NO_SHOW_FEE, "status": "billed"}],
            "cases": [{"id": 1, "patient_id": 3, "category": "other", "status": "open",
                       "summary": "Asked for a copy of last year's lab results."}]}


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every clinic task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
