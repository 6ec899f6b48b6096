"""The HR and payroll training domain: deterministic generation, easy families a small model can
solve, tasks the scripted user can play, tools that fail clearly, and checks that pass the
reference and fail the do-nothing agent, single faults and the policy's tempting shortcuts."""

import asyncio
import inspect
import json
import re
from collections import Counter
from typing import get_args

import pytest

from tbx.backend import dump_state
from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import load_domain_task, prepare_task
from tbx.domains import get_domain
from tbx.domains.hr_payroll.seed import EFFECTIVE_DATE, HR_DIRECTOR, TODAY, base_rows, working_days
from tbx.episodes import Outcome, run_episode
from tbx.grading import grade_state, same_changes
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks import load_task
from tbx.tasks.mutations import mutate
from tbx.tools.runtime import invoke
from tbx.users.scripted import ScriptedUser

HR = get_domain("hr_payroll")
TOOLS = {spec.name: spec for spec in HR.tools}
TASKS = HR.generate_tasks(0)
FAMILIES = sorted({t["family"] for t in TASKS})


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = SQLiteBackend(str(tmp_path_factory.mktemp("hr_payroll")))
    yield b
    b.close()


@pytest.fixture(scope="module")
def runtime(backend):
    cache = {}

    def get(data: dict):
        if data["id"] not in cache:  # prepare_task fails unless the reference meets the task's checks
            cache[data["id"]] = prepare_task(load_domain_task(data, data["id"]), backend)
        return cache[data["id"]]

    return get


def play(backend, rt, calls: list[tuple[str, dict]]):
    """Run tool calls on a fresh clone of the task's template; return (results, terminal state)."""
    db = backend.clone(rt.template)
    try:
        results = [invoke(TOOLS[name], db.engine, arguments) for name, arguments in calls]
        return results, dump_state(db.engine, HR.metadata)
    finally:
        backend.drop(db)


def row(state: dict, table: str, key: int) -> dict:
    return next(r for r in state[table]["rows"] if r["id"] == str(key))


def test_generation_is_deterministic_and_depends_on_the_seed():
    assert json.dumps(HR.generate_tasks(0), sort_keys=True) == json.dumps(TASKS, sort_keys=True)
    other = HR.generate_tasks(1)
    assert json.dumps(other, sort_keys=True) != json.dumps(TASKS, sort_keys=True)
    assert {t["id"] for t in other}.isdisjoint({t["id"] for t in TASKS})
    assert len({t["id"] for t in TASKS}) == len(TASKS)
    assert base_rows() == base_rows()


def test_counts_families_and_difficulty_labels():
    families = Counter(t["family"] for t in TASKS)
    assert len(TASKS) >= 60 and len(families) >= 6, families
    levels = Counter(f.rsplit("_", 1)[1] for f in families)
    assert set(levels) == {"easy", "medium", "hard"} and levels["easy"] >= 2, levels
    assert all(n >= (10 if f.endswith("_easy") else 8) for f, n in families.items()), families
    assert all(t["split"] == "train" for t in TASKS) and HR.split == "train"


def test_every_task_loads_and_names_real_tools_and_arguments():
    for data in TASKS:
        loaded = load_task(data, data["id"], HR.policy)
        load_domain_task(data, data["id"])
        assert loaded.checks.expected and loaded.split == "train", data["id"]
        for step in loaded.reference:
            if step.tool:
                assert set(step.arguments) <= set(TOOLS[step.tool].argument_names), (data["id"], step)
        assert any(step.tool and TOOLS[step.tool].kind == "write" for step in loaded.reference)


def test_easy_tasks_are_one_obvious_write_with_every_fact_in_the_opening():
    for data in (t for t in TASKS if t["family"].endswith("_easy")):
        calls = [s for s in data["reference"] if "tool" in s]
        assert len(calls) == 1 and TOOLS[calls[0]["tool"]].kind == "write", data["id"]
        assert data["user"]["private_facts"] == {} and data["turn_limit"] <= 10
        # a short tool list led by the two easy writes (the ones few-shot examples show), ending with
        # the first distractor's tool so the extra-write mutation can be played in an episode
        assert len(data["tools"]) <= 4 and list(data["tools"][:2]) == list(HR.tool_names[:2])
        assert calls[0]["tool"] in data["tools"] and HR.distractors[0]["tool"] in data["tools"]
        opening = data["user"]["opening_message"]
        assert calls[0]["tool"].split("_")[0] in opening.lower()  # "cancel ...", "withdraw ..."
        assert all(str(v) in opening for v in calls[0]["arguments"].values()), data["id"]


def test_only_easy_tasks_restrict_tools_and_closed_choices_are_enums():
    assert all(("tools" in t) == t["family"].endswith("_easy") for t in TASKS)
    hint = inspect.signature(TOOLS["request_leave"].fn).parameters["leave_type"].annotation
    assert get_args(hint) == ("vacation", "sick", "unpaid")  # the agent's schema lists them as an enum


