"""The consulting domain: deterministic task generation on the rules' boundaries, tasks the scripted
user can play, tools that fail clearly, and checks that pass the reference and fail the do-nothing
agent and single faults. What every domain shares is in test_generated_tasks.py."""

import json
import re
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

from tbx.domains import get_domain
from tbx.domains.consulting.seed import (
    HIGH_COST_CITIES,
    HIGH_COST_PER_DIEM,
    OPEN_PERIODS,
    PER_DIEM,
    RATES,
    TIER_DISCOUNT,
    base_rows,
    current_rate,
    period_of,
)
from tbx.grading import grade_state
from tbx.tools.runtime import invoke

from .harness import call, without_identity

DOMAIN = get_domain("consulting")
TOOLS = {spec.name: spec for spec in DOMAIN.tools}
TASKS = DOMAIN.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_rows(data: dict, table: str) -> list[dict]:
    return data["seed"]["rows"].get(table, [])


def writes(data: dict, tool: str) -> list[dict]:
    return [s["arguments"] for s in data["reference"] if s.get("tool") == tool]


def test_task_codes_never_collide_with_the_base_or_each_other():
    base = base_rows()
    codes = {c["client_code"] for c in base["clients"]} | {e["code"] for e in base["engagements"]}
    for data in TASKS:
        mine = ({c["client_code"] for c in seed_rows(data, "clients")}
                | {e["code"] for e in seed_rows(data, "engagements")})
        assert codes.isdisjoint(mine), data["id"]
        codes |= mine


def test_policy_states_the_rules_the_tasks_check():
    policy = DOMAIN.policy
    tiers = dict(re.findall(r"\| (standard|preferred|strategic) \| (\d+)% \|", policy))
    assert {t: int(p) for t, p in tiers.items()} == TIER_DISCOUNT
    diem = re.findall(r"\| (meals|lodging)[^|]* \| \$(\d+) \| \$(\d+) \|", policy)
    assert {c: (int(a), int(b)) for c, a, b in diem} == {c: (PER_DIEM[c], HIGH_COST_PER_DIEM[c]) for c in PER_DIEM}
    assert ", ".join(HIGH_COST_CITIES[:-1]) in policy
    for phrase in ("$2,000 or less", "$50,000 or more", "2 more percentage points", "named billing contact",
                   "unauthorized_invoice_request", "closed_period_correction", "Today's date is 2026-05-20",
                   "cost − remaining budget"):
        assert phrase in policy
    assert current_rate("manager") == RATES[2026][3] == 330


def test_instances_sit_on_the_rule_boundaries():
    for family, tool, side in (("invoice_credit", "apply_invoice_credit", 0),
                               ("invoice_credit_approval", "request_partner_approval", 1)):
        data = task(family, 0)
        bill = seed_rows(data, "invoices")[0]
        hours = data["user"]["private_facts"]["disputed_hours"]["value"]
        keep = (100 - Decimal(str(bill["discount_percent"]))) / 100
        per_hours = [Decimal(str(line["rate"])) * keep for line in seed_rows(data, "invoice_lines")
                     if line["invoice_id"] == bill["id"]]
        credit = Decimal(str(writes(data, tool)[0]["amount"]))
        per_hour = next(p for p in per_hours if (p * hours).quantize(Decimal("0.01"), ROUND_HALF_UP) == credit)
        # the largest credit within $2,000, or the smallest above it: one hour more or less crosses the line
        assert (credit <= 2_000 < credit + per_hour) if side == 0 else (credit - per_hour <= 2_000 < credit)
    bill = seed_rows(task("invoice_discount", 0), "invoices")[0]
    assert bill["subtotal"] == 50_000 and writes(task("invoice_discount", 0), "set_invoice_discount")[0] == {
        "invoice_number": bill["invoice_number"], "discount_percent": 7}  # preferred 5 + volume 2
    data = task("staff_within_budget", 0)
    po = seed_rows(data, "purchase_orders")[0]
    args = writes(data, "assign_consultant")[0]
    cost = Decimal(str(args["hourly_rate"])) * args["planned_hours"]
    assert Decimal(str(po["budget_cap"])) - Decimal(str(po["committed"])) == cost  # covered to the cent


def test_staffing_rates_follow_the_rate_card_and_the_tier():
    for data in (t for t in TASKS if t["family"] in ("staff_within_budget", "staff_over_budget")):
        tier = seed_rows(data, "clients")[0]["tier"]
        people = {p["id"]: p for p in seed_rows(data, "consultants")}
        for args in writes(data, "assign_consultant"):
            level = people[args["consultant_id"]]["level"]
            discounted = Decimal(current_rate(level)) * (100 - TIER_DISCOUNT[tier]) / 100
            assert Decimal(str(args["hourly_rate"])) == discounted, data["id"]


def test_expense_decisions_follow_the_per_diem_and_receipts():
    decided = Counter()
    for data in (t for t in TASKS if t["family"] == "expense_review"):
        approved = {a["expense_id"] for a in writes(data, "approve_expense")}
        rejected = {a["expense_id"] for a in writes(data, "reject_expense")}
        for row in seed_rows(data, "expenses"):
            if row["status"] != "submitted":
                assert row["id"] not in approved | rejected
                continue
            limits = HIGH_COST_PER_DIEM if row["city"] in HIGH_COST_CITIES else PER_DIEM
            within = row["category"] in limits and row["amount"] <= limits[row["category"]]
            assert (row["id"] in approved) == (within or row["receipt_attached"] == 1), (data["id"], row)
            assert (row["id"] in approved) != (row["id"] in rejected)
            decided[row["id"] in approved] += 1
    assert decided[True] and decided[False]


