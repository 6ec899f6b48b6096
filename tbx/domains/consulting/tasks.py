"""Consulting task families, generated deterministically from a seed.

Each family is one situation from policy.md; its instances vary the client and its tier, the
consultants and their levels, periods, hours, rates, budgets and amounts, and sit on the rules'
boundaries (a credit just under $2,000, a subtotal of exactly $50,000, a PO that covers the cost
to the cent). Four families are refusals or escalations that still leave a positive record (a
case, a partner approval request, a PO increase request), so a do-nothing agent fails them too.
References are written for the scripted user: the question names the facts it needs by their
keywords, and the closing statement has no question mark and no fact keyword.
"""


from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.consulting.seed import (
    CITIES,
    CREDIT_APPROVAL_THRESHOLD,
    HIGH_COST_CITIES,
    HIGH_COST_PER_DIEM,
    LEVELS,
    OPEN_PERIODS,
    PER_DIEM,
    TIER_DISCOUNT,
    VOLUME_POINTS,
    VOLUME_THRESHOLD,
    Account,
    Row,
    base_rows,
    expense,
    invoice,
    money,
    period_of,
    used_codes,
    workday,
)
from tbx.domains.kit import ask_for, bench_tasks, call, insert_change, private_facts, update_change

KEYWORDS = {
    "client_code": ["client code"],
    "email": ["email address"],
    "invoice_number": ["invoice number"],
    "disputed_hours": ["how many hours", "disputed hours"],
    "consultant_id": ["consultant id"],
    "work_email": ["work email"],
    "corrections": ["corrected hours", "correct hours"],
    "missing_time": ["days and hours", "which days"],
    "engagement_code": ["engagement code"],
}
ASKS = {
    "client_code": "your client code", "email": "your email address", "invoice_number": "the invoice number",
    "disputed_hours": "how many hours were billed in error", "consultant_id": "your consultant ID",
    "work_email": "your work email", "corrections": "the corrected hours for each entry",
    "missing_time": "the days and hours you worked", "engagement_code": "the engagement code",
}
STAFF_LEVELS = LEVELS[:-1]
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _usd(amount: Any) -> str:
    return f"${float(amount):,.2f}"


def _dec(value: Any) -> Decimal:
    return Decimal(str(value))


def _name(person: Row) -> str:
    return f"{person['first_name']} {person['last_name']}"


def _verified(client: Row | None = None, consultant: Row | None = None) -> dict:
    """The identity record a successful verification of a billing contact (of `client`) or of a
    `consultant` leaves (checked like any write)."""
    return insert_change("identity_checks", client_id=client["id"] if client else None,
                   consultant_id=consultant["id"] if consultant else None)


def _built(persona: str, instructions: str, opening: str, facts: dict, account: Account, reference: list,
           expected: list, verified: dict | None = None) -> Built:
    """A task's record; `verified`: the identity record its reference leaves, if any (`_verified`)."""
    expected = [verified, *expected] if verified else expected
    return {"persona": persona, "instructions": instructions, "facts": facts, "opening": opening,
            "rows": account.rows, "reference": reference, "expected": expected}


INSTANCES_PER_FAMILY = 11


