"""The neobank domain: deterministic task generation, tasks the scripted user can play, policy
arithmetic the references follow (limits, fees, dispute window), tools that fail clearly, and checks
that pass the reference and fail the do-nothing agent and single faults. What every domain shares is
in test_generated_tasks.py."""

import datetime as dt
import json
import re
from decimal import Decimal

from tbx.domains import get_domain
from tbx.domains.neobank.seed import (
    COMPLIANCE_REVIEW_AT,
    DISPUTE_WINDOW_DAYS,
    REPLACEMENT_FEES,
    TIER_LIMITS,
    TODAY,
    base_rows,
    new_card_last4,
)
from tbx.grading import grade_state

from .harness import call, run_tools, state_row, without_identity

BANK = get_domain("neobank")
TASKS = BANK.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def writes(data: dict, tool: str) -> list[dict]:
    return [s["arguments"] for s in data["reference"] if s.get("tool") == tool]


def rows(data: dict, table: str) -> list[dict]:
    return data["seed"]["rows"].get(table, [])


def test_identity_is_verified_first():
    assert all(data["reference"][1]["tool"] == "verify_customer" for data in TASKS)


def test_task_numbers_never_collide_with_the_base():
    base = base_rows()
    numbers = {c["customer_number"] for c in base["customers"]} | {a["account_number"] for a in base["accounts"]}
    for data in TASKS:
        own = {c["customer_number"] for c in rows(data, "customers")} | {a["account_number"]
                                                                        for a in rows(data, "accounts")}
        assert own.isdisjoint(numbers), data["id"]


def test_policy_states_the_rules_the_tasks_check():
    policy = " ".join(BANK.policy.split())  # line breaks do not matter
    assert f"Today is **{TODAY.isoformat()}**" in policy
    limits = {int(t): Decimal(v.replace(",", "")) for t, v in re.findall(r"\| (\d) \| \$([\d,]+\.00) \|", policy)}
    assert limits == TIER_LIMITS
    fees = {p: Decimal(v) for p, v in re.findall(r"\| (standard|plus|premium) \| \$([\d.]+) \|", policy)}
    assert fees == REPLACEMENT_FEES
    assert f"${COMPLIANCE_REVIEW_AT:,}.00 or more" in policy
    window_start = (TODAY - dt.timedelta(days=DISPUTE_WINDOW_DAYS)).isoformat()
    assert f"**{DISPUTE_WINDOW_DAYS} days ago or less** (posted on or after {window_start})" in policy
    for phrase in ("identity_verification_failed", "account_frozen", "kyc_incomplete", "dispute_ineligible",
                   "stolen** card is free", "higher transaction ID"):
        assert phrase in policy, phrase


def _sent_today(data: dict) -> Decimal:
    return sum((Decimal(str(t["amount"])) for t in rows(data, "transfers") if t["created_on"] == TODAY.isoformat()),
               Decimal(0))


def test_transfers_follow_the_daily_limit_and_the_compliance_threshold():
    families = ("transfer_within_limit", "transfer_capped_by_limit", "transfer_compliance_review",
                "new_payee_transfer")
    for data in [t for t in TASKS if t["family"] in families]:
        limit = TIER_LIMITS[rows(data, "customers")[0]["kyc_tier"]]
        asked = Decimal(re.search(r"\$([\d,.]+)", data["user"]["opening_message"]).group(1).replace(",", ""))
        sent, held = writes(data, "send_transfer"), writes(data, "open_compliance_review")
        if data["family"] == "transfer_compliance_review":
            assert asked >= COMPLIANCE_REVIEW_AT and not sent and Decimal(str(held[0]["amount"])) == asked
        elif data["family"] == "transfer_capped_by_limit":
            assert _sent_today(data) + asked > limit and not held
            assert Decimal(str(sent[0]["amount"])) == limit - _sent_today(data) > 0
        else:
            assert _sent_today(data) + asked <= limit and asked < COMPLIANCE_REVIEW_AT
            assert [Decimal(str(s["amount"])) for s in sent] == [asked]
        assert all(Decimal(str(t["amount"])) < COMPLIANCE_REVIEW_AT for t in rows(data, "transfers"))
    first = task("transfer_within_limit", 0)  # the boundary: exactly the limit in total
    assert _sent_today(first) + Decimal(str(writes(first, "send_transfer")[0]["amount"])) == TIER_LIMITS[1]
    assert writes(task("transfer_compliance_review", 0), "open_compliance_review")[0]["amount"] == 10000


def test_card_fees_follow_the_plan_and_stolen_cards_are_free():
    for data in [t for t in TASKS if t["family"] == "replace_card"]:
        [replaced] = writes(data, "replace_card")
        plan = rows(data, "customers")[0]["plan"]
        fee = Decimal(0) if replaced["reason_code"] == "stolen" else REPLACEMENT_FEES[plan]
        charged = [Decimal(str(c["amount"])) for c in writes(data, "charge_fee")]
        assert charged == ([fee] if fee else []), data["id"]
    assert {writes(t, "replace_card")[0]["reason_code"] for t in TASKS if t["family"] == "replace_card"} == \
        {"damaged", "lost", "stolen"}


