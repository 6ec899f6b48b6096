"""The HR and payroll training domain: deterministic generation, easy families a small model can solve,
tasks the scripted user can play, tools that fail clearly, and checks that pass the reference and
fail the do-nothing agent, single faults and the policy's tempting shortcuts. What every domain
shares is in test_generated_tasks.py."""

import inspect
import json
import re
from typing import get_args

from tbx.domains import get_domain
from tbx.domains.hr_payroll.seed import EFFECTIVE_DATE, HR_DIRECTOR, TODAY, base_rows, working_days
from tbx.grading import grade_state

from .harness import run_tools, state_row

HR = get_domain("hr_payroll")
TOOLS = {spec.name: spec for spec in HR.tools}
TASKS = HR.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


def test_closed_choices_are_enums():
    hint = inspect.signature(TOOLS["request_leave"].fn).parameters["leave_type"].annotation
    assert get_args(hint) == ("vacation", "sick", "unpaid")  # the agent's schema lists them as an enum


def test_the_open_payroll_run_is_the_tasks():
    assert not [r for r in base_rows()["payroll_runs"] if r["status"] == "open"]  # the open run is the task's


def test_policy_states_the_rules_the_tasks_check():
    policy = HR.policy
    assert f"Today is **{TODAY.isoformat()}**" in policy
    for phrase in ("no identity verification", "employee ID and date of birth", "Up to and including 5%",
                   "up to and including 10%", f"employee {HR_DIRECTOR}", "over $75.00", "30 days of their hire date",
                   "2026-04-11", "**unpaid leave**", "`benefits_exception`", "`identity_verification_failed`"):
        assert phrase in policy, phrase


def test_tasks_follow_the_approval_limits_and_the_receipt_rule():
    for data in (t for t in TASKS if t["family"].startswith("raise_")):
        manager, report = data["seed"]["rows"]["employees"]
        [change] = [c for c in data["checks"]["expected"] if c["table"] == "salary_changes"]
        percent = (change["values"]["new_salary"] - report["annual_salary"]) * 100 / report["annual_salary"]
        if percent <= 5:
            assert change["values"]["status"] == "applied", data["id"]
        else:
            approver = manager["manager_id"] if percent <= 10 else HR_DIRECTOR
            assert change["values"] == change["values"] | {"status": "pending_approval", "approver_id": approver}
    approvers = {c["values"]["approver_id"] for t in TASKS if t["family"] == "raise_needs_approval_hard"
                 for c in t["checks"]["expected"] if c["table"] == "salary_changes"}
    assert HR_DIRECTOR in approvers and len(approvers) > 1  # both limits are exercised
    for data in (t for t in TASKS if t["family"] == "process_expenses_hard"):
        claims = {c["id"]: c for c in data["seed"]["rows"]["expense_claims"]}
        for change in (c for c in data["checks"]["expected"] if c["table"] == "expense_claims"):
            claim = claims[change["key"]["id"]]
            rejected = claim["amount"] > 75 and not claim["has_receipt"]
            assert change["values"]["status"] == ("rejected" if rejected else "approved"), data["id"]


def test_applying_a_raise_that_needs_approval_fails_the_task(backend, runtime):
    data = task("raise_needs_approval_hard", 0)
    rt = runtime(data)
    report = data["seed"]["rows"]["employees"][1]
    new = next(c for c in data["checks"]["expected"] if c["table"] == "salary_changes")["values"]["new_salary"]
    _, final = run_tools(backend, rt, [("change_salary", {"employee_id": report["id"], "new_salary": new, "reason": "x"})])
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "employees" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_working_days_count_monday_to_friday():
    assert working_days("2026-05-11", "2026-05-17") == 5  # Monday to Sunday
    assert working_days("2026-05-16", "2026-05-17") == 0  # a weekend
    assert working_days("2026-05-15", "2026-05-18") == 2  # Friday and Monday


def test_lookups_and_writes_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("withdraw_expense_easy", 0))
    results, _ = run_tools(backend, rt, [("get_employee", {"employee_id": 99}),
                                    ("cancel_leave_request", {"leave_request_id": 2999}),
                                    ("withdraw_expense_claim", {"claim_id": 699}),
                                    ("approve_expense_claim", {"claim_id": 699, "payroll_run_id": 1})])
    assert [r.is_error for r in results] == [True] * 4
    assert "employee 99 not found" in results[0].text and "leave request 2999 not found" in results[1].text
    assert "expense claim 699 not found" in results[2].text


