"""The auto insurance domain: deterministic task generation on the rules' boundaries, tasks the
scripted user can play, tools that fail clearly, and checks that pass the reference and fail the
do-nothing agent and single faults. What every domain shares is in test_generated_tasks.py."""

import datetime as dt
import json
import re
from decimal import ROUND_HALF_UP, Decimal

from tbx.backend import dump_state
from tbx.domains import get_domain
from tbx.domains.auto_insurance.seed import (
    ADJUSTERS,
    DRIVER_PREMIUM,
    TODAY,
    VEHICLE_PREMIUM,
    age_on_today,
    base_rows,
    settlement,
)
from tbx.grading import grade_state
from tbx.tools.runtime import invoke

from .harness import call, rows, without_identity

DOMAIN = get_domain("auto_insurance")
TOOLS = {spec.name: spec for spec in DOMAIN.tools}
TASKS = DOMAIN.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, index: int = 0) -> dict:
    return data["seed"]["rows"][table][index]


def write_args(data: dict, tool: str) -> dict:
    return next(s["arguments"] for s in data["reference"] if s.get("tool") == tool)


def test_task_policy_numbers_never_collide_with_the_base_or_each_other():
    numbers = {p["policy_number"] for p in base_rows()["policies"]}
    for data in TASKS:
        number = seed_row(data, "policies")["policy_number"]
        assert number not in numbers, data["id"]
        numbers.add(number)


def test_policy_states_the_rules_the_tasks_check():
    policy = DOMAIN.policy
    bands = re.findall(r"\| (\d+)(?: to \d+| and over) \| \$(\d+) \|", policy)
    assert tuple((int(a), int(p)) for a, p in bands) == DRIVER_PREMIUM
    assert f"**${VEHICLE_PREMIUM['liability']}**" in policy and f"**${VEHICLE_PREMIUM['collision']}**" in policy
    assert f"Today's date is {TODAY.isoformat()}" in policy
    for phrase in ("$10,000 or less", "at most 30 days before today", "under 21", "$50 cancellation fee",
                   "identity_verification_failed", "claim_late_report", "claim_not_covered", "**active**"):
        assert phrase in policy


def test_settlement_is_damage_less_deductible_capped_by_the_limit():
    assert settlement(12_500, 500, 15_000) == 12_000  # 12,500 − 500
    assert settlement(12_500, 500, 9_000) == 9_000  # capped
    assert settlement(400, 500, 9_000) == 0  # never negative
    assert settlement(10_250.01, 250, 30_000) == 10_000.01


def test_instances_sit_on_the_rule_boundaries():
    incident = dt.date.fromisoformat(write_args(task("file_claim", 0), "file_claim")["incident_date"])
    assert (TODAY - incident).days == 30
    late = dt.date.fromisoformat(task("claim_late_report", 0)["user"]["private_facts"]["incident_date"]["value"])
    assert (TODAY - late).days == 31
    assert write_args(task("claim_payout", 0), "record_payout")["amount"] == 10_000
    assert write_args(task("claim_adjuster_review", 0), "request_adjuster_review")["amount"] == 10_000.01
    adult = write_args(task("add_driver", 0), "add_driver")
    assert adult["date_of_birth"] == TODAY.replace(year=TODAY.year - 21).isoformat()  # 21 today
    assert adult["premium_change"] == 460
    minor = write_args(task("add_driver_underage", 0), "refer_to_underwriting")
    assert age_on_today(minor["date_of_birth"]) == 20
    assert age_on_today((dt.date.fromisoformat(minor["date_of_birth"]) - dt.timedelta(days=1)).isoformat()) == 21


def test_review_goes_to_the_active_adjuster_of_the_policyholders_state():
    for data in (t for t in TASKS if t["family"] == "claim_adjuster_review"):
        state = seed_row(data, "policyholders")["state"]
        adjuster = write_args(data, "request_adjuster_review")["adjuster_id"]
        assert (adjuster, state, "active") in {(a[0], a[2], a[3]) for a in ADJUSTERS}, data["id"]


def test_cancellation_refund_is_pro_rated_less_the_fee():
    for data in (t for t in TASKS if t["family"] == "cancel_policy"):
        row = seed_row(data, "policies")
        when = write_args(data, "cancel_policy")["cancellation_date"]
        start, end, stop = (dt.date.fromisoformat(d) for d in (row["effective_date"], row["expiration_date"], when))
        share = (Decimal(str(row["annual_premium"])) * (end - stop).days / (end - start).days)
        refund = share.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP) - 50
        assert Decimal(str(write_args(data, "issue_premium_refund")["amount"])) == refund > 0, data["id"]


def test_paying_a_large_claim_directly_fails_the_review_task(backend, runtime):
    data = task("claim_adjuster_review", 3)
    rt = runtime(data)
    args = write_args(data, "request_adjuster_review")
    result, final = call(backend, rt, "record_payout", claim_id=args["claim_id"], amount=args["amount"], note="x")
    assert not result.is_error
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "adjuster_reviews" in grade.explain() and "payouts" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("file_claim", 0))
    missing = call(backend, rt, "get_policy", policy_number="PA-000001")[0]
    assert missing.is_error and missing.text == "Error: no policy with number 'PA-000001'"
    assert "claim 99999 not found" in call(backend, rt, "get_claim", claim_id=99999)[0].text
    result, _ = call(backend, rt, "record_payout", claim_id=99999, amount=10, note="x")
    assert result.is_error and "not found" in result.text


