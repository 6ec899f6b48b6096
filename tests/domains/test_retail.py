"""The retail domain: deterministic task generation, tasks the scripted user can play, policy
arithmetic the references follow, tools that fail clearly, and checks that pass the reference and
fail the do-nothing agent and single faults. What every domain shares is in test_generated_tasks.py."""

import json
import re
from decimal import Decimal

from tbx.domains import get_domain
from tbx.domains.retail.seed import (
    GOODWILL_APPROVAL_ABOVE,
    NON_RETURNABLE,
    RETURN_FEE,
    RETURN_WINDOW_DAYS,
    TODAY,
    base_rows,
    variant_rows,
)
from tbx.grading import grade_state

from .harness import call, run_tools, without_identity

RETAIL = get_domain("retail")
TASKS = RETAIL.generate_tasks(0)
VARIANTS = {v["id"]: v for v in variant_rows()}
CATEGORY = {p["id"]: p["category"] for p in base_rows()["products"]}


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def writes(data: dict, tool: str) -> list[dict]:
    return [s["arguments"] for s in data["reference"] if s.get("tool") == tool]


def test_identity_facts_come_before_any_look_up_and_a_mismatch_offers_one_proof():
    for data in TASKS:
        first_tool = next(i for i, s in enumerate(data["reference"]) if "tool" in s)
        assert first_tool == 1, data["id"]  # identity facts are asked for before anything is looked up
        verified = any(e["table"] == "identity_checks" for e in data["checks"]["expected"])
        if data["family"] == "identity_mismatch" and not verified:  # one proof only, and it is wrong
            assert len({"zip_code", "order_number"} & set(data["user"]["private_facts"])) == 1, data["id"]


def test_task_orders_and_customers_never_collide_with_the_base():
    base = base_rows()
    numbers = {o["order_number"] for o in base["orders"]}
    emails = {c["email"] for c in base["customers"]}
    for data in TASKS:
        rows = data["seed"]["rows"]
        assert "variants" not in rows and "products" not in rows  # the catalog is shared base data
        assert numbers.isdisjoint(o["order_number"] for o in rows["orders"]), data["id"]
        assert emails.isdisjoint(c["email"] for c in rows["customers"]), data["id"]


def test_policy_states_the_rules_the_tasks_check():
    policy = " ".join(RETAIL.policy.split())  # line breaks do not matter
    assert f"Today is **{TODAY.isoformat()}**" in policy
    assert f"**{RETURN_WINDOW_DAYS} days of delivery**" in policy and f"${RETURN_FEE}" in policy
    assert f"${GOODWILL_APPROVAL_ABOVE} or less" in policy and "10% of the order total" in policy
    for phrase in (*NON_RETURNABLE, "identity_verification_failed", "return_exception",
                   "address_change_after_shipment", "original payment method", "waived for gold"):
        assert phrase in policy, phrase


def _order(data: dict) -> dict:
    return data["seed"]["rows"]["orders"][-1]


def _days(order: dict) -> int:
    return (TODAY - TODAY.fromisoformat(order["delivered_on"])).days


def test_return_references_refund_the_eligible_items_less_the_fee_unless_gold():
    for data in [t for t in TASKS if t["family"] in ("return_items", "return_partly_eligible")]:
        rows = data["seed"]["rows"]
        returned = {a["order_item_id"] for a in writes(data, "return_item")}
        items = {i["id"]: i for i in rows["order_items"]}
        assert all(CATEGORY[VARIANTS[items[i]["variant_id"]]["product_id"]] not in NON_RETURNABLE for i in returned)
        assert _days(_order(data)) <= RETURN_WINDOW_DAYS
        fee = Decimal(0) if rows["customers"][0]["loyalty_tier"] == "gold" else RETURN_FEE
        value = sum(Decimal(str(items[i]["unit_price"])) * items[i]["quantity"] for i in returned)
        [refund] = writes(data, "issue_refund")
        assert Decimal(str(refund["amount"])) == value - fee, data["id"]
    assert _days(_order(task("return_items", 0))) == RETURN_WINDOW_DAYS  # the last day of the window
    assert _days(_order(task("return_window_closed", 0))) == RETURN_WINDOW_DAYS + 1
    assert all(_days(_order(t)) > RETURN_WINDOW_DAYS for t in TASKS if t["family"] == "return_window_closed")


