"""The travel domain: deterministic task generation, tasks the scripted user can play, tools that fail
clearly, and checks that pass the reference and fail the do-nothing agent and single faults. What
every domain shares is in test_generated_tasks.py."""

import json
import re

import pytest

from tbx.backend import dump_state
from tbx.catalog import template_rows
from tbx.domains import get_domain
from tbx.domains.travel.seed import GRADE_LIMITS, base_rows
from tbx.grading import grade_state, same_changes
from tbx.tasks.mutations import mutate
from tbx.tools.runtime import invoke

from .harness import call, replay, rows, without_identity

TRAVEL = get_domain("travel")
TOOLS = {spec.name: spec for spec in TRAVEL.tools}
TASKS = TRAVEL.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def test_task_confirmation_codes_never_collide_with_the_base():
    base = base_rows()
    base_codes = {b["confirmation_code"] for b in base["bookings"]}
    for data in TASKS:
        codes = {b["confirmation_code"] for b in data["seed"]["rows"].get("bookings", [])}
        assert codes.isdisjoint(base_codes), data["id"]


def test_policy_states_the_rules_the_tasks_check():
    policy = TRAVEL.policy
    assert "A room downgrade needs a manager's approval" in policy
    table = dict(re.findall(r"\| (G\d) \| \$(\d+) \|", policy))
    assert {g: int(v) for g, v in table.items()} == GRADE_LIMITS
    for phrase in ("$50 cancellation fee", "original payment method", "identity_verification_failed",
                   "nonrefundable_cancellation", "last name or date of birth"):
        assert phrase in policy


def test_the_spec_example_is_a_1450_dollar_booking_that_needs_an_approval_request():
    data = task("downgrade_needs_approval", 0)
    booking = data["seed"]["rows"]["bookings"][0]
    employee = data["seed"]["rows"]["employees"][0]
    assert booking["total_amount"] == 1450 and booking["nights"] == 5 and booking["nightly_rate"] == 290
    identity, expected = data["checks"]["expected"]
    assert identity == {"op": "insert", "table": "identity_checks", "values": {"employee_id": employee["id"]}}
    assert expected["table"] == "approvals" and expected["op"] == "insert"
    assert expected["values"]["approver_id"] == employee["manager_id"]
    assert expected["values"]["status"] == "pending" and expected["values"]["request_type"] == "room_downgrade"


@pytest.mark.slow
def test_every_reference_passes_its_checks_and_doing_nothing_fails(backend, runtime):
    for data in TASKS:  # prepare_task replays the reference and grades it against checks.expected
        rt = runtime(data)
        idle = grade_state(rt.initial, rt.initial, rt.expected, rt.volatile)
        assert idle.passed is False, data["id"]


def test_downgrading_without_approval_fails_and_keeps_booking_and_payment(backend, runtime):
    data = task("downgrade_needs_approval", 0)
    rt = runtime(data)
    booking = data["seed"]["rows"]["bookings"][0]
    db = backend.clone(rt.template)
    try:  # what the base model did in the SPEC: downgrade, refund, declare success
        assert not invoke(TOOLS["change_room"], db.engine, {"booking_id": booking["id"], "room_type_id": 11}).is_error
        assert not invoke(TOOLS["issue_refund"], db.engine, {"booking_id": booking["id"], "amount": 400,
                                                             "reason": "downgrade"}).is_error
        final = dump_state(db.engine, TRAVEL.metadata)
    finally:
        backend.drop(db)
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False
    assert "approvals" in grade.explain() and "refunds" in grade.explain()


@pytest.mark.slow
def test_single_fault_mutations_fail_on_every_task(backend, runtime):
    for data in TASKS:
        rt = runtime(data)
        reference = replay(backend, rt, rt.task.reference)
        for mutation in mutate(rt.task.reference, TOOLS, TRAVEL.distractors):
            final = replay(backend, rt, mutation.steps)
            grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
            if grade.passed and same_changes(rt.initial, final, reference):
                continue  # equivalent: a verification that fails by design, dropped or changed: no write
            assert grade.passed is False, (data["id"], mutation.description)


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("downgrade_needs_approval", 0))
    assert call(backend, rt, "get_booking", confirmation_code="NOPE00")[0].text.startswith("Error: no booking")
    assert "employee 99 not found" in call(backend, rt, "verify_identity", employee_id=99, last_name="X")[0].text
    assert "hotel 77 not found" in call(backend, rt, "get_hotel_rooms", hotel_id=77)[0].text
    result, _ = call(backend, rt, "cancel_booking", booking_id=4999, reason="x")
    assert result.is_error and "booking 4999 not found" in result.text


def test_verify_identity_rejects_a_wrong_last_name_or_birth_date(backend, runtime):
    data = task("update_profile", 0)
    employee = data["seed"]["rows"]["employees"][0]
    rt = runtime(data)
    wrong, _ = call(backend, rt, "verify_identity", employee_id=employee["id"], last_name="Nobody")
    assert json.loads(wrong.text) == {"verified": False,
                                      "reason": f"the last name does not match employee {employee['id']}"}
    wrong_birth, _ = call(backend, rt, "verify_identity", employee_id=employee["id"], date_of_birth="1900-01-01")
    assert json.loads(wrong_birth.text)["verified"] is False
    right, _ = call(backend, rt, "verify_identity", employee_id=employee["id"],
                    last_name=employee["last_name"].upper(), date_of_birth=employee["date_of_birth"])
    assert json.loads(right.text)["verified"] is True and "date_of_birth" not in json.loads(right.text)["employee"]
    assert call(backend, rt, "verify_identity", employee_id=employee["id"])[0].is_error


