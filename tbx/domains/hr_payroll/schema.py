"""HR and payroll domain tables: employees, leave balances and requests, payroll runs, salary
changes under approval limits, expense claims and benefit enrolments, and HR cases.

Dates are ISO strings (YYYY-MM-DD). Money is `Numeric(12, 2)`. `updated_at` columns and
`audit_log` are bookkeeping the checks ignore (the domain declares them volatile); `identity_checks`
is a record the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table

metadata = MetaData()

employees = Table(
    "employees", metadata,
    Column("id", Integer, primary_key=True),  # the employee ID
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("department", String(40), nullable=False),
    Column("job_title", String(60), nullable=False),
    Column("manager_id", Integer, ForeignKey("employees.id")),
    Column("hire_date", String(10), nullable=False),
    Column("annual_salary", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # active | terminated
    Column("updated_at", String(32)),
)

leave_balances = Table(
    "leave_balances", metadata,
    Column("id", Integer, primary_key=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("leave_type", String(10), nullable=False),  # vacation | sick
    Column("days_remaining", Integer, nullable=False),
)

leave_requests = Table(
    "leave_requests", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),  # the leave request number
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("leave_type", String(10), nullable=False),  # vacation | sick | unpaid
    Column("start_date", String(10), nullable=False),
    Column("end_date", String(10), nullable=False),
    Column("days", Integer, nullable=False),  # working days (Monday to Friday)
    Column("status", String(10), nullable=False),  # pending | approved | rejected | cancelled
    Column("approver_id", Integer, ForeignKey("employees.id")),
    Column("updated_at", String(32)),
)

payroll_runs = Table(
    "payroll_runs", metadata,
    Column("id", Integer, primary_key=True),
    Column("period", String(7), nullable=False),  # YYYY-MM
    Column("pay_date", String(10), nullable=False),
    Column("status", String(10), nullable=False),  # open | locked | paid
)

salary_changes = Table(
    "salary_changes", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("old_salary", Numeric(12, 2), nullable=False),
    Column("new_salary", Numeric(12, 2), nullable=False),
    Column("effective_date", String(10), nullable=False),
    Column("status", String(16), nullable=False),  # applied | pending_approval
    Column("approver_id", Integer, ForeignKey("employees.id")),
    Column("reason", String(400)),
)

expense_claims = Table(
    "expense_claims", metadata,
    Column("id", Integer, primary_key=True),  # the expense claim number
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("category", String(12), nullable=False),  # travel | meals | equipment | training
    Column("amount", Numeric(12, 2), nullable=False),
    Column("has_receipt", Integer, nullable=False),
    Column("submitted_on", String(10), nullable=False),
    Column("status", String(10), nullable=False),  # submitted | approved | rejected | withdrawn
    Column("payroll_run_id", Integer, ForeignKey("payroll_runs.id")),  # the run that reimburses it
    Column("note", String(400)),
    Column("updated_at", String(32)),
)

benefit_plans = Table(
    "benefit_plans", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(60), nullable=False),
    Column("kind", String(10), nullable=False),  # health | dental | vision | pension
    Column("monthly_cost", Numeric(12, 2), nullable=False),
)

benefit_enrolments = Table(
    "benefit_enrolments", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("plan_id", Integer, ForeignKey("benefit_plans.id"), nullable=False),
    Column("effective_date", String(10), nullable=False),
    Column("status", String(10), nullable=False),  # active | cancelled
)

hr_cases = Table(
    "hr_cases", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
    Column("category", String(32), nullable=False),
    Column("status", String(10), nullable=False),  # open
    Column("summary", String(400)),
)

# one row per employee the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("employee_id", Integer, ForeignKey("employees.id"), nullable=False),
)

audit_log = audit_log_table(metadata)