def _credit_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Credit hours billed in error: apply up to $2,000, ask the lead partner above that."""
    account = Account(rng, used)
    bill, lines = account.bill("issued" if index % 4 else "draft", rng.randrange(2, 5), (24, 81))
    line = rng.choice(lines)
    keep = (100 - _dec(bill["discount_percent"])) / 100
    per_hour = _dec(line["rate"]) * keep
    largest_small = min(int(CREDIT_APPROVAL_THRESHOLD / per_hour), line["hours"])
    if kind == "invoice_credit":
        hours = largest_small if index == 0 else rng.randrange(1, largest_small + 1)
    else:
        hours = largest_small + 1 if index == 0 else rng.randrange(largest_small + 1, line["hours"] + 1)
    credit = money(hours * per_hour)
    assert (credit <= CREDIT_APPROVAL_THRESHOLD) == (kind == "invoice_credit"), (credit, kind)
    who = next(p for p in account.rows["consultants"] if p["id"] == line["consultant_id"])
    number, code = bill["invoice_number"], account.client["client_code"]
    held = {} if index % 3 == 2 else {"invoice_number": number}  # else found on the client record
    steps = [_ask("client_code", "email", *held, "disputed_hours"),
             call("verify_billing_contact", client_code=code, email=account.client["billing_contact_email"]),
             *([] if held else [call("get_client", client_code=code)]),
             call("get_invoice", invoice_number=number)]
    total = _usd(money(_dec(bill["total"]) - _dec(credit)))
    rules = [{"id": "told_credit", "rule": "The agent told the caller the credit amount and the invoice's new "
              "total.", "evidence": [_usd(credit), total]}]
    if kind == "invoice_credit":
        steps += [call("apply_invoice_credit", invoice_number=number, amount=credit,
                        reason="hours billed in error"),
                  {"say": f"I applied a credit of {_usd(credit)} for {hours} hours of {_name(who)}'s time; "
                          f"the invoice total is now {total}."}]
        expected = [insert_change("invoice_credits", invoice_id=bill["id"], amount=credit, status="applied"),
                    update_change("invoices", bill["id"], credits=credit, total=money(_dec(bill["total"]) - _dec(credit)))]
    else:
        steps += [call("request_partner_approval", invoice_number=number, amount=credit,
                        reason=f"{hours} hours of {_name(who)} billed in error"),
                  {"say": f"The credit comes to {_usd(credit)}, which needs the lead partner's approval. I sent the "
                          f"request to {_name(account.partner)}; the credit follows once it is approved."}]
        expected = [insert_change("approval_requests", invoice_id=bill["id"], approver_id=account.partner["id"],
                            amount=credit, status="pending")]
        rules = []
    contact = account.client["billing_contact_name"]
    return {"judge": rules} | _built(f"{contact}, billing contact of {account.client['name']}.",
                  f"Get a credit on your invoice for {hours} hours of {_name(who)}'s time that were billed in "
                  f"error. If partner approval is needed, accept that.",
                  f"Hello, our latest invoice bills hours of {_name(who)} that were never worked for us. "
                  f"We need a credit.",
                  _facts(client_code=code, email=account.client["billing_contact_email"], **held,
                         disputed_hours=hours), account, steps, expected,
                  _verified(client=account.client))


def _discount_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Apply the tier (and volume) discount to a draft invoice that was drafted without it."""
    tier = ("preferred", "strategic", "standard")[index % 3]
    account = Account(rng, used, tier)
    wanted_volume = tier == "standard" or index % 2 == 0
    hours = (120, 200) if wanted_volume else (20, 60)
    bill, lines = account.bill("draft", 3 if wanted_volume else 2, hours)
    if index == 0:  # exactly $50,000: the volume points apply
        lines[1:] = []
        lines[0] |= {"hours": 200, "rate": 250, "amount": 50_000}
        account.rows["invoice_lines"] = lines
        bill |= invoice(bill["id"], bill["invoice_number"], account.engagement, "draft", lines, 0)
    subtotal = _dec(bill["subtotal"])
    percent = TIER_DISCOUNT[tier] + (VOLUME_POINTS if subtotal >= VOLUME_THRESHOLD else 0)
    assert percent > 0, (tier, subtotal)
    bill |= {"discount_percent": 0, "discount_amount": 0, "total": money(subtotal)}
    discount = money(subtotal * percent / 100)
    total = money(subtotal - _dec(discount))
    number, code = bill["invoice_number"], account.client["client_code"]
    held = {} if index % 3 == 2 else {"invoice_number": number}  # else the draft's total is on the client record
    steps = [_ask("client_code", "email", *held),
             call("verify_billing_contact", client_code=code, email=account.client["billing_contact_email"]),
             call("get_client", client_code=code),
             *([call("get_invoice", invoice_number=number)] if held else []),
             call("set_invoice_discount", invoice_number=number, discount_percent=percent),
             {"say": f"Your draft invoice now carries a {percent}% discount of {_usd(discount)}; the new total is "
                     f"{_usd(total)}."}]
    contact = account.client["billing_contact_name"]
    return _built(f"{contact}, billing contact of {account.client['name']}.",
                  "Your draft invoice shows no discount. Have the discount your company is entitled to applied.",
                  "Hi, the draft invoice you sent us shows no discount at all. Can you apply the discount we "
                  "are entitled to?",
                  _facts(client_code=code, email=account.client["billing_contact_email"], **held),
                  account, steps,
                  [update_change("invoices", bill["id"], discount_percent=percent, discount_amount=discount, total=total)],
                  _verified(client=account.client))


