"""HR and payroll task families (training split), generated deterministically from a seed.

Difficulty is in each family's name. Easy families are one write by request number, with every
fact in the opening message and no identity check. Medium ones verify the caller and make a
lookup before one write; hard ones hold back a decision, pick an approver by the approval limits,
review several records, or refuse by policy while still leaving a positive record (a pending
salary change, an unpaid request, an HR case), so a do-nothing agent fails them too. References
suit the scripted user: each question names the facts it needs by their keywords; the closing
statement has neither '?' nor keyword.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from functools import partial
from typing import Any

from tbx.domains.hr_payroll.seed import (
    EFFECTIVE_DATE,
    HR_DIRECTOR,
    PLANS,
    Row,
    balances,
    day,
    expense,
    leave_request,
    person,
    working_days,
)
from tbx.domains.kit import Built, IdPool, ask_for, call, identity_records, private_facts, training_tasks

EASY_INSTANCES, INSTANCES = 10, 8
# Easy tasks offer a short tool list: the full one does not fit a 2k-token model context next to the
# policy. The two easy writes come first in tools.py, so few-shot examples show them; the last tool
# is the first distractor's, so the extra-write mutation can be played in an episode.
EASY_TOOLS = ["cancel_leave_request", "withdraw_expense_claim", "get_leave_request", "open_hr_case"]
KEYWORDS = {
    "employee_id": ["employee id", "employee number"],
    "date_of_birth": ["date of birth", "birth date", "birthday"],
    "unpaid_choice": ["unpaid leave"],
}
ASKS = {"employee_id": "your employee ID", "date_of_birth": "your date of birth"}


_ask = partial(ask_for, ASKS)
_facts = partial(private_facts, KEYWORDS)


def _identity(employee: Row, **more: Any) -> dict:
    return _facts(employee_id=employee["id"], date_of_birth=employee["date_of_birth"], **more)


def _built(persona: str, instructions: str, opening: str, rows: dict, reference: list, expected: list,
           facts: dict | None = None) -> Built:
    """A task's record; the identity records its reference's verifications leave head the expected changes."""
    verified = identity_records(reference, "verify_employee", "employee_id", rows.get("employees", []))
    return {"persona": persona, "instructions": instructions, "facts": facts or {}, "opening": opening,
            "rows": rows, "reference": reference, "expected": [*verified, *expected]}


def _employee(rng: random.Random, ids: IdPool, manager_id: int | None = None, hired_ago: int | None = None) -> Row:
    return person(rng, ids(2000, 5000), manager_id or rng.randrange(2, 7), hired_ago)


def _name(row: Row) -> str:
    return f"{row['first_name']} {row['last_name']}"


def _period(rng: random.Random, days: tuple[int, int]) -> tuple[str, str, int]:
    """A leave period starting on a weekday after today, with a working-day count in `days`."""
    while True:
        start = day(rng.randrange(5, 70))
        end = (dt.date.fromisoformat(start) + dt.timedelta(days=rng.randrange(0, 14))).isoformat()
        count = working_days(start, end)
        if dt.date.fromisoformat(start).weekday() < 5 and days[0] <= count <= days[1]:
            return start, end, count


def _cancel_leave_easy(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    employee = _employee(rng, ids)
    start, end, count = _period(rng, (1, 8))
    status = ("pending", "approved")[index % 2]
    request = leave_request(ids(3000, 4000), employee, rng.choice(("vacation", "vacation", "sick")), start, end,
                            status)
    held = balances(employee["id"], ids(5000, 6000), rng.randrange(0, 20), rng.randrange(1, 10))
    expected = [{"op": "update", "table": "leave_requests", "key": {"id": request["id"]},
                 "values": {"status": "cancelled"}}]
    if status == "approved":  # the tool gives the days back to the balance of that leave type
        balance = next(b for b in held if b["leave_type"] == request["leave_type"])
        expected.append({"op": "update", "table": "leave_balances", "key": {"id": balance["id"]},
                         "values": {"days_remaining": balance["days_remaining"] + count}})
    return _built(
        f"{_name(employee)}, an Acme employee whose plans changed.", f"Have leave request {request['id']} cancelled.",
        f"Cancel leave request {request['id']}.",
        {"employees": [employee], "leave_balances": held, "leave_requests": [request]},
        [call("cancel_leave_request", leave_request_id=request["id"]),
         {"say": f"Done: leave request {request['id']} ({start} to {end}) is cancelled."}], expected)


def _withdraw_expense_easy(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    employee = _employee(rng, ids)
    claim = expense(rng, ids(700, 1000), employee["id"], rng.randrange(1200, 30000) / 100, 1)
    return _built(
        f"{_name(employee)}, an Acme employee who filed a claim by mistake.",
        f"Have expense claim {claim['id']} withdrawn.", f"Withdraw expense claim {claim['id']}.",
        {"employees": [employee], "expense_claims": [claim]},
        [call("withdraw_expense_claim", claim_id=claim["id"]),
         {"say": f"Done: expense claim {claim['id']} for ${claim['amount']:.2f} is withdrawn."}],
        [{"op": "update", "table": "expense_claims", "key": {"id": claim["id"]}, "values": {"status": "withdrawn"}}])


def _leave_family(rng: random.Random, index: int, covered: bool) -> Built:
    """Book vacation when the balance covers it; otherwise, with consent, file it as unpaid leave."""
    ids = IdPool(rng)
    employee = _employee(rng, ids)
    start, end, count = _period(rng, (2, 9) if covered else (3, 9))
    vacation = rng.randrange(count, count + 12) if covered else rng.randrange(0, count)
    held = balances(employee["id"], ids(5000, 6000), vacation, rng.randrange(1, 10))
    steps = [_ask("employee_id", "date_of_birth"), call("verify_employee", employee_id=employee["id"],
                                    date_of_birth=employee["date_of_birth"]),
             call("get_employee", employee_id=employee["id"])]
    kind, facts = "vacation", _identity(employee)
    if not covered:
        kind, facts = "unpaid", _identity(employee, unpaid_choice="yes, please file it as unpaid leave")
        steps.append({"say": f"Your vacation balance is {vacation} days, but {start} to {end} is {count} working "
                             f"days. Would you like me to file the whole period as unpaid leave instead?"})
    steps += [call("request_leave", employee_id=employee["id"], leave_type=kind, start_date=start, end_date=end),
              {"say": f"Your {kind} request for {start} to {end} ({count} working days) is filed and waits for "
                      f"your manager's approval."}]
    return _built(
        f"{_name(employee)}, an Acme {employee['job_title'].lower()}.",
        f"You want time off from {start} to {end}. If vacation days do not cover it, unpaid is fine.",
        f"Hi, I'd like to take vacation from {start} to {end}.",
        {"employees": [employee], "leave_balances": held}, steps,
        [{"op": "insert", "table": "leave_requests", "values": {
            "employee_id": employee["id"], "leave_type": kind, "start_date": start, "end_date": end,
            "days": count, "status": "pending", "approver_id": employee["manager_id"]}}], facts)


def _book_leave_medium(rng: random.Random, index: int) -> Built:
    return _leave_family(rng, index, covered=True)


def _leave_as_unpaid_hard(rng: random.Random, index: int) -> Built:
    return _leave_family(rng, index, covered=False)


RAISES_WITHIN, RAISES_OVER = (2, 3, 4, 5), (6, 8, 10, 12, 15, 20)  # percent; 5 and 10 are the limits


def _raise_family(rng: random.Random, index: int, within: bool) -> Built:
    """A verified manager asks for a raise: apply up to 5%, else file it for the right approver."""
    ids = IdPool(rng)
    manager = _employee(rng, ids)
    report = _employee(rng, ids, manager_id=manager["id"])
    percent = RAISES_WITHIN[index % 4] if within else RAISES_OVER[index % 6]
    old = report["annual_salary"]
    new = old + old * percent // 100
    steps = [_ask("employee_id", "date_of_birth"), call("verify_employee", employee_id=manager["id"],
                                    date_of_birth=manager["date_of_birth"]),
             call("get_employee", employee_id=report["id"])]
    change = {"employee_id": report["id"], "old_salary": old, "new_salary": new, "effective_date": EFFECTIVE_DATE}
    if within:
        steps += [call("change_salary", employee_id=report["id"], new_salary=new, reason="Manager-requested raise."),
                  {"say": f"Done: {_name(report)}'s salary goes from ${old:,} to ${new:,} ({percent}%), effective "
                          f"{EFFECTIVE_DATE}."}]
        expected = [{"op": "update", "table": "employees", "key": {"id": report["id"]},
                     "values": {"annual_salary": new}},
                    {"op": "insert", "table": "salary_changes",
                     "values": change | {"status": "applied", "approver_id": None}}]
    else:
        approver = manager["manager_id"] if percent <= 10 else HR_DIRECTOR
        who = "your own manager" if percent <= 10 else "the HR director"
        steps += [call("get_employee", employee_id=manager["id"]),  # the skip-level approver
                  call("request_salary_approval", employee_id=report["id"], new_salary=new, approver_id=approver,
                        reason="Manager-requested raise above the direct-approval limit."),
                  {"say": f"A {percent}% raise is above what I can apply directly, so I filed it for approval by "
                          f"{who}. The salary stays ${old:,} until it is approved."}]
        expected = [{"op": "insert", "table": "salary_changes",
                     "values": change | {"status": "pending_approval", "approver_id": approver}}]
    return _built(
        f"{_name(manager)}, a manager at Acme.",
        f"Get {_name(report)} a raise to ${new:,} a year. Accept what the agent says policy allows.",
        f"Hi, I'd like to give {_name(report)} (employee {report['id']}) a raise to ${new:,} a year.",
        {"employees": [manager, report]}, steps, expected, _identity(manager))


def _raise_within_limit_medium(rng: random.Random, index: int) -> Built:
    return _raise_family(rng, index, within=True)


def _raise_needs_approval_hard(rng: random.Random, index: int) -> Built:
    return _raise_family(rng, index, within=False)


def _process_expenses_hard(rng: random.Random, index: int) -> Built:
    """Review every submitted claim: over $75 without a receipt is rejected, the rest approved."""
    ids = IdPool(rng)
    employee = _employee(rng, ids)
    run = {"id": ids(50, 100), "period": "2026-05", "pay_date": "2026-05-28", "status": "open"}
    locked = {"id": ids(50, 100), "period": "2026-04", "pay_date": "2026-04-28", "status": "locked"}
    small = 75.0 if index % 4 == 0 else rng.randrange(1000, 7500) / 100  # $75.00 exactly needs no receipt
    claims = [expense(rng, ids(700, 1000), employee["id"], small, 0),
              expense(rng, ids(700, 1000), employee["id"], rng.randrange(7501, 40000) / 100, 1),
              expense(rng, ids(700, 1000), employee["id"], rng.randrange(7501, 40000) / 100, 0)]
    rng.shuffle(claims)
    claims.append(expense(rng, ids(700, 1000), employee["id"], rng.randrange(7501, 40000) / 100, 0, "rejected"))
    steps = [_ask("employee_id", "date_of_birth"), call("verify_employee", employee_id=employee["id"],
                                    date_of_birth=employee["date_of_birth"]),
             call("list_expense_claims", employee_id=employee["id"]), call("list_payroll_runs")]
    expected = []
    for claim in claims[:3]:
        if claim["amount"] > 75 and not claim["has_receipt"]:
            steps.append(call("reject_expense_claim", claim_id=claim["id"], reason="Missing receipt for a claim over $75."))
            values = {"status": "rejected"}
        else:
            steps.append(call("approve_expense_claim", claim_id=claim["id"], payroll_run_id=run["id"]))
            values = {"status": "approved", "payroll_run_id": run["id"]}
        expected.append({"op": "update", "table": "expense_claims", "key": {"id": claim["id"]}, "values": values})
    steps.append({"say": "I reviewed your three submitted claims: the ones with a receipt or of $75 or less are "
                         "approved for the May payroll paid on 2026-05-28; the one over $75 without a receipt is "
                         "rejected."})
    return _built(
        f"{_name(employee)}, an Acme employee back from a business trip.",
        "Get your submitted expense claims processed.", "Hi, could you process my submitted expense claims?",
        {"employees": [employee], "payroll_runs": [locked, run], "expense_claims": claims}, steps, expected,
        _identity(employee))


def _benefit_family(rng: random.Random, index: int, in_window: bool) -> Built:
    """Enrol within 30 days of hire; outside the window open a benefits_exception case instead."""
    ids = IdPool(rng)
    # index 1 and 0 sit on the window's edges: hired 30 days ago (inside) and 31 days ago (outside)
    hired_ago = (0, 30, 12, 21)[index % 4] if in_window else (31, 45, 120, 400)[index % 4]
    employee = _employee(rng, ids, hired_ago=hired_ago + (rng.randrange(3) if index % 4 > 1 else 0))
    plan_id, plan, _, cost = PLANS[rng.randrange(len(PLANS))]
    steps = [_ask("employee_id", "date_of_birth"), call("verify_employee", employee_id=employee["id"],
                                    date_of_birth=employee["date_of_birth"]),
             call("get_employee", employee_id=employee["id"]), call("list_benefit_plans")]
    if in_window:
        steps += [call("enrol_benefit", employee_id=employee["id"], plan_id=plan_id),
                  {"say": f"You are enrolled in {plan} (${cost} a month) from {EFFECTIVE_DATE}."}]
        expected = [{"op": "insert", "table": "benefit_enrolments", "values": {
            "employee_id": employee["id"], "plan_id": plan_id, "effective_date": EFFECTIVE_DATE, "status": "active"}}]
    else:
        steps += [call("open_hr_case", employee_id=employee["id"], category="benefits_exception",
                        summary=f"Wants to join {plan} outside the 30-day enrolment window."),
                  {"say": f"You were hired on {employee['hire_date']}, more than 30 days ago, so I cannot enrol you "
                          f"now. I opened a case for HR to check whether a qualifying life event applies."}]
        expected = [{"op": "insert", "table": "hr_cases", "values": {
            "employee_id": employee["id"], "category": "benefits_exception", "status": "open"}}]
    return _built(
        f"{_name(employee)}, an Acme employee hired on {employee['hire_date']}.",
        f"You want to join the {plan} plan. Accept what the agent says policy allows.",
        f"Hi, I'd like to enrol in the {plan} plan.", {"employees": [employee]}, steps, expected,
        _identity(employee))


def _benefit_enrol_medium(rng: random.Random, index: int) -> Built:
    return _benefit_family(rng, index, in_window=True)


def _benefit_outside_window_hard(rng: random.Random, index: int) -> Built:
    return _benefit_family(rng, index, in_window=False)


def _identity_fails_hard(rng: random.Random, index: int) -> Built:
    """The caller's date of birth does not match: change nothing, open an identity case."""
    ids = IdPool(rng)
    employee = _employee(rng, ids)
    wrong = f"{employee['date_of_birth'][:5]}{(int(employee['date_of_birth'][5:7]) % 12) + 1:02d}-15"
    start, end, _ = _period(rng, (1, 5))
    want = f"take vacation from {start} to {end}" if index % 2 == 0 else "enrol in the Dental Plus plan"
    return _built(
        f"Someone calling about {_name(employee)}'s HR record.",
        f"You want to {want}. You give the date of birth you hold when asked.", f"Hi, I'd like to {want}.",
        {"employees": [employee], "leave_balances": balances(employee["id"], ids(5000, 6000), 20, 5)},
        [_ask("employee_id", "date_of_birth"), call("verify_employee", employee_id=employee["id"], date_of_birth=wrong),
         call("open_hr_case", employee_id=employee["id"], category="identity_verification_failed",
               summary="Caller could not be verified."),
         {"say": "I'm sorry, the details you gave do not match our records, so I cannot make any change. "
                 "I have logged this for the HR team."}],
        [{"op": "insert", "table": "hr_cases", "values": {
            "employee_id": employee["id"], "category": "identity_verification_failed", "status": "open"}}],
        _facts(employee_id=employee["id"], date_of_birth=wrong))


FAMILIES: dict[str, Callable[[random.Random, int], Built]] = {
    "cancel_leave_easy": _cancel_leave_easy,
    "withdraw_expense_easy": _withdraw_expense_easy,
    "book_leave_medium": _book_leave_medium,
    "raise_within_limit_medium": _raise_within_limit_medium,
    "benefit_enrol_medium": _benefit_enrol_medium,
    "leave_as_unpaid_hard": _leave_as_unpaid_hard,
    "raise_needs_approval_hard": _raise_needs_approval_hard,
    "process_expenses_hard": _process_expenses_hard,
    "benefit_outside_window_hard": _benefit_outside_window_hard,
    "identity_fails_hard": _identity_fails_hard,
}


def generate_tasks(seed: int = 0) -> list[dict]:
    """All HR tasks for `seed`: same seed → same tasks. Easy families get more instances."""
    return training_tasks("hr_payroll", FAMILIES, seed, (EASY_INSTANCES, INSTANCES), EASY_TOOLS)
