"""HR and payroll domain seed: the deterministic base rows every task starts from, the row
builders tasks use for their own records, and the calendar arithmetic tools and tasks share.

Base ids live below the task ranges (employees < 2000, leave balances < 5000, leave requests
< 3000, payroll runs < 50, expense claims < 700), so a task's rows never collide with them.
"""

from __future__ import annotations

import datetime as dt
import random
from functools import cache
from typing import Any

Row = dict[str, Any]

TODAY = dt.date(2026, 5, 11)  # HR's "today"; mirrors policy.md
EFFECTIVE_DATE = "2026-06-01"  # salary changes and new enrolments take effect on the 1st of next month
HR_DIRECTOR = 1  # approves raises above 10% (policy.md)
PLANS = ((1, "Core Health", "health", 210), (2, "Health Plus", "health", 340), (3, "Dental Basic", "dental", 28),
         (4, "Dental Plus", "dental", 46), (5, "Vision Care", "vision", 12), (6, "Pension Match 4", "pension", 0),
         (7, "Pension Match 6", "pension", 0), (8, "Vision Plus", "vision", 19))
FIRST_NAMES = ("Adaeze", "Bjorn", "Camila", "Dmitri", "Esme", "Florin", "Gwen", "Hamza", "Isla", "Joaquin",
               "Katya", "Lorenzo", "Mirela", "Nadia", "Osman", "Petra", "Rafael", "Selin", "Theo", "Ulla",
               "Valentin", "Wren", "Yara", "Zoltan")
LAST_NAMES = ("Achterberg", "Bianchi", "Chowdhury", "Delacroix", "Esposito", "Falk", "Grant", "Horvath",
              "Ibarra", "Jovanovic", "Kaur", "Lindgren", "Morales", "Nakashima", "Ostrowski", "Pereira",
              "Rahman", "Sorensen", "Tkachenko", "Urquhart", "Voss", "Whitfield")
DEPARTMENTS = ("Finance", "Sales", "Engineering", "Marketing", "Operations", "Support")
TITLES = ("Analyst", "Specialist", "Engineer", "Coordinator", "Associate", "Consultant")


def day(offset: int) -> str:
    """The ISO date `offset` days from TODAY (negative: in the past)."""
    return (TODAY + dt.timedelta(days=offset)).isoformat()


def working_days(start: str, end: str) -> int:
    """Monday-to-Friday days from start to end, both included."""
    first, last = dt.date.fromisoformat(start), dt.date.fromisoformat(end)
    return sum((first + dt.timedelta(days=k)).weekday() < 5 for k in range((last - first).days + 1))


def person(rng: random.Random, employee_id: int, manager_id: int | None, hired_ago: int | None = None) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    birth = dt.date(1962, 1, 1) + dt.timedelta(days=rng.randrange(365 * 38))
    return {"id": employee_id, "first_name": first, "last_name": last, "date_of_birth": birth.isoformat(),
            "department": rng.choice(DEPARTMENTS), "job_title": rng.choice(TITLES), "manager_id": manager_id,
            "hire_date": day(-(hired_ago if hired_ago is not None else rng.randrange(200, 4000))),
            "annual_salary": rng.randrange(42, 140) * 1000, "status": "active", "updated_at": None}


def balances(employee_id: int, first_id: int, vacation: int, sick: int) -> list[Row]:
    return [{"id": first_id, "employee_id": employee_id, "leave_type": "vacation", "days_remaining": vacation},
            {"id": first_id + 1, "employee_id": employee_id, "leave_type": "sick", "days_remaining": sick}]


def leave_request(request_id: int, employee: Row, leave_type: str, start: str, end: str, status: str) -> Row:
    return {"id": request_id, "employee_id": employee["id"], "leave_type": leave_type, "start_date": start,
            "end_date": end, "days": working_days(start, end), "status": status,
            "approver_id": employee["manager_id"], "updated_at": None}


def expense(rng: random.Random, claim_id: int, employee_id: int, amount: float, has_receipt: int,
            status: str = "submitted", category: str | None = None) -> Row:
    return {"id": claim_id, "employee_id": employee_id,
            "category": category or rng.choice(("travel", "meals", "equipment", "training")), "amount": amount,
            "has_receipt": has_receipt, "submitted_on": day(-rng.randrange(1, 20)), "status": status,
            "payroll_run_id": None, "note": None, "updated_at": None}


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260511)
    people = [person(rng, 1, None)] + [person(rng, i, 1) for i in range(2, 7)]
    people += [person(rng, i, rng.randrange(2, 7)) for i in range(7, 41)]
    people[0] |= {"department": "People", "job_title": "HR Director"}
    rows: dict[str, list[Row]] = {"employees": people, "leave_balances": [], "leave_requests": [],
                                  "expense_claims": [], "benefit_enrolments": []}
    for k, p in enumerate(people):
        rows["leave_balances"] += balances(p["id"], 2 * k + 1, rng.randrange(0, 26), rng.randrange(2, 11))
    for request_id in range(1, 31):
        start = day(rng.randrange(-60, 90))
        end = (dt.date.fromisoformat(start) + dt.timedelta(days=rng.randrange(0, 8))).isoformat()
        rows["leave_requests"].append(leave_request(request_id, rng.choice(people[6:]), "vacation", start, end,
                                                    rng.choice(("approved", "approved", "pending", "rejected"))))
    rows["payroll_runs"] = [{"id": m, "period": f"2026-0{m}", "pay_date": f"2026-0{m}-28", "status": "paid"}
                            for m in range(1, 5)]
    for claim_id in range(1, 31):
        status = rng.choice(("approved", "rejected", "withdrawn", "submitted"))
        claim = expense(rng, claim_id, rng.choice(people)["id"], rng.randrange(1500, 40000) / 100,
                        int(rng.random() < 0.8), status)
        claim["payroll_run_id"] = rng.randrange(1, 5) if status == "approved" else None
        rows["expense_claims"].append(claim)
    rows["benefit_plans"] = [{"id": i, "name": n, "kind": k, "monthly_cost": c} for i, n, k, c in PLANS]
    for enrolment_id in range(1, 21):
        rows["benefit_enrolments"].append({"id": enrolment_id, "employee_id": people[enrolment_id + 5]["id"],
                                           "plan_id": rng.randrange(1, 9), "effective_date": "2025-01-01",
                                           "status": "active"})
    rows["salary_changes"] = [{"id": 1, "employee_id": 9, "old_salary": 60000, "new_salary": 62000,
                               "effective_date": "2026-01-01", "status": "applied", "approver_id": None,
                               "reason": "annual review"}]
    rows["hr_cases"] = [{"id": 1, "employee_id": 12, "category": "payroll_query", "status": "open",
                         "summary": "Asked why overtime was missing from the April payslip."}]
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every HR task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