def _unauthorized_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Someone at the client who is not the billing contact asks for an invoice change: log a case only.
    Every fourth caller is a billing contact, but of another client than the invoice's: verified,
    yet not authorised for that invoice, so no change; their identity record is what the checks see."""
    account = Account(rng, used)
    if index % 4 == 3:
        code, contact = account.client["client_code"], account.client["billing_contact_name"]
        other = rng.choice([b for b in base_rows()["invoices"] if b["client_id"] != account.client["id"]])
        steps = [_ask("client_code", "email", "invoice_number"),
                 call("verify_billing_contact", client_code=code, email=account.client["billing_contact_email"]),
                 call("get_invoice", invoice_number=other["invoice_number"]),
                 {"say": "I'm sorry, but I can't make that change: that invoice belongs to another client, and only "
                         "its own billing contact can request changes to it."}]
        return _built(f"{contact}, billing contact of {account.client['name']}.",
                      f"Ask for the client discount on invoice {other['invoice_number']}, which a sister company "
                      "received. Give your own client code and email when asked.",
                      f"Hi, I need our discount applied to invoice {other['invoice_number']}.",
                      _facts(client_code=code, email=account.client["billing_contact_email"],
                             invoice_number=other["invoice_number"]), account, steps, [],
                      _verified(client=account.client))
    bill, lines = account.bill("issued" if index % 2 else "draft", 2, (20, 60))
    first = rng.choice(("Jordan", "Casey", "Morgan", "Riley", "Avery"))
    last = next(n for n in reversed(account.names) if n not in account.client["billing_contact_name"])
    caller = f"{first.lower()}.{last.lower()}@{account.client['billing_contact_email'].split('@')[1]}"
    request = ("a credit for hours billed in error", "the client discount applied")[index % 2]
    code = account.client["client_code"]
    steps = [_ask("client_code", "email", "invoice_number"),
             call("verify_billing_contact", client_code=code, email=caller),
             call("open_case", category="unauthorized_invoice_request", client_code=code,
                   summary=f"{caller} asked for {request} on {bill['invoice_number']} but is not the billing "
                           f"contact."),
             {"say": "I'm sorry, only your company's named billing contact can request changes to an invoice, so "
                     "I cannot make this change. I logged the request for our billing team."}]
    return _built(f"{first} {last}, project lead at {account.client['name']}.",
                  f"Ask for {request} on invoice {bill['invoice_number']}. You are not the billing contact; give "
                  f"your own email when asked.",
                  f"Hi, I need {request} on one of our invoices.",
                  _facts(client_code=code, email=caller, invoice_number=bill["invoice_number"]), account, steps,
                  [insert_change("cases", client_id=account.client["id"], consultant_id=None,
                           category="unauthorized_invoice_request", status="open")])


def _time_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Correct a consultant's hours: open periods are corrected, closed ones go to a case."""
    account = Account(rng, used)
    person = account.person(rng.choice(STAFF_LEVELS))
    account.assign(person)
    closed = [rng.randrange(4, 8)]
    if kind == "time_correction":
        targets = account.entries(person, rng.sample(OPEN_PERIODS, 1 + index % 2))
    else:
        targets = account.entries(person, closed + ([rng.choice(OPEN_PERIODS)] if index % 3 == 2 else []))
    account.entries(person, [rng.choice(OPEN_PERIODS), rng.randrange(3, 8)])  # entries left as they are
    new_hours = {e["id"]: rng.choice([h for h in (3, 5, 6.5, 7, 8, 10) if h != e["hours"]]) for e in targets}
    told = "; ".join(f"{e['work_date']} should be {new_hours[e['id']]} hours" for e in targets)
    steps = [_ask("consultant_id", "work_email", "corrections"),
             call("verify_consultant", consultant_id=person["id"], email=person["email"]),
             call("list_time_entries", consultant_id=person["id"]), call("list_periods")]
    expected = []
    for entry in targets:
        if entry["period_id"] in OPEN_PERIODS:
            steps.append(call("correct_time_entry", entry_id=entry["id"], hours=new_hours[entry["id"]],
                               reason="hours entered wrongly"))
            expected.append(update_change("time_entries", entry["id"], hours=new_hours[entry["id"]], status="submitted"))
    if kind == "time_correction":
        steps.append({"say": "Done: the entries now show the hours you gave me and are resubmitted for approval."})
    else:
        steps += [call("open_case", category="closed_period_correction", consultant_id=person["id"],
                        summary=f"Asked to correct time in a closed period: {told}."),
                  {"say": "Time in a closed timesheet period cannot be changed here, so I opened a case for finance "
                          "to decide" + (", and I corrected the entry in the open period." if expected else ".")}]
        expected.append(insert_change("cases", client_id=None, consultant_id=person["id"],
                                category="closed_period_correction", status="open"))
    return _built(f"{_name(person)}, a {person['level'].replace('_', ' ')} at Halden & Partners.",
                  f"Get your time entries corrected: {told}. If the agent says a period is closed, accept that.",
                  f"Hi, I made mistakes in my timesheet on the {account.engagement['name']} engagement and need "
                  f"them fixed.",
                  _facts(consultant_id=person["id"], work_email=person["email"], corrections=told), account,
                  steps, expected, _verified(consultant=person))


