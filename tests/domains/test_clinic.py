"""The clinic training domain: deterministic generation, easy families a small model can solve, tasks
the scripted user can play, tools that fail clearly, and checks that pass the reference and fail the
do-nothing agent, single faults and the policy's tempting shortcuts. What every domain shares is in
test_generated_tasks.py."""

import inspect
import json
from typing import get_args

from tbx.domains import get_domain
from tbx.domains.clinic.seed import LATE_CANCEL_FEE, NO_SHOW_FEE, TODAY, base_rows, day
from tbx.grading import grade_state

from .harness import run_tools, state_row

CLINIC = get_domain("clinic")
TOOLS = {spec.name: spec for spec in CLINIC.tools}
TASKS = CLINIC.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


def test_closed_choices_are_enums():
    hint = inspect.signature(TOOLS["add_charge"].fn).parameters["kind"].annotation
    assert get_args(hint) == ("late_cancel_fee", "no_show_fee")  # the agent's schema lists them as an enum


def test_task_slots_for_bookings_lie_after_the_base_slots():
    assert max(s["date"] for s in base_rows()["slots"]) <= day(5)
    for data in TASKS:
        if "referral" in data["family"] or "specialist" in data["family"]:  # booking dates see only task slots
            assert min(s["date"] for s in data["seed"]["rows"]["slots"]) > day(5)


def test_policy_states_the_rules_the_tasks_check():
    policy = CLINIC.policy
    assert f"Today is **{TODAY.isoformat()}**" in policy
    for phrase in (f"${LATE_CANCEL_FEE} late-cancellation fee", f"${NO_SHOW_FEE} no-show fee", "first no-show",
                   "no identity verification", "patient number and date of birth", "**today or tomorrow**",
                   "`expires_on` is on or after", "not a controlled substance", "`eligible`",
                   "`identity_verification_failed`"):
        assert phrase in policy, phrase


def test_fees_follow_the_calendar_and_the_no_show_history():
    for data in (t for t in TASKS if t["family"] in ("cancel_appointment_easy", "late_cancel_fee_medium")):
        date = seed_row(data, "slots")["date"]
        charged = any(c["table"] == "charges" for c in data["checks"]["expected"])
        assert charged == (date <= day(1)), data["id"]
    for data in (t for t in TASKS if t["family"] == "no_show_medium"):
        earlier = any(a["status"] == "no_show" for a in data["seed"]["rows"]["appointments"])
        assert earlier == any(c["table"] == "charges" for c in data["checks"]["expected"]), data["id"]


def test_refilling_a_controlled_substance_fails_the_task(backend, runtime):
    data = next(t for t in TASKS if t["family"] == "refill_needs_renewal_hard"
                and seed_row(t, "prescriptions")["controlled"])
    rt = runtime(data)
    script = seed_row(data, "prescriptions")
    (result,), final = run_tools(backend, rt, [("refill_prescription", {"prescription_id": script["id"]})])
    assert not result.is_error  # the tool allows it: the policy is the agent's to follow
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "prescriptions" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_and_writes_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("check_in_easy", 0))
    results, _ = run_tools(backend, rt, [("get_appointment", {"appointment_id": 3999}),
                                    ("get_patient", {"patient_id": 99}),
                                    ("find_slots", {"specialty": "dentistry", "date": day(9)}),
                                    ("check_eligibility", {"plan_name": "Nope", "member_id": "M1"}),
                                    ("cancel_appointment", {"appointment_id": 3999})])
    assert [r.is_error for r in results] == [True] * 5
    assert "appointment 3999 not found" in results[0].text and "patient 99 not found" in results[1].text
    assert "specialty must be" in results[2].text and "no insurance plan" in results[3].text