def test_disputes_only_for_recent_card_payments():
    for data in [t for t in TASKS if t["family"].startswith("dispute")]:
        txns = {t["id"]: t for t in rows(data, "transactions")}
        filed, cases = writes(data, "file_dispute"), writes(data, "open_support_case")
        target = txns[(filed or cases)[0]["transaction_id"]]
        age = (TODAY - dt.date.fromisoformat(target["posted_on"])).days
        eligible = target["kind"] == "card" and age <= DISPUTE_WINDOW_DAYS
        assert eligible == (data["family"] == "dispute_card_transaction") == bool(filed), data["id"]
        if filed and filed[0]["reason_code"] == "unauthorized":
            assert writes(data, "freeze_card") == [{"card_id": target["card_id"]}]
        if filed and filed[0]["reason_code"] == "duplicate":
            twin = [t for t in txns.values() if (t["description"], t["amount"], t["posted_on"]) ==
                    (target["description"], target["amount"], target["posted_on"])]
            assert len(twin) == 2 and target["id"] == max(t["id"] for t in twin)
    ages = [(TODAY - dt.date.fromisoformat(next(t for t in rows(d, "transactions") if t["id"] == (
        writes(d, "file_dispute") or writes(d, "open_support_case"))[0]["transaction_id"])["posted_on"])).days
        for d in (task("dispute_card_transaction", 1), task("dispute_ineligible", 0))]
    assert ages == [DISPUTE_WINDOW_DAYS, DISPUTE_WINDOW_DAYS + 1]  # both sides of the boundary


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_verification_needs_number_birth_date_and_a_live_card(backend, runtime):
    data = task("identity_mismatch", 1)  # holds a cancelled card next to the live one
    rt = runtime(data)
    owner = rows(data, "customers")[0]
    live = next(c for c in rows(data, "cards") if c["status"] == "active")
    cancelled = next(c for c in rows(data, "cards") if c["status"] == "cancelled")
    proof = {"customer_number": owner["customer_number"], "date_of_birth": owner["date_of_birth"]}
    ok = json.loads(call(backend, rt, "verify_customer", **proof, card_last4=live["last4"])[0].text)
    assert ok["verified"] is True and "date_of_birth" not in ok["customer"]
    for wrong in ({"card_last4": cancelled["last4"]}, {"card_last4": live["last4"], "date_of_birth": "1900-01-01"},
                  {"card_last4": live["last4"], "customer_number": "00000000"}):
        result, _ = call(backend, rt, "verify_customer", **{**proof, **wrong})
        assert json.loads(result.text)["verified"] is False, wrong


def test_lookups_and_writes_fail_clearly(backend, runtime):
    data = task("transfer_blocked", 0)  # a frozen checking account
    rt = runtime(data)
    account = rows(data, "accounts")[0]
    payee = rows(data, "payees")[0]
    assert "account 4999 not found" in call(backend, rt, "list_transactions", account_id=4999)[0].text
    assert "customer 99 not found" in call(backend, rt, "get_accounts", customer_id=99)[0].text
    frozen = call(backend, rt, "send_transfer", account_id=account["id"], payee_id=payee["id"], amount=10)[0]
    assert frozen.is_error and "frozen and cannot send money" in frozen.text
    assert "not a payee" in call(backend, rt, "send_transfer", account_id=account["id"], payee_id=1, amount=10)[0].text
    assert "routing number" in call(backend, rt, "add_payee", customer_id=account["customer_id"], name="A",
                                    routing_number="12345", account_number="1234567")[0].text
    assert "reason_code" in call(backend, rt, "replace_card", card_id=rows(data, "cards")[0]["id"],
                                 reason_code="bent")[0].text
    assert "category" in call(backend, rt, "open_support_case", customer_number="x", category="vip", summary="x")[0].text
    assert "two decimals" in call(backend, rt, "charge_fee", account_id=account["id"], amount=1.005,
                                  description="x")[0].text


def test_transfer_moves_money_and_insufficient_funds_fail(backend, runtime):
    data = task("transfer_within_limit", 1)
    rt = runtime(data)
    [sent] = writes(data, "send_transfer")
    account = rows(data, "accounts")[0]
    too_much, _ = call(backend, rt, "send_transfer", **{**sent, "amount": account["balance"] + 1})
    assert too_much.is_error and "insufficient funds" in too_much.text
    result, final = call(backend, rt, "send_transfer", **sent)
    assert json.loads(result.text)["status"] == "completed"
    assert Decimal(state_row(final, "accounts", account["id"])["balance"]) == \
        Decimal(str(account["balance"])) - Decimal(str(sent["amount"]))
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_replace_card_issues_a_new_card_and_disputes_are_filed_once(backend, runtime):
    data = task("dispute_card_transaction", 0)
    rt = runtime(data)
    card = rows(data, "cards")[0]
    [filed] = writes(data, "file_dispute")
    results, final = run_tools(backend, rt, [("replace_card", {"card_id": card["id"], "reason_code": "damaged"}),
                                             ("replace_card", {"card_id": card["id"], "reason_code": "damaged"}),
                                             ("file_dispute", filed), ("file_dispute", filed)])
    new = json.loads(results[0].text)
    assert new["new_last4"] == new_card_last4(new["new_card_id"]) and state_row(final, "cards", card["id"])[
        "status"] == "cancelled"
    assert results[1].is_error and "already cancelled" in results[1].text
    assert not results[2].is_error and results[3].is_error and "already disputed" in results[3].text
    deposit = next(t for t in rows(data, "transactions") if t["kind"] == "deposit")
    assert "money received" in call(backend, rt, "file_dispute", transaction_id=deposit["id"],
                                    reason_code="duplicate", description="x")[0].text


def test_base_seed_builds_and_distractors_touch_base_records_only(backend, runtime):
    data = task("card_freeze", 0)
    rt = runtime(data)
    assert len(rt.initial["cards"]["rows"]) == len(base_rows()["cards"]) + len(rows(data, "cards"))
    for extra in BANK.distractors:
        result, final = call(backend, rt, extra["tool"], **extra["arguments"])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    base_cards = {c["id"] for c in base_rows()["cards"]}
    assert {e["arguments"]["card_id"] for e in BANK.distractors if "card_id" in e["arguments"]} <= base_cards