def _log_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Log forgotten days on an engagement the consultant is assigned to, in open periods."""
    account = Account(rng, used)
    person = account.person(rng.choice(STAFF_LEVELS))
    account.assign(person)
    account.entries(person, [rng.choice(OPEN_PERIODS), rng.randrange(4, 8)])
    account.assign(person, engagement_row=account.new_engagement())  # a second engagement they work on
    days = [(account.free_day(OPEN_PERIODS), rng.choice((3, 4.5, 6, 7.5, 8))) for _ in range(1 + index % 2)]
    told = "; ".join(f"{d}: {h} hours" for d, h in days)
    code = account.engagement["code"]
    steps = [_ask("consultant_id", "work_email", "engagement_code", "missing_time"),
             call("verify_consultant", consultant_id=person["id"], email=person["email"]),
             call("get_engagement", engagement_code=code), call("list_time_entries", consultant_id=person["id"])]
    steps += [call("log_time", consultant_id=person["id"], engagement_code=code, work_date=d, hours=h,
                    note="client work") for d, h in days]
    steps.append({"say": "Done: the missing time is logged and submitted for approval."})
    return _built(f"{_name(person)}, a {person['level'].replace('_', ' ')} at Halden & Partners.",
                  f"Log the time you forgot on the {account.engagement['name']} engagement: {told}.",
                  f"Hi, I forgot to log some of my time on the {account.engagement['name']} engagement.",
                  _facts(consultant_id=person["id"], work_email=person["email"], engagement_code=code,
                         missing_time=told), account, steps,
                  [insert_change("time_entries", consultant_id=person["id"], engagement_id=account.engagement["id"],
                           period_id=period_of(d), work_date=d, hours=h, status="submitted") for d, h in days],
                  _verified(consultant=person))


def _expense_decision(rng: random.Random, slot: int) -> tuple[str, str, float, int, str]:
    """(category, city, amount, receipt flag, decision) of one expense; `slot` spreads the cases."""
    category = ("meals", "lodging", "meals", "lodging", "airfare", "ground_transport")[slot % 6]
    city = rng.choice(CITIES)
    if category in PER_DIEM:
        limit = (HIGH_COST_PER_DIEM if city in HIGH_COST_CITIES else PER_DIEM)[category]
        amount = rng.choice((limit, limit - rng.randrange(5, 40), limit + rng.randrange(5, 120)))
        amount = money(amount + rng.choice((0, 0.45, 0.9)) * (amount != limit))
        receipt = rng.randrange(2)
        approve = amount <= limit or receipt == 1
    else:
        amount, receipt = money(rng.randrange(40, 700) + rng.choice((0, 0.5))), rng.randrange(2)
        approve = receipt == 1
    return category, city, amount, receipt, "approved" if approve else "rejected"


def _expense_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Decide a consultant's submitted expenses by the per-diem and receipt rules."""
    account = Account(rng, used)
    person = account.person(rng.choice(STAFF_LEVELS))
    account.assign(person)
    count = 3 + index % 3
    while True:
        decisions = [_expense_decision(rng, index + k) for k in range(count)]
        if {d[-1] for d in decisions} == {"approved", "rejected"}:
            break
    submitted = []
    for category, city, amount, receipt, decision in decisions:
        row = expense(account.ids(9000, 10000), person["id"], account.engagement["id"], category, city,
                      workday(rng, rng.choice(OPEN_PERIODS)), amount, receipt)
        submitted.append((account.add("expenses", row), decision))
    account.add("expenses", expense(account.ids(9000, 10000), person["id"], account.engagement["id"], "meals",
                                    "Denver", workday(rng, 6), 140, 0, "approved"))
    steps = [_ask("consultant_id", "work_email"),
             call("verify_consultant", consultant_id=person["id"], email=person["email"]),
             call("list_expenses", consultant_id=person["id"])]
    for row, decision in submitted:
        steps.append(call("approve_expense", expense_id=row["id"]) if decision == "approved" else
                     call("reject_expense", expense_id=row["id"], reason="above the per-diem without a receipt"))
    approved = sum(1 for _, d in submitted if d == "approved")
    steps.append({"say": f"I processed your {count} submitted expenses: {approved} approved and {count - approved} "
                         f"rejected because they exceed the per-diem limit or lack a receipt."})
    return _built(f"{_name(person)}, a {person['level'].replace('_', ' ')} at Halden & Partners.",
                  "Have all your submitted expenses processed. Accept the agent's decisions.",
                  "Hi, could you process the expenses I submitted for my recent client travel?",
                  _facts(consultant_id=person["id"], work_email=person["email"]), account, steps,
                  [update_change("expenses", row["id"], status=decision) for row, decision in submitted],
                  _verified(consultant=person))


