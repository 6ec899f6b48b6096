"""HR and payroll tools: what the HR assistant may read and write.

The tools enforce only hard invariants (records exist, dates are valid, a leave that has started
cannot be cancelled, a claim is paid only through an open payroll run). Business rules such as
the raise approval limits, the receipt rule or the enrolment window live in policy.md and are the
agent's to follow: the tools would let the agent break them, which a task then checks.
"""

from decimal import Decimal
from typing import Literal, get_args

from sqlalchemy import insert, select, update

from tbx.domains.hr_payroll.schema import (
    audit_log,
    benefit_enrolments,
    benefit_plans,
    employees,
    expense_claims,
    hr_cases,
    identity_checks,
    leave_balances,
    leave_requests,
    payroll_runs,
    salary_changes,
)
from tbx.domains.hr_payroll.seed import EFFECTIVE_DATE, TODAY, working_days
from tbx.domains.kit import fetch_one, parse_date, parse_money, record_once
from tbx.tools import ToolFailure, tool

# Closed choices are Literal types, so the schema the agent sees lists them as an enum.
LeaveType = Literal["vacation", "sick", "unpaid"]
CaseCategory = Literal["benefits_exception", "identity_verification_failed", "payroll_query", "other"]
LEAVE_TYPES, CASE_CATEGORIES = get_args(LeaveType), get_args(CaseCategory)
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _employee(db, employee_id: int) -> dict:
    row = db.execute(select(employees).where(employees.c.id == employee_id)).mappings().first()
    if row is None:
        raise ToolFailure(f"employee {employee_id} not found")
    return dict(row)


def _money(amount: float) -> Decimal:
    wrong = "amount must be a number greater than zero with at most two decimals"
    return parse_money(amount, sign_message=wrong, cents_message=wrong, size_first=True)


