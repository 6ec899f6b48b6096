"""Identity verification leaves a record the checks require (issue 23, part 4).

For every bundled task whose reference verifies its caller, the reference passes, the reference
without the verification fails, and the reference that verifies somebody else (with that person's
correct details) fails: the policy's identity rule is visible to the verdict. Replays go straight
into twin databases (`replay_reference`), graded by the same `grade_state` an episode uses.
"""

import dataclasses
from collections import Counter

import pytest

from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import prepare_task, replay_reference, template_rows
from tbx.domains import get_domain
from tbx.grading import grade_state
from tbx.tasks.model import Step

VERIFY_TOOLS = ("verify_identity", "authenticate_customer", "verify_policyholder", "verify_customer",
                "verify_billing_contact", "verify_consultant", "verify_patient", "verify_user", "verify_employee")
# Tasks whose reference verifies its caller successfully, and whose verification fails by design
# (identity_mismatch / identity_fails_hard / invoice_unauthorized: a case is their record).
WITH_RECORD = {"travel": 68, "retail": 102, "auto_insurance": 101, "neobank": 101, "consulting": 101,
               "clinic": 40, "helpdesk": 32, "hr_payroll": 56, "mock": 0}
FAILED_VERIFICATION = {"travel": 4, "retail": 8, "auto_insurance": 9, "neobank": 9, "consulting": 9,
                       "clinic": 8, "helpdesk": 8, "hr_payroll": 8, "mock": 0}


# Families whose verification fails by design and whose expected state is the case the agent logs: the
# same case logged without trying to verify passes too (a failed verification writes nothing), so their
# verdict cannot see a skipped attempt (docs/tasks.md).
BLIND_TO_A_SKIPPED_ATTEMPT = {"travel": ("identity_mismatch",), "retail": ("identity_mismatch",),
                              "auto_insurance": ("identity_mismatch",), "neobank": ("identity_mismatch",),
                              "consulting": ("invoice_unauthorized",), "clinic": ("identity_fails_hard",),
                              "helpdesk": ("identity_fails_hard",), "hr_payroll": ("identity_fails_hard",)}


# The benchmark tasks whose reference still passes with its verification call removed, found by the
# test below (docs/tasks.md lists them with the reason): besides the identity_mismatch families (the
# caller's details match nobody), the consulting callers who are real people at the client but not its
# billing contact. A failed verification writes nothing, so the verdict cannot see whether it was tried.
UNAUTHORIZED_CALLERS = tuple(f"consulting/invoice_unauthorized/s0-{n:02d}" for n in (0, 1, 2, 4, 5, 6, 8, 9, 10))


def _other(rows: dict, table: str, person: int, fits=lambda row: True) -> dict:
    return next(r for r in rows[table] if r["id"] != person and fits(r))


def _policyholder(rows: dict, person: int) -> tuple[str, dict]:
    policy = next(p for p in rows["policies"] if p["policyholder_id"] != person)
    holder = next(h for h in rows["policyholders"] if h["id"] == policy["policyholder_id"])
    return "verify_policyholder", {"policy_number": policy["policy_number"], "date_of_birth": holder["date_of_birth"]}


def _bank_customer(rows: dict, person: int) -> tuple[str, dict]:
    card = next(c for c in rows["cards"] if c["customer_id"] != person and c["status"] != "cancelled")
    owner = next(c for c in rows["customers"] if c["id"] == card["customer_id"])
    return "verify_customer", {"customer_number": owner["customer_number"], "date_of_birth": owner["date_of_birth"],
                               "card_last4": card["last4"]}


def someone_else(domain: str, rows: dict, record: dict) -> tuple[str, dict]:
    """A verification call that succeeds for another person of the task's database than `record`'s."""
    if domain == "travel":
        other = _other(rows, "employees", record["employee_id"])
        return "verify_identity", {"employee_id": other["id"], "last_name": other["last_name"]}
    if domain == "retail":
        other = _other(rows, "customers", record["customer_id"])
        return "authenticate_customer", {"email": other["email"], "zip_code": other["zip_code"]}
    if domain == "auto_insurance":
        return _policyholder(rows, record["policyholder_id"])
    if domain == "neobank":
        return _bank_customer(rows, record["customer_id"])
    if domain == "consulting" and record["client_id"] is not None:
        other = _other(rows, "clients", record["client_id"])
        return "verify_billing_contact", {"client_code": other["client_code"], "email": other["billing_contact_email"]}
    if domain == "consulting":
        other = _other(rows, "consultants", record["consultant_id"])
        return "verify_consultant", {"consultant_id": other["id"], "email": other["email"]}
    tool, table, column = {"clinic": ("verify_patient", "patients", "patient_id"),
                           "helpdesk": ("verify_user", "users", "user_id"),
                           "hr_payroll": ("verify_employee", "employees", "employee_id")}[domain]
    other = _other(rows, table, record[column])
    return tool, {column: other["id"], "date_of_birth": other["date_of_birth"]}