def test_verify_employee_needs_the_right_birth_date(backend, runtime):
    data = task("book_leave_medium", 0)
    who = seed_row(data, "employees")
    rt = runtime(data)
    (wrong, right), _ = run_tools(backend, rt, [("verify_employee", {"employee_id": who["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_employee", {"employee_id": who["id"],
                                                                "date_of_birth": who["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text)["verified"] is True


def test_cancelling_approved_leave_returns_the_days_once(backend, runtime):
    data = task("cancel_leave_easy", 1)  # odd instances are approved requests
    request = seed_row(data, "leave_requests")
    assert request["status"] == "approved"
    balance = next(b for b in data["seed"]["rows"]["leave_balances"] if b["leave_type"] == request["leave_type"])
    rt = runtime(data)
    results, final = run_tools(backend, rt, [("cancel_leave_request", {"leave_request_id": request["id"]}),
                                        ("cancel_leave_request", {"leave_request_id": request["id"]}),
                                        ("get_leave_request", {"leave_request_id": request["id"]}),
                                        ("get_leave_request", {"leave_request_id": 2999})])
    assert not results[0].is_error and "cancelled and cannot be cancelled" in results[1].text
    assert json.loads(results[2].text)["status"] == "cancelled" and "2999 not found" in results[3].text
    assert state_row(final, "leave_balances", balance["id"])["days_remaining"] == str(balance["days_remaining"]
                                                                                + request["days"])


def test_request_leave_counts_days_and_refuses_bad_dates(backend, runtime):
    data = task("book_leave_medium", 0)
    who = seed_row(data, "employees")
    rt = runtime(data)
    results, _ = run_tools(backend, rt, [
        ("request_leave", {"employee_id": who["id"], "leave_type": "Vacation", "start_date": "2026-06-01",
                           "end_date": "2026-06-07"}),
        ("request_leave", {"employee_id": who["id"], "leave_type": "sabbatical", "start_date": "2026-06-01",
                           "end_date": "2026-06-02"}),
        ("request_leave", {"employee_id": who["id"], "leave_type": "vacation", "start_date": "2026-06-31",
                           "end_date": "2026-07-02"}),
        ("request_leave", {"employee_id": who["id"], "leave_type": "vacation", "start_date": TODAY.isoformat(),
                           "end_date": "2026-05-12"})])
    assert json.loads(results[0].text) | {"leave_request_id": 0} == {"leave_request_id": 0, "days": 5, "status": "pending",
                                                               "approver_id": who["manager_id"]}
    assert "leave_type must be one of" in results[1].text and "not a date" in results[2].text
    assert "start after today" in results[3].text


def test_salary_expense_and_benefit_writes(backend, runtime):
    data = task("process_expenses_hard", 0)
    rt = runtime(data)
    run, locked = (next(r for r in data["seed"]["rows"]["payroll_runs"] if r["status"] == s) for s in ("open", "locked"))
    claim = next(c for c in data["seed"]["rows"]["expense_claims"] if c["status"] == "submitted")
    who = seed_row(data, "employees")
    results, final = run_tools(backend, rt, [
        ("approve_expense_claim", {"claim_id": claim["id"], "payroll_run_id": locked["id"]}),
        ("approve_expense_claim", {"claim_id": claim["id"], "payroll_run_id": run["id"]}),
        ("reject_expense_claim", {"claim_id": claim["id"], "reason": "x"}),
        ("change_salary", {"employee_id": who["id"], "new_salary": who["annual_salary"], "reason": "x"}),
        ("request_salary_approval", {"employee_id": who["id"], "new_salary": 99000.5, "approver_id": 1,
                                     "reason": "x"}),
        ("enrol_benefit", {"employee_id": who["id"], "plan_id": 3}),
        ("enrol_benefit", {"employee_id": who["id"], "plan_id": 3})])
    assert [r.is_error for r in results] == [True, False, True, True, False, False, True]
    assert "locked; use an open run" in results[0].text and "already earns" in results[3].text
    assert json.loads(results[4].text)["effective_date"] == EFFECTIVE_DATE
    assert "already enrolled" in results[6].text
    assert state_row(final, "expense_claims", claim["id"])["payroll_run_id"] == str(run["id"])
    assert state_row(final, "employees", who["id"])["annual_salary"] == str(who["annual_salary"])  # pending: unchanged


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("book_leave_medium", 0))
    for extra in HR.distractors:
        (result,), final = run_tools(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    assert {e["arguments"]["employee_id"] for e in HR.distractors} <= {r["id"] for r in base_rows()["employees"]}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", EFFECTIVE_DATE)