def test_exchanges_stay_within_the_product_and_follow_stock():
    for data in [t for t in TASKS if t["family"].startswith("exchange")]:
        ordered = next(i for i in data["seed"]["rows"]["order_items"] if i["order_id"] == _order(data)["id"])
        assert ordered["quantity"] == 1
        [product] = writes(data, "get_product")
        assert product["product_id"] == VARIANTS[ordered["variant_id"]]["product_id"]
        if data["family"] == "exchange_variant":
            [exchange] = writes(data, "exchange_item")
            wanted = VARIANTS[exchange["new_variant_id"]]
            assert wanted["product_id"] == product["product_id"] and wanted["stock"] > 0
        else:
            assert not writes(data, "exchange_item") and writes(data, "return_item")
            option = re.search(r"for the (.+) instead\.", data["user"]["opening_message"]).group(1)
            [wanted] = [v for v in VARIANTS.values() if v["option"] == option and v["product_id"] == product["product_id"]]
            assert wanted["stock"] == 0 and wanted["id"] != ordered["variant_id"], data["id"]


def test_goodwill_is_ten_percent_and_above_thirty_dollars_goes_to_a_manager():
    for data in [t for t in TASKS if t["family"].startswith("goodwill")]:
        order = _order(data)
        assert order["delivered_on"] > order["promised_by"], data["id"]  # the delivery was late
        credit = (Decimal(str(order["total_amount"])) / 10).quantize(Decimal("0.01"))
        granted, filed = writes(data, "grant_store_credit"), writes(data, "request_credit_approval")
        if credit <= GOODWILL_APPROVAL_ABOVE:
            assert data["family"] == "goodwill_credit" and not filed
            assert Decimal(str(granted[0]["amount"])) == credit
        else:
            assert data["family"] == "goodwill_needs_approval" and not granted
            assert Decimal(str(filed[0]["amount"])) == credit


def test_statuses_match_what_each_family_may_do():
    for data in TASKS:
        status = _order(data)["status"]
        if data["family"] in ("change_address", "cancel_order", "identity_mismatch"):
            assert status == "processing", data["id"]
        elif data["family"] == "address_after_shipment":
            assert status == "shipped", data["id"]
        else:
            assert status == "delivered", data["id"]


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_authentication_needs_matching_email_and_zip_or_own_order(backend, runtime):
    data = task("return_items", 0)
    rt = runtime(data)
    owner = data["seed"]["rows"]["customers"][0]
    own, foreign = _order(data)["order_number"], base_rows()["orders"][0]["order_number"]
    ok, _ = call(backend, rt, "authenticate_customer", email=owner["email"].upper(), zip_code=owner["zip_code"])
    assert json.loads(ok.text)["verified"] is True and "zip_code" not in json.loads(ok.text)["customer"]
    assert json.loads(call(backend, rt, "authenticate_customer", email=owner["email"],
                           order_number=own.lower())[0].text)["verified"] is True
    for proof in ({"zip_code": "00000"}, {"order_number": foreign}):
        result, _ = call(backend, rt, "authenticate_customer", email=owner["email"], **proof)
        assert json.loads(result.text)["verified"] is False, proof
    assert json.loads(call(backend, rt, "authenticate_customer", email="nobody@mail.example",
                           zip_code="04101")[0].text) == {"verified": False, "reason": "no account has this email address"}
    assert call(backend, rt, "authenticate_customer", email=owner["email"])[0].is_error