def grade(runtime, backend, steps):
    """The verdict on the terminal state of `steps` replayed into a twin of the task's database."""
    task = dataclasses.replace(runtime.task, reference=tuple(steps))
    final = replay_reference(task, runtime.domain, backend, runtime.template)
    return grade_state(runtime.initial, final, runtime.expected, runtime.volatile, task.checks.loose)


def identity_check(result) -> dict:
    return next(c for c in result.to_dict()["checks"] if c["name"].endswith("insert identity_checks"))


def test_every_verification_is_checked_skipping_it_or_verifying_someone_else_fails(domain_runtimes):
    domain, backend, runtimes = domain_runtimes
    counts, passes_without = Counter(), []
    for runtime in runtimes:
        reference = runtime.task.reference
        verifies = [i for i, s in enumerate(reference) if s.tool in VERIFY_TOOLS]
        records = [e for e in runtime.expected if e.table == "identity_checks"]
        if not records:
            counts["failed" if verifies else "none"] += 1
            assert set(runtime.domain.records) <= set(runtime.volatile), runtime.task.id  # a record is ignored
            if verifies:  # docs/guarantees.md names the families whose verdict cannot see a skipped attempt
                skipped = grade(runtime, backend, [s for s in reference if s.tool not in VERIFY_TOOLS])
                blind = runtime.task.family in BLIND_TO_A_SKIPPED_ATTEMPT.get(domain, ())
                assert skipped.passed is blind, (runtime.task.id, skipped.passed)
                passes_without += [runtime.task.id] if skipped.passed else []
            continue
        counts["record"] += 1
        assert len(records) == 1 and len(verifies) == 1, runtime.task.id
        assert grade(runtime, backend, reference).passed, runtime.task.id
        skipped = grade(runtime, backend, [s for s in reference if s.tool not in VERIFY_TOOLS])
        assert skipped.passed is False and "missing" in identity_check(skipped)["detail"], runtime.task.id
        tool, arguments = someone_else(domain, template_rows(runtime.task), records[0].values)
        wrong = list(reference)
        wrong[verifies[0]] = Step(tool=tool, arguments=arguments)
        result = grade(runtime, backend, wrong)
        extra = next(c for c in result.to_dict()["checks"] if c["name"] == "no other change")
        assert result.passed is False and not identity_check(result)["passed"], runtime.task.id
        assert "insert identity_checks" in extra["detail"], (runtime.task.id, extra["detail"])
    assert counts["record"] == WITH_RECORD[domain] and counts["failed"] == FAILED_VERIFICATION[domain], counts
    print(f"\n{domain}: {len(passes_without)} tasks pass with the verification removed: {passes_without}")
    assert len(passes_without) == FAILED_VERIFICATION[domain]
    unauthorized = [t for t in passes_without if "/invoice_unauthorized/" in t]
    assert unauthorized == (list(UNAUTHORIZED_CALLERS) if domain == "consulting" else [])


def test_a_failed_verification_leaves_no_record(domain_runtimes):
    domain, backend, runtimes = domain_runtimes
    for runtime in runtimes:
        if any(e.table == "identity_checks" for e in runtime.expected):
            continue
        task = runtime.task
        final = replay_reference(task, runtime.domain, backend, runtime.template)
        assert final.get("identity_checks", {"rows": []})["rows"] == [], task.id
        assert get_domain(domain).records == (("identity_checks",) if domain != "mock" else ())


@pytest.fixture
def travel(tmp_path):
    backend = SQLiteBackend(str(tmp_path))
    yield backend, get_domain("travel").generate_tasks(0)[0]  # downgrade_needs_approval: verifies by last name
    backend.close()


def _prepare(backend, data):
    from tbx.catalog import load_domain_task

    return prepare_task(load_domain_task(data, data["id"]), backend)


def test_verifying_twice_leaves_one_record(travel):
    backend, data = travel
    runtime = _prepare(backend, data)
    reference = list(runtime.task.reference)
    verify = next(i for i, s in enumerate(reference) if s.tool == "verify_identity")
    assert grade(runtime, backend, reference[: verify + 1] + reference[verify:]).passed


def test_a_task_that_expects_no_record_ignores_it_and_a_derived_one_requires_it(travel):
    backend, data = travel
    older = dict(data, id="mine/older", checks={"expected": [e for e in data["checks"]["expected"]
                                                              if e["table"] != "identity_checks"]})
    runtime = _prepare(backend, older)  # written before identity records: the reference still passes
    assert "identity_checks" in runtime.volatile
    without = [s for s in runtime.task.reference if s.tool != "verify_identity"]
    assert grade(runtime, backend, without).passed  # its verdict is what it was
    derived = dict(data, id="mine/derived", checks={})
    runtime = _prepare(backend, derived)
    assert [e.values for e in runtime.expected if e.table == "identity_checks"] == [
        {"employee_id": str(data["reference"][1]["arguments"]["employee_id"])}]  # canonical values
    assert grade(runtime, backend, without).passed is False