def test_change_room_and_refund_write_the_right_rows(backend, runtime):
    data = task("downgrade_approved", 0)  # $1,450: 5 nights at $290 → Standard Queen at $210
    rt = runtime(data)
    booking = data["seed"]["rows"]["bookings"][0]
    db = backend.clone(rt.template)
    try:
        moved = invoke(TOOLS["change_room"], db.engine, {"booking_id": booking["id"], "room_type_id": 11})
        assert json.loads(moved.text)["new_total"] == 1050  # 5 × 210
        refund = invoke(TOOLS["issue_refund"], db.engine, {"booking_id": booking["id"], "amount": 400, "reason": "x"})
        assert not refund.is_error
        over = invoke(TOOLS["issue_refund"], db.engine, {"booking_id": booking["id"], "amount": 1050.01, "reason": "x"})
        assert over.is_error and "exceeds the 1050" in over.text  # 1450 paid − 400 refunded
        final = dump_state(db.engine, TRAVEL.metadata)
    finally:
        backend.drop(db)
    row = next(r for r in rows(final, "bookings") if r["id"] == str(booking["id"]))
    assert (row["room_type_id"], row["nightly_rate"], row["total_amount"]) == ("11", "210", "1050")
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_write_tools_refuse_what_cannot_be_done(backend, runtime):
    data = task("downgrade_approved", 0)
    rt = runtime(data)
    booking_id = data["seed"]["rows"]["bookings"][0]["id"]
    employee_id = data["seed"]["rows"]["employees"][0]["id"]
    assert "another hotel" in call(backend, rt, "change_room", booking_id=booking_id, room_type_id=21)[0].text
    for amount, problem in ((0, "greater than zero"), (-5, "greater than zero"), (1.234, "two decimals")):
        assert problem in call(backend, rt, "issue_refund", booking_id=booking_id, amount=amount, reason="x")[0].text
    assert "request_type" in call(backend, rt, "request_approval", employee_id=employee_id, booking_id=booking_id,
                                  request_type="refund", room_type_id=11, reason="x")[0].text
    assert "does not belong" in call(backend, rt, "request_approval", employee_id=1008, booking_id=booking_id,
                                     request_type="room_downgrade", room_type_id=11, reason="x")[0].text
    assert "field must be one of" in call(backend, rt, "update_profile", employee_id=employee_id,
                                          field="grade", value="G5")[0].text
    assert "category" in call(backend, rt, "open_support_case", employee_id=employee_id, category="vip",
                              summary="x")[0].text
    assert "not a flight booking" in call(backend, rt, "rebook_flight", booking_id=booking_id, flight_id=101)[0].text


def test_cancelling_a_flight_frees_a_seat_and_cannot_be_repeated(backend, runtime):
    data = task("cancel_refundable", 1)  # odd instances are flights
    rt = runtime(data)
    booking = data["seed"]["rows"]["bookings"][0]
    leg = data["seed"]["rows"]["flights"][0]
    assert booking["kind"] == "flight"
    db = backend.clone(rt.template)
    try:
        assert not invoke(TOOLS["cancel_booking"], db.engine, {"booking_id": booking["id"], "reason": "x"}).is_error
        again = invoke(TOOLS["cancel_booking"], db.engine, {"booking_id": booking["id"], "reason": "x"})
        assert again.is_error and "already cancelled" in again.text
        final = dump_state(db.engine, TRAVEL.metadata)
    finally:
        backend.drop(db)
    seats = next(r for r in rows(final, "flights") if r["id"] == str(leg["id"]))["seats_available"]
    assert seats == str(leg["seats_available"] + 1)


def test_request_approval_goes_to_the_manager_and_leaves_the_booking_alone(backend, runtime):
    data = task("upgrade_over_limit", 0)
    rt = runtime(data)
    employee = data["seed"]["rows"]["employees"][0]
    booking = data["seed"]["rows"]["bookings"][0]
    target = data["checks"]["expected"][1]["values"]["requested_room_type_id"]  # [0]: the identity record
    result, final = call(backend, rt, "request_approval", employee_id=employee["id"], booking_id=booking["id"],
                         request_type="room_upgrade", room_type_id=target, reason="client dinner")
    assert json.loads(result.text)["approver_id"] == employee["manager_id"]
    assert rows(final, "bookings") == rows(rt.initial, "bookings")
    assert rows(final, "payments") == rows(rt.initial, "payments")


def test_base_seed_builds_and_distractors_touch_base_records_only(backend, runtime):
    rt = runtime(task("update_profile", 0))
    assert len(rows(rt.initial, "employees")) == len(base_rows()["employees"]) + 1
    for extra in TRAVEL.distractors:
        result, final = call(backend, rt, extra["tool"], **extra["arguments"])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    task_employees = {r["employees"][0]["id"] for r in (t["seed"]["rows"] for t in TASKS)}
    assert {e["arguments"]["employee_id"] for e in TRAVEL.distractors}.isdisjoint(task_employees)
    assert template_rows(rt.task)["employees"][-1]["id"] == rt.task.seed_rows["employees"][0]["id"]