def test_verify_patient_needs_the_right_birth_date(backend, runtime):
    data = task("refill_medium", 0)
    who = seed_row(data, "patients")
    rt = runtime(data)
    (wrong, right), _ = run_tools(backend, rt, [("verify_patient", {"patient_id": who["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_patient", {"patient_id": who["id"],
                                                               "date_of_birth": who["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text)["verified"] is True


def test_appointment_state_changes_and_their_invariants(backend, runtime):
    data = task("late_cancel_fee_medium", 1)  # odd instances are tomorrow
    visit, held, who = seed_row(data, "appointments"), seed_row(data, "slots"), seed_row(data, "patients")
    rt = runtime(data)
    results, final = run_tools(backend, rt, [
        ("get_appointment", {"appointment_id": visit["id"]}),
        ("check_in_appointment", {"appointment_id": visit["id"]}),
        ("mark_no_show", {"appointment_id": visit["id"]}),
        ("add_charge", {"patient_id": who["id"] + 1, "appointment_id": visit["id"], "kind": "late_cancel_fee",
                        "amount": 40}),
        ("add_charge", {"patient_id": who["id"], "appointment_id": visit["id"], "kind": "parking", "amount": 40}),
        ("cancel_appointment", {"appointment_id": visit["id"]}),
        ("cancel_appointment", {"appointment_id": visit["id"]})])
    assert json.loads(results[0].text)["days_until"] == 1
    assert [r.is_error for r in results[1:]] == [True, True, True, True, False, True]
    assert "not today" in results[1].text and "still in the future" in results[2].text
    assert "is not patient" in results[3].text and "kind must be one of" in results[4].text
    assert "cancelled, not booked" in results[6].text
    assert state_row(final, "slots", held["id"])["status"] == "open"


def test_booking_uses_the_referral_and_the_slot_once(backend, runtime):
    data = task("book_specialist_medium", 0)
    who, referral = seed_row(data, "patients"), seed_row(data, "referrals")
    free = seed_row(data, "slots")
    rt = runtime(data)
    results, final = run_tools(backend, rt, [
        ("find_slots", {"specialty": referral["specialty"], "date": free["date"]}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": free["id"], "referral_id": referral["id"]}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": free["id"], "referral_id": 0}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": seed_row(data, "slots", 1)["id"],
                              "referral_id": referral["id"]})])
    assert len(json.loads(results[0].text)) == 2  # the booked third slot is not offered
    assert [r.is_error for r in results[1:]] == [False, True, True]
    assert "already booked" in results[2].text and "not an active referral" in results[3].text
    assert state_row(final, "referrals", referral["id"])["status"] == "used"


def test_prescriptions_insurance_and_cases(backend, runtime):
    data = task("insurance_update_medium", 0)
    who, roster = seed_row(data, "patients"), data["seed"]["rows"]["insurance_members"]
    rt = runtime(data)
    plans = {p["id"]: p["name"] for p in base_rows()["insurance_plans"]}
    results, final = run_tools(backend, rt, [
        ("check_eligibility", {"plan_name": plans[roster[0]["plan_id"]].upper(), "member_id": roster[0]["member_id"]}),
        ("check_eligibility", {"plan_name": plans[roster[1]["plan_id"]], "member_id": roster[1]["member_id"]}),
        ("update_insurance", {"patient_id": who["id"], "plan_id": roster[0]["plan_id"],
                              "member_id": roster[0]["member_id"].lower()}),
        ("open_front_desk_case", {"patient_id": who["id"], "category": "gossip", "summary": "x"})])
    assert json.loads(results[0].text)["eligible"] is True and json.loads(results[1].text)["eligible"] is False
    assert results[3].is_error and "category must be one of" in results[3].text
    assert state_row(final, "patients", who["id"])["insurance_member_id"] == roster[0]["member_id"]
    data = task("refill_needs_renewal_hard", 0)
    script = seed_row(data, "prescriptions")
    assert script["refills_remaining"] == 0
    (empty,), _ = run_tools(backend, runtime(data), [("refill_prescription", {"prescription_id": script["id"]})])
    assert empty.is_error and "no refills left" in empty.text


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("refill_medium", 0))
    for extra in CLINIC.distractors:
        (result,), final = run_tools(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    assert CLINIC.distractors[0]["arguments"]["patient_id"] in {r["id"] for r in base_rows()["patients"]}