def test_verify_policyholder_rejects_a_wrong_date_of_birth(backend, runtime):
    data = task("identity_mismatch", 0)
    rt = runtime(data)
    person, number = seed_row(data, "policyholders"), seed_row(data, "policies")["policy_number"]
    wrong, _ = call(backend, rt, "verify_policyholder", policy_number=number, date_of_birth="1900-01-01")
    assert json.loads(wrong.text) == {"verified": False,
                                      "reason": f"the date of birth does not match policy {number}"}
    right, _ = call(backend, rt, "verify_policyholder", policy_number=number.lower(),
                    date_of_birth=person["date_of_birth"])
    body = json.loads(right.text)
    assert body["verified"] is True and "date_of_birth" not in body["policyholder"]


def test_write_tools_refuse_what_cannot_be_done(backend, runtime):
    data = task("file_claim", 1)
    rt = runtime(data)
    args = write_args(data, "file_claim")
    number = args["policy_number"]
    other_car = base_rows()["vehicles"][0]["id"]
    assert "is not on policy" in call(backend, rt, "file_claim", **(args | {"vehicle_id": other_car}))[0].text
    assert "incident_type" in call(backend, rt, "file_claim", **(args | {"incident_type": "meteor"}))[0].text
    assert "two decimals" in call(backend, rt, "file_claim", **(args | {"reserve": 1.234}))[0].text
    assert "only a cancelled policy" in call(backend, rt, "issue_premium_refund", policy_number=number, amount=5,
                                             reason="x")[0].text
    assert "outside the policy term" in call(backend, rt, "cancel_policy", policy_number=number,
                                             cancellation_date="2030-01-01", reason="x")[0].text
    assert "not a VIN" in call(backend, rt, "add_vehicle", policy_number=number, vin="SHORT", year=2020,
                               make="Kia", model="Rio", premium_change=300)[0].text
    assert "field must be one of" in call(backend, rt, "update_contact", policy_number=number, field="state",
                                          value="CA")[0].text
    assert "category" in call(backend, rt, "open_support_case", policy_number=number, category="vip",
                              summary="x")[0].text


def test_a_claim_is_paid_once_and_the_payout_closes_it(backend, runtime):
    data = task("claim_payout", 1)
    rt = runtime(data)
    args = write_args(data, "record_payout")
    db = backend.clone(rt.template)
    try:
        assert not invoke(TOOLS["record_payout"], db.engine, args).is_error
        again = invoke(TOOLS["record_payout"], db.engine, args)
        assert again.is_error and "is paid, not open" in again.text
        final = dump_state(db.engine, DOMAIN.metadata)
    finally:
        backend.drop(db)
    claim = next(r for r in rows(final, "claims") if r["id"] == str(args["claim_id"]))
    assert claim["status"] == "paid"
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_cancel_then_refund_is_capped_by_the_premium_and_blocks_endorsements(backend, runtime):
    data = task("cancel_policy", 0)
    rt = runtime(data)
    row = seed_row(data, "policies")
    db = backend.clone(rt.template)
    try:
        assert not invoke(TOOLS["cancel_policy"], db.engine, write_args(data, "cancel_policy")).is_error
        over = invoke(TOOLS["issue_premium_refund"], db.engine, {"policy_number": row["policy_number"],
                                                                 "amount": row["annual_premium"] + 1, "reason": "x"})
        assert over.is_error and "exceeds" in over.text
        late = invoke(TOOLS["add_driver"], db.engine, {"policy_number": row["policy_number"], "first_name": "A",
                                                       "last_name": "B", "date_of_birth": "1990-01-01",
                                                       "license_number": "X1", "premium_change": 240})
        assert late.is_error and "cancelled" in late.text
    finally:
        backend.drop(db)


def test_add_driver_writes_driver_endorsement_and_premium(backend, runtime):
    data = task("add_driver", 4)
    rt = runtime(data)
    args = write_args(data, "add_driver")
    result, final = call(backend, rt, "add_driver", **args)
    premium = Decimal(str(seed_row(data, "policies")["annual_premium"])) + Decimal(str(args["premium_change"]))
    assert Decimal(str(json.loads(result.text)["annual_premium"])) == premium
    endorsement = rows(final, "endorsements")[-1]
    assert endorsement["kind"] == "add_driver"
    assert endorsement["driver_id"] == str(json.loads(result.text)["driver_id"])
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_distractors_touch_base_records_only_and_fail_grading(backend, runtime):
    rt = runtime(task("add_vehicle", 0))
    base_numbers = {p["policy_number"] for p in base_rows()["policies"]}
    for extra in DOMAIN.distractors:
        assert extra["arguments"]["policy_number"] in base_numbers
        result, final = call(backend, rt, extra["tool"], **extra["arguments"])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