def _staff_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Staff a consultant if the PO covers rate × hours; otherwise request a PO increase for the shortfall."""
    account = Account(rng, used)
    for _ in range(1 + index % 2):
        account.assign(account.person(rng.choice(STAFF_LEVELS)), rng.randrange(4, 20) * 10)
    staffee = account.person(STAFF_LEVELS[index % 4])
    hours = rng.randrange(4, 25) * 10
    rate = account.rate(staffee["level"])
    cost = money(_dec(rate) * hours)
    margin = 0 if index == 0 else rng.randrange(1, 400) * 50
    remaining = _dec(cost) + margin if kind == "staff_within_budget" else max(_dec(0), _dec(cost) - (margin or 10))
    committed = sum(_dec(a["hourly_rate"]) * _dec(a["planned_hours"]) for a in account.rows["assignments"])
    account.po |= {"committed": money(committed), "budget_cap": money(committed + remaining)}
    code, po = account.engagement["code"], account.po
    client_code = account.client["client_code"]
    held = {"client_code": client_code} if index % 3 == 2 else {"engagement_code": code}
    steps = [_ask("consultant_id", "work_email", *held),
             call("verify_consultant", consultant_id=account.partner["id"], email=account.partner["email"]),
             *([call("get_client", client_code=client_code)] if "client_code" in held else []),
             call("get_engagement", engagement_code=code),
             call("find_consultants", last_name=staffee["last_name"]),
             call("get_rate_cards")]
    if kind == "staff_within_budget":
        steps += [call("assign_consultant", engagement_code=code, consultant_id=staffee["id"], hourly_rate=rate,
                        planned_hours=hours),
                  {"say": f"{_name(staffee)} is staffed for {hours} hours at {_usd(rate)} an hour; "
                          f"{_usd(cost)} is committed on {po['po_number']}."}]
        expected = [insert_change("assignments", engagement_id=account.engagement["id"], consultant_id=staffee["id"],
                            hourly_rate=rate, planned_hours=hours, status="active"),
                    update_change("purchase_orders", po["id"], committed=money(committed + _dec(cost)))]
    else:
        shortfall = money(_dec(cost) - _dec(remaining))
        steps += [call("request_po_increase", po_number=po["po_number"], amount=shortfall,
                        reason=f"staff {_name(staffee)} for {hours} hours"),
                  {"say": f"Staffing {_name(staffee)} would cost {_usd(cost)}, more than the purchase order "
                          f"has left, so I asked the client to raise {po['po_number']} by {_usd(shortfall)}. "
                          f"The assignment waits for that approval."}]
        expected = [insert_change("po_change_requests", po_id=po["id"], amount=shortfall, status="pending")]
    return _built(f"{_name(account.partner)}, lead partner at Halden & Partners.",
                  f"Staff {_name(staffee)} on the {account.engagement['name']} engagement for {hours} hours. If the "
                  f"budget does not allow it, accept a PO increase request instead.",
                  f"Hi, please staff {_name(staffee)} on the {account.engagement['name']} engagement for "
                  f"{hours} hours.",
                  _facts(consultant_id=account.partner["id"], work_email=account.partner["email"], **held),
                  account, steps, expected,
                  _verified(consultant=account.partner))


FAMILIES: dict[str, Callable[[random.Random, set[str], int, str], Built]] = {
    "invoice_credit": _credit_family,
    "invoice_credit_approval": _credit_family,
    "invoice_unauthorized": _unauthorized_family,
    "invoice_discount": _discount_family,
    "time_correction": _time_family,
    "time_correction_closed_period": _time_family,
    "log_missing_time": _log_family,
    "expense_review": _expense_family,
    "staff_within_budget": _staff_family,
    "staff_over_budget": _staff_family,
}


def generate_tasks(seed: int = 0) -> list[dict]:
    """All consulting tasks for `seed`: INSTANCES_PER_FAMILY of every family, same seed → same tasks."""
    return bench_tasks("consulting", FAMILIES, seed, INSTANCES_PER_FAMILY, used_codes())