def test_time_changes_land_in_open_periods_only():
    for data in TASKS:
        for args in writes(data, "log_time"):
            assert period_of(args["work_date"]) in OPEN_PERIODS
        entries = {e["id"]: e for e in seed_rows(data, "time_entries")}
        for args in writes(data, "correct_time_entry"):
            assert entries[args["entry_id"]]["period_id"] in OPEN_PERIODS, data["id"]


def test_applying_a_large_credit_without_approval_fails(backend, runtime):
    data = task("invoice_credit_approval", 3)
    rt = runtime(data)
    args = writes(data, "request_partner_approval")[0]
    result, final = call(backend, rt, "apply_invoice_credit", **(args | {"reason": "x"}))
    assert not result.is_error
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "approval_requests" in grade.explain() and "invoice_credits" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("invoice_credit", 0))
    assert call(backend, rt, "get_invoice", invoice_number="INV-00-0000")[0].text == \
        "Error: invoice 'INV-00-0000' not found"
    assert "consultant 99999 not found" in call(backend, rt, "list_expenses", consultant_id=99999)[0].text
    result, _ = call(backend, rt, "correct_time_entry", entry_id=99999, hours=4, reason="x")
    assert result.is_error and "time entry 99999 not found" in result.text


def test_verification_tools_match_the_email_on_file(backend, runtime):
    data = task("invoice_unauthorized", 0)
    rt = runtime(data)
    client = seed_rows(data, "clients")[0]
    caller = data["user"]["private_facts"]["email"]["value"]
    wrong, _ = call(backend, rt, "verify_billing_contact", client_code=client["client_code"], email=caller)
    assert json.loads(wrong.text)["verified"] is False and caller != client["billing_contact_email"]
    right, _ = call(backend, rt, "verify_billing_contact", client_code=client["client_code"].lower(),
                    email=client["billing_contact_email"].upper())
    assert json.loads(right.text)["verified"] is True
    partner = seed_rows(data, "consultants")[0]
    assert json.loads(call(backend, rt, "verify_consultant", consultant_id=partner["id"],
                           email="someone@halden.example")[0].text)["verified"] is False
    shown, _ = call(backend, rt, "get_client", client_code=client["client_code"])
    assert "billing_contact_email" not in json.loads(shown.text)


def test_write_tools_refuse_what_cannot_be_done(backend, runtime):
    data = task("invoice_discount", 1)
    rt = runtime(data)
    number = seed_rows(data, "invoices")[0]["invoice_number"]
    paid = next(i for i in base_rows()["invoices"] if i["status"] == "paid")["invoice_number"]
    issued = next(i for i in base_rows()["invoices"] if i["status"] == "issued")["invoice_number"]
    assert "is paid" in call(backend, rt, "apply_invoice_credit", invoice_number=paid, amount=10, reason="x")[0].text
    assert "only a draft" in call(backend, rt, "set_invoice_discount", invoice_number=issued,
                                  discount_percent=5)[0].text
    assert "exceeds the invoice total" in call(backend, rt, "apply_invoice_credit", invoice_number=number,
                                               amount=10_000_000, reason="x")[0].text
    assert "two decimals" in call(backend, rt, "apply_invoice_credit", invoice_number=number, amount=1.234,
                                  reason="x")[0].text
    assert "at most 24" in call(backend, rt, "log_time", consultant_id=1, engagement_code="x",
                                work_date="2026-05-04", hours=25, note="x")[0].text
    assert "category" in call(backend, rt, "open_case", category="vip", summary="x", client_code=number)[0].text
    assert "give the client_code" in call(backend, rt, "open_case", category="other", summary="x")[0].text


def test_discount_recomputes_the_draft_total(backend, runtime):
    data = task("invoice_discount", 0)  # $50,000 subtotal at 7% → 3,500 off, 46,500 due
    rt = runtime(data)
    result, final = call(backend, rt, "set_invoice_discount", **writes(data, "set_invoice_discount")[0])
    assert json.loads(result.text) == {"invoice_number": seed_rows(data, "invoices")[0]["invoice_number"],
                                       "discount_amount": 3500, "total": 46500}
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_expenses_are_decided_once_and_assignment_commits_the_po(backend, runtime):
    data = task("expense_review", 0)
    rt = runtime(data)
    expense_id = writes(data, "approve_expense")[0]["expense_id"]
    db = backend.clone(rt.template)
    try:
        assert not invoke(TOOLS["approve_expense"], db.engine, {"expense_id": expense_id}).is_error
        again = invoke(TOOLS["reject_expense"], db.engine, {"expense_id": expense_id, "reason": "x"})
        assert again.is_error and "already approved" in again.text
    finally:
        backend.drop(db)
    staff = task("staff_within_budget", 1)
    rt = runtime(staff)
    args = writes(staff, "assign_consultant")[0]
    result, final = call(backend, rt, "assign_consultant", **args)
    po = seed_rows(staff, "purchase_orders")[0]
    expected = Decimal(str(po["committed"])) + Decimal(str(args["hourly_rate"])) * args["planned_hours"]
    assert Decimal(str(json.loads(result.text)["committed"])) == expected
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_distractors_touch_base_records_only_and_fail_grading(backend, runtime):
    rt = runtime(task("log_missing_time", 0))
    base = base_rows()
    assert DOMAIN.distractors[0]["arguments"]["client_code"] in {c["client_code"] for c in base["clients"]}
    assert DOMAIN.distractors[1]["arguments"]["expense_id"] in {e["id"] for e in base["expenses"]
                                                                if e["status"] == "submitted"}
    for extra in DOMAIN.distractors:
        result, final = call(backend, rt, extra["tool"], **extra["arguments"])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
