"""HR and payroll domain (training split): employees, leave balances and requests, payroll runs,
salary changes with approval limits, expense claims and benefit enrolment windows, under an HR
policy with identity checks, approval limits, a receipt rule and an enrolment window."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="train",
    volatile=("audit_log", "employees.updated_at", "leave_requests.updated_at", "expense_claims.updated_at",
              "expense_claims.note"),
    records=("identity_checks",),
    distractors=(
        {"tool": "open_hr_case", "arguments": {"employee_id": 14, "category": "payroll_query",
                                               "summary": "Asked when the May payslip is published."}},
        {"tool": "enrol_benefit", "arguments": {"employee_id": 39, "plan_id": 5}},
    ),
)