def test_references_fit_the_scripted_user():
    for data in TASKS:
        facts = data["user"]["private_facts"]
        keywords = [k for fact in facts.values() for k in fact["keywords"]]
        says = [s["say"] for s in data["reference"] if "say" in s]
        assert data["reference"][-1] == {"say": says[-1]}, data["id"]
        for question in says[:-1]:
            assert "?" in question and any(k in question.lower() for k in keywords), (data["id"], question)
        assert "?" not in says[-1] and not any(k in says[-1].lower() for k in keywords), (data["id"], says[-1])
        asked = " ".join(says[:-1]).lower()
        assert all(any(k in asked for k in f["keywords"]) for f in facts.values()), data["id"]
        for fact in facts.values():
            assert str(fact["value"]) not in data["user"]["opening_message"], data["id"]


def test_task_rows_never_collide_with_base_rows():
    base = {table: {r["id"] for r in rows} for table, rows in base_rows().items()}
    for data in TASKS:
        for table, rows in data["seed"]["rows"].items():
            ids = [r["id"] for r in rows]
            assert len(set(ids)) == len(ids) and base.get(table, set()).isdisjoint(ids), (data["id"], table)
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


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_passes_and_single_faults_fail(backend, runtime, family):
    rt = runtime(task(family, 1))
    assert grade_state(rt.initial, rt.initial, rt.expected, rt.volatile).passed is False
    mutations = mutate(rt.task.reference, TOOLS, HR.distractors)
    assert {m.kind for m in mutations} >= {"drop_write", "extra_write"}
    _, reference = play(backend, rt, [(s.tool, s.arguments) for s in rt.task.reference if s.tool])
    for mutation in mutations:
        _, final = play(backend, rt, [(s.tool, s.arguments) for s in mutation.steps if s.tool])
        passed = grade_state(rt.initial, final, rt.expected, rt.volatile).passed
        if passed and same_changes(rt.initial, final, reference):
            continue  # equivalent: a verification that fails by design, dropped or changed: no write
        assert passed is False, mutation.description


@pytest.mark.parametrize("family", ["cancel_leave_easy", "leave_as_unpaid_hard", "process_expenses_hard"])
def test_oracle_episode_with_scripted_user_passes_and_null_fails(backend, runtime, family):
    rt = runtime(task(family, 2))
    good = asyncio.run(run_episode(rt, backend, OraclePolicy(), ScriptedUser(), None, 0, 0))
    assert good.outcome is Outcome.SUCCESS and good.ended_by == "user_stop", good.cause
    bad = asyncio.run(run_episode(rt, backend, NullPolicy(), ScriptedUser(), None, 0, 0))
    assert bad.outcome is Outcome.FAILURE


def test_applying_a_raise_that_needs_approval_fails_the_task(backend, runtime):
    data = task("raise_needs_approval_hard", 0)
    rt = runtime(data)
    report = data["seed"]["rows"]["employees"][1]
    new = next(c for c in data["checks"]["expected"] if c["table"] == "salary_changes")["values"]["new_salary"]
    _, final = play(backend, rt, [("change_salary", {"employee_id": report["id"], "new_salary": new, "reason": "x"})])
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "employees" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_working_days_count_monday_to_friday():
    assert working_days("2026-05-11", "2026-05-17") == 5  # Monday to Sunday
    assert working_days("2026-05-16", "2026-05-17") == 0  # a weekend
    assert working_days("2026-05-15", "2026-05-18") == 2  # Friday and Monday


def test_lookups_and_writes_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("withdraw_expense_easy", 0))
    results, _ = play(backend, rt, [("get_employee", {"employee_id": 99}),
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
    (wrong, right), _ = play(backend, rt, [("verify_employee", {"employee_id": who["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_employee", {"employee_id": who["id"],
                                                                "date_of_birth": who["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text)["verified"] is True


def test_cancelling_approved_leave_returns_the_days_once(backend, runtime):
    data = task("cancel_leave_easy", 1)  # odd instances are approved requests
    request = seed_row(data, "leave_requests")
    assert request["status"] == "approved"
    balance = next(b for b in data["seed"]["rows"]["leave_balances"] if b["leave_type"] == request["leave_type"])
    rt = runtime(data)
    results, final = play(backend, rt, [("cancel_leave_request", {"leave_request_id": request["id"]}),
                                        ("cancel_leave_request", {"leave_request_id": request["id"]}),
                                        ("get_leave_request", {"leave_request_id": request["id"]}),
                                        ("get_leave_request", {"leave_request_id": 2999})])
    assert not results[0].is_error and "cancelled and cannot be cancelled" in results[1].text
    assert json.loads(results[2].text)["status"] == "cancelled" and "2999 not found" in results[3].text
    assert row(final, "leave_balances", balance["id"])["days_remaining"] == str(balance["days_remaining"]
                                                                                + request["days"])


def test_request_leave_counts_days_and_refuses_bad_dates(backend, runtime):
    data = task("book_leave_medium", 0)
    who = seed_row(data, "employees")
    rt = runtime(data)
    results, _ = play(backend, rt, [
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
    results, final = play(backend, rt, [
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
    assert row(final, "expense_claims", claim["id"])["payroll_run_id"] == str(run["id"])
    assert row(final, "employees", who["id"])["annual_salary"] == str(who["annual_salary"])  # pending: unchanged


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("book_leave_medium", 0))
    for extra in HR.distractors:
        (result,), final = play(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    assert {e["arguments"]["employee_id"] for e in HR.distractors} <= {r["id"] for r in base_rows()["employees"]}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", EFFECTIVE_DATE)