def _log(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


# The desk's two most common actions come first: a model's few-shot examples show the
# first tools of the list (tbx.policies.prompting.demonstrations_for).
@tool("write")
def cancel_leave_request(db, leave_request_id: int) -> dict:
    """Cancel a pending or approved leave request that has not started yet.

    Cancelling an approved vacation or sick request gives its days back to the balance.

    Args:
        leave_request_id: The leave request number.
    """
    request = fetch_one(db, leave_requests, leave_request_id, "leave request")
    if request["status"] not in ("pending", "approved"):
        raise ToolFailure(f"leave request {leave_request_id} is {request['status']} and cannot be cancelled")
    if request["start_date"] <= TODAY.isoformat():
        raise ToolFailure(f"leave request {leave_request_id} started on {request['start_date']}; "
                          "it cannot be cancelled")
    db.execute(update(leave_requests).where(leave_requests.c.id == leave_request_id).values(
        status="cancelled", updated_at=MODIFIED))
    if request["status"] == "approved" and request["leave_type"] != "unpaid":
        db.execute(update(leave_balances).where(
            leave_balances.c.employee_id == request["employee_id"],
            leave_balances.c.leave_type == request["leave_type"]).values(
            days_remaining=leave_balances.c.days_remaining + request["days"]))
    _log(db, f"cancel_leave_request request={leave_request_id}")
    return {"leave_request_id": leave_request_id, "status": "cancelled",
            "days_returned": request["status"] == "approved"}


@tool("write")
def withdraw_expense_claim(db, claim_id: int) -> dict:
    """Withdraw a submitted expense claim (it will not be reviewed or paid).

    Args:
        claim_id: The expense claim number.
    """
    claim = fetch_one(db, expense_claims, claim_id, "expense claim")
    if claim["status"] != "submitted":
        raise ToolFailure(f"expense claim {claim_id} is {claim['status']}; only submitted claims can be withdrawn")
    db.execute(update(expense_claims).where(expense_claims.c.id == claim_id).values(
        status="withdrawn", updated_at=MODIFIED))
    _log(db, f"withdraw_expense_claim claim={claim_id}")
    return {"claim_id": claim_id, "status": "withdrawn"}


@tool("write")
def verify_employee(db, employee_id: int, date_of_birth: str) -> dict:
    """Check a caller's identity: their employee ID and date of birth, as the caller stated them.

    Returns {"verified": true} when both match (recorded on file), otherwise {"verified": false}.

    Args:
        employee_id: The employee ID the caller gave.
        date_of_birth: The date of birth the caller gave, as YYYY-MM-DD.
    """
    if date_of_birth.strip() != _employee(db, employee_id)["date_of_birth"]:
        return {"verified": False, "reason": f"the date of birth does not match employee {employee_id}"}
    record_once(db, identity_checks, employee_id=employee_id)
    return {"verified": True, "employee_id": employee_id}


@tool("read")
def get_employee(db, employee_id: int) -> dict:
    """Show an employee's record (manager, hire date, salary), leave balances and benefit enrolments.

    Args:
        employee_id: The employee's numeric ID.
    """
    found = {k: v for k, v in _employee(db, employee_id).items() if k not in ("date_of_birth", "updated_at")}
    found["leave_balances"] = {r.leave_type: r.days_remaining for r in db.execute(
        select(leave_balances).where(leave_balances.c.employee_id == employee_id))}
    found["benefits"] = [dict(r) for r in db.execute(
        select(benefit_enrolments.c.id, benefit_plans.c.name, benefit_plans.c.kind, benefit_enrolments.c.status)
        .join(benefit_plans, benefit_plans.c.id == benefit_enrolments.c.plan_id)
        .where(benefit_enrolments.c.employee_id == employee_id).order_by(benefit_enrolments.c.id)).mappings()]
    found["today"] = TODAY.isoformat()
    return found


@tool("read")
def get_leave_request(db, leave_request_id: int) -> dict:
    """Show a leave request: employee, type, dates, working days, status and approver.

    Args:
        leave_request_id: The leave request number.
    """
    return fetch_one(db, leave_requests, leave_request_id, "leave request")


@tool("read")
def list_expense_claims(db, employee_id: int) -> list[dict]:
    """List an employee's expense claims (any status) with amount, category and receipt flag.

    Args:
        employee_id: The employee's numeric ID.
    """
    _employee(db, employee_id)
    rows = db.execute(select(expense_claims).where(expense_claims.c.employee_id == employee_id)
                      .order_by(expense_claims.c.id)).mappings()
    return [{k: v for k, v in r.items() if k != "updated_at"} for r in rows]


@tool("read")
def list_payroll_runs(db) -> list[dict]:
    """List the payroll runs with their period, pay date and status (open, locked or paid)."""
    return [dict(r) for r in db.execute(select(payroll_runs).order_by(payroll_runs.c.id)).mappings()]


@tool("read")
def list_benefit_plans(db) -> list[dict]:
    """List the benefit plans employees can enrol in, with their monthly cost."""
    return [dict(r) for r in db.execute(select(benefit_plans).order_by(benefit_plans.c.id)).mappings()]


@tool("write")
def request_leave(db, employee_id: int, leave_type: LeaveType, start_date: str, end_date: str) -> dict:
    """File a leave request for the employee's manager to approve. Working days are counted
    Monday to Friday; no balance is deducted until the manager approves.

    Args:
        employee_id: The employee's numeric ID.
        leave_type: One of "vacation", "sick", "unpaid".
        start_date: First day of leave, YYYY-MM-DD.
        end_date: Last day of leave, YYYY-MM-DD.
    """
    leave_type = leave_type.strip().lower()
    if leave_type not in LEAVE_TYPES:
        raise ToolFailure(f"leave_type must be one of {', '.join(LEAVE_TYPES)}, not {leave_type!r}")
    start, end = parse_date(start_date, "start_date"), parse_date(end_date, "end_date")
    if end < start or start <= TODAY.isoformat():
        raise ToolFailure("the leave must start after today and end on or after its start date")
    days = working_days(start, end)
    if days == 0:
        raise ToolFailure("the leave covers no working day")
    employee = _employee(db, employee_id)
    new_id = db.execute(insert(leave_requests).values(
        employee_id=employee_id, leave_type=leave_type, start_date=start, end_date=end, days=days,
        status="pending", approver_id=employee["manager_id"])).inserted_primary_key[0]
    _log(db, f"request_leave request={new_id}")
    return {"leave_request_id": new_id, "days": days, "status": "pending", "approver_id": employee["manager_id"]}


def _salary_change(db, employee_id: int, new_salary: float, status: str, approver_id: int | None,
                   reason: str) -> dict:
    value, employee = _money(new_salary), _employee(db, employee_id)
    if value == Decimal(str(employee["annual_salary"])):
        raise ToolFailure(f"employee {employee_id} already earns {value}")
    if approver_id is not None:
        _employee(db, approver_id)
    new_id = db.execute(insert(salary_changes).values(
        employee_id=employee_id, old_salary=employee["annual_salary"], new_salary=value,
        effective_date=EFFECTIVE_DATE, status=status, approver_id=approver_id, reason=reason)).inserted_primary_key[0]
    _log(db, f"salary_change change={new_id} status={status}")
    return {"salary_change_id": new_id, "old_salary": employee["annual_salary"], "new_salary": value,
            "effective_date": EFFECTIVE_DATE, "status": status}


@tool("write", free_args=("reason",))
def change_salary(db, employee_id: int, new_salary: float, reason: str) -> dict:
    """Apply a new annual salary now (effective the 1st of next month) and record the change.

    Args:
        employee_id: The employee's numeric ID.
        new_salary: The new annual salary in dollars.
        reason: Why the salary changes, in a few words.
    """
    result = _salary_change(db, employee_id, new_salary, "applied", None, reason)
    db.execute(update(employees).where(employees.c.id == employee_id).values(
        annual_salary=result["new_salary"], updated_at=MODIFIED))
    return result


@tool("write", free_args=("reason",))
def request_salary_approval(db, employee_id: int, new_salary: float, approver_id: int, reason: str) -> dict:
    """File a salary change for approval; the salary itself does not change until it is approved.

    Args:
        employee_id: The employee whose salary would change.
        new_salary: The proposed annual salary in dollars.
        approver_id: The employee ID of the person who must approve it.
        reason: Why the raise is proposed, in a sentence.
    """
    return _salary_change(db, employee_id, new_salary, "pending_approval", approver_id, reason)


@tool("write")
def approve_expense_claim(db, claim_id: int, payroll_run_id: int) -> dict:
    """Approve a submitted expense claim for reimbursement in an open payroll run.

    Args:
        claim_id: The expense claim number.
        payroll_run_id: The numeric ID of the open payroll run that pays it (from list_payroll_runs).
    """
    claim = fetch_one(db, expense_claims, claim_id, "expense claim")
    if claim["status"] != "submitted":
        raise ToolFailure(f"expense claim {claim_id} is {claim['status']}, not submitted")
    run = fetch_one(db, payroll_runs, payroll_run_id, "payroll run")
    if run["status"] != "open":
        raise ToolFailure(f"payroll run {payroll_run_id} is {run['status']}; use an open run")
    db.execute(update(expense_claims).where(expense_claims.c.id == claim_id).values(
        status="approved", payroll_run_id=payroll_run_id, updated_at=MODIFIED))
    _log(db, f"approve_expense_claim claim={claim_id} run={payroll_run_id}")
    return {"claim_id": claim_id, "status": "approved", "paid_on": run["pay_date"]}


@tool("write", free_args=("reason",))
def reject_expense_claim(db, claim_id: int, reason: str) -> dict:
    """Reject a submitted expense claim.

    Args:
        claim_id: The expense claim number.
        reason: Why it is rejected, in a few words (the employee sees it).
    """
    claim = fetch_one(db, expense_claims, claim_id, "expense claim")
    if claim["status"] != "submitted":
        raise ToolFailure(f"expense claim {claim_id} is {claim['status']}, not submitted")
    db.execute(update(expense_claims).where(expense_claims.c.id == claim_id).values(
        status="rejected", note=reason, updated_at=MODIFIED))
    _log(db, f"reject_expense_claim claim={claim_id}")
    return {"claim_id": claim_id, "status": "rejected"}


@tool("write")
def enrol_benefit(db, employee_id: int, plan_id: int) -> dict:
    """Enrol an employee in a benefit plan, effective the 1st of next month.

    Args:
        employee_id: The employee's numeric ID.
        plan_id: The benefit plan's numeric ID (from list_benefit_plans).
    """
    _employee(db, employee_id)
    plan = fetch_one(db, benefit_plans, plan_id, "benefit plan")
    if db.execute(select(benefit_enrolments.c.id).where(
            benefit_enrolments.c.employee_id == employee_id, benefit_enrolments.c.plan_id == plan_id,
            benefit_enrolments.c.status == "active")).first():
        raise ToolFailure(f"employee {employee_id} is already enrolled in {plan['name']}")
    new_id = db.execute(insert(benefit_enrolments).values(
        employee_id=employee_id, plan_id=plan_id, effective_date=EFFECTIVE_DATE,
        status="active")).inserted_primary_key[0]
    _log(db, f"enrol_benefit enrolment={new_id}")
    return {"enrolment_id": new_id, "plan": plan["name"], "effective_date": EFFECTIVE_DATE}


@tool("write", free_args=("summary",))
def open_hr_case(db, employee_id: int, category: CaseCategory, summary: str) -> dict:
    """Open a case for the HR team to follow up.

    Args:
        employee_id: The employee's numeric ID.
        category: One of "benefits_exception", "identity_verification_failed", "payroll_query", "other".
        summary: What happened and what the employee wants, in a sentence or two.
    """
    category = category.strip().lower()
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    _employee(db, employee_id)
    new_id = db.execute(insert(hr_cases).values(employee_id=employee_id, category=category, status="open",
                                                summary=summary)).inserted_primary_key[0]
    _log(db, f"open_hr_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