def test_lookups_and_writes_fail_clearly(backend, runtime):
    data = task("cancel_order", 0)
    rt = runtime(data)
    order, payment = _order(data), data["seed"]["rows"]["payments"][-1]
    item = data["seed"]["rows"]["order_items"][-1]
    assert call(backend, rt, "get_order", order_number="R000000")[0].text.startswith("Error: no order")
    assert "product 99 not found" in call(backend, rt, "get_product", product_id=99)[0].text
    assert "only delivered items" in call(backend, rt, "return_item", order_item_id=item["id"], reason="x")[0].text
    assert "does not belong" in call(backend, rt, "issue_refund", order_id=order["id"], payment_id=1,
                                     amount=5, reason="x")[0].text
    for amount, problem in ((0, "greater than zero"), (1.234, "two decimals"),
                            (order["total_amount"] + 0.01, "exceeds")):
        assert problem in call(backend, rt, "issue_refund", order_id=order["id"], payment_id=payment["id"],
                               amount=amount, reason="x")[0].text
    assert "five-digit ZIP" in call(backend, rt, "change_shipping_address", order_id=order["id"], street="1 A St",
                                    city="Duluth", zip_code="5580")[0].text
    assert "category" in call(backend, rt, "open_support_case", email=data["user"]["private_facts"]["email"]["value"],
                              category="vip", summary="x")[0].text
    assert "does not belong" in call(backend, rt, "grant_store_credit", customer_id=1001, order_id=order["id"],
                                     amount=5, reason="x")[0].text


def test_cancel_restocks_every_item_and_cannot_repeat(backend, runtime):
    data = task("cancel_order", 2)  # three items
    rt = runtime(data)
    order, payment = _order(data), data["seed"]["rows"]["payments"][-1]
    items = [i for i in data["seed"]["rows"]["order_items"] if i["order_id"] == order["id"]]
    results, final = run_tools(backend, rt, [
        ("cancel_order", {"order_id": order["id"], "reason": "x"}),
        ("cancel_order", {"order_id": order["id"], "reason": "x"}),
        ("issue_refund", {"order_id": order["id"], "payment_id": payment["id"], "amount": order["total_amount"],
                          "reason": "x"})])
    assert json.loads(results[0].text)["items_restocked"] == len(items) == 3
    assert results[1].is_error and "cancelled" in results[1].text
    stock = {r["id"]: r["stock"] for r in final["variants"]["rows"]}
    for item in items:
        assert stock[str(item["variant_id"])] == str(VARIANTS[item["variant_id"]]["stock"] + item["quantity"])
    assert grade_state(rt.initial, final, *without_identity(rt)).passed is True


def test_exchange_reserves_stock_and_refuses_sold_out_variants(backend, runtime):
    data = task("exchange_unavailable", 0)
    rt = runtime(data)
    item = next(i for i in data["seed"]["rows"]["order_items"] if i["order_id"] == _order(data)["id"])
    product = VARIANTS[item["variant_id"]]["product_id"]
    sold_out = next(v for v in VARIANTS.values() if v["product_id"] == product and v["stock"] == 0)
    in_stock = next(v for v in VARIANTS.values() if v["product_id"] == product and v["stock"] > 0
                    and v["id"] != item["variant_id"])
    refused, _ = call(backend, rt, "exchange_item", order_item_id=item["id"], new_variant_id=sold_out["id"], reason="x")
    assert refused.is_error and "0 in stock" in refused.text
    done, final = call(backend, rt, "exchange_item", order_item_id=item["id"], new_variant_id=in_stock["id"],
                       reason="x")
    assert not done.is_error
    assert next(r for r in final["variants"]["rows"] if r["id"] == str(in_stock["id"]))["stock"] == \
        str(in_stock["stock"] - 1)
    assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False  # policy wanted a return


def test_base_seed_builds_and_distractors_touch_base_records_only(backend, runtime):
    rt = runtime(task("goodwill_credit", 0))
    assert len(rt.initial["orders"]["rows"]) == len(base_rows()["orders"]) + len(
        task("goodwill_credit", 0)["seed"]["rows"]["orders"])
    for extra in RETAIL.distractors:
        result, final = call(backend, rt, extra["tool"], **extra["arguments"])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    base_emails = {c["email"] for c in base_rows()["customers"]}
    assert {e["arguments"]["email"] for e in RETAIL.distractors if "email" in e["arguments"]} <= base_emails
    assert re.fullmatch(r"R\d{6}", _order(task("goodwill_credit", 0))["order_number"])
