"""Neobank task families, generated deterministically from a seed.

Each family is one business situation from policy.md; its instances vary the customer, KYC tier,
plan, amounts, dates, earlier transfers and which detail fails verification. Four families are
refusals or holds that still leave a positive record (a compliance review or a support case), so
a do-nothing agent fails them too. References are written for the scripted user: each question
names the facts it needs by their keywords, and the closing statement has no question mark and no
fact keyword.
"""


from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.kit import ask_for, bench_tasks, call, plain, private_facts
from tbx.domains.neobank.seed import (
    COMPLIANCE_REVIEW_AT,
    DISPUTE_WINDOW_DAYS,
    MERCHANTS,
    PAYEE_NAMES,
    PLANS,
    REPLACEMENT_FEES,
    TIER_LIMITS,
    TODAY,
    Bank,
    Row,
    amount_between,
    base_rows,
    money,
)

KEYWORDS = {
    "customer_number": ["customer number"],
    "date_of_birth": ["date of birth", "birth date"],
    "card_last4": ["last four digits", "last 4 digits"],
    "routing_number": ["routing number"],
    "payee_account_number": ["payee's account number", "their account number"],
    "if_over_limit": ["remaining limit"],
}
ASKS = {"customer_number": "your customer number", "date_of_birth": "your date of birth",
        "card_last4": "the last four digits of your card", "routing_number": "the payee's routing number",
        "payee_account_number": "the payee's account number"}
NEW_PAYEES = ("Marisol Vega", "Oakridge Apartments", "Teodor Lang", "Pinecrest Veterinary", "Ada Okafor",
              "Brightside Movers", "Callum Reid", "Northgate Storage")
STORIES = {"unauthorized": "I never made this purchase", "duplicate": "I was charged twice for it",
           "not_received": "I paid but the order never arrived", "wrong_amount": "I was charged more than the price"}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _date(days: int) -> str:
    return (TODAY - dt.timedelta(days=days)).isoformat()


class _Task:
    """One task's own rows: a customer with a checking account, a card, payees and history."""

    def __init__(self, rng: random.Random, numbers: set[str], tier: int, plan: str | None = None,
                 kyc: str = "verified", status: str = "active", balance: Decimal | None = None):
        ids = {"customers": rng.randrange(2000, 4900), "accounts": rng.randrange(5000, 6900),
               "cards": rng.randrange(7000, 8900), "payees": rng.randrange(3000, 4900),
               "transactions": rng.randrange(100000, 190000), "transfers": rng.randrange(20000, 29000)}
        self.rng, self.bank = rng, Bank(rng, ids, numbers)
        self.owner = self.bank.customer(tier, plan or rng.choice(PLANS), kyc)
        balance = balance or Decimal(rng.randrange(800, 9000))
        self.checking = self.bank.account(self.owner, "checking", balance, status)
        self.card = self.bank.card(self.checking)
        self.bank.history(self.checking, self.card, rng.randrange(4, 8))
        if rng.random() < 0.4:
            self.bank.account(self.owner, "savings", Decimal(rng.randrange(1000, 30000)))
        self.payees = [self.bank.payee(self.owner, n) for n in rng.sample(PAYEE_NAMES, rng.randrange(2, 4))]

    def sent_today(self, total: Decimal, parts: int) -> None:
        """Earlier transfers: `total` sent today in `parts` transfers, plus one from yesterday."""
        parts = max(parts, int(total // 9000) + 1)  # each earlier transfer stays below the review threshold
        shares = [total / parts] * (parts - 1)
        shares = [s.quantize(Decimal(1)) for s in shares]
        for share in [*shares, total - sum(shares, Decimal(0))]:
            self.bank.transfer(self.checking, self.rng.choice(self.payees), share, 0)
        self.bank.transfer(self.checking, self.rng.choice(self.payees), Decimal(self.rng.randrange(50, 800)), 1)

    def verify(self, *more: str, last4: str | None = None) -> tuple[list[dict], dict]:
        """The ask + verify steps and the identity facts (verified with the given card digits)."""
        digits = last4 or self.card["last4"]
        steps = [_ask("customer_number", "date_of_birth", "card_last4", *more),
                 call("verify_customer", customer_number=self.owner["customer_number"],
                       date_of_birth=self.owner["date_of_birth"], card_last4=digits)]
        return steps, {"customer_number": self.owner["customer_number"],
                       "date_of_birth": self.owner["date_of_birth"], "card_last4": digits}

    def salary_check(self, index: int) -> tuple[list[dict], str]:
        """Every third customer wants their salary seen first: (the steps that look at the checking
        account's transactions, the sentence of the opening that asks for it); a second shape of a
        family (list_transactions after get_accounts)."""
        if index % 3 != 2:
            return [], ""
        return [call("list_transactions", account_id=self.checking["id"])], " My salary should be in by now."

    @property
    def name(self) -> str:
        return f"{self.owner['first_name']} {self.owner['last_name']}"

    @property
    def cid(self) -> int:
        return self.owner["id"]

    @property
    def identity(self) -> dict:
        """The identity record a successful verification leaves (checked like any write)."""
        return {"op": "insert", "table": "identity_checks", "values": {"customer_id": self.cid}}


def _sent(account: Row, payee_id: int, amount: Decimal) -> list[dict]:
    """Expected changes of one transfer sent today."""
    return [{"op": "update", "table": "accounts", "key": {"id": account["id"]},
             "values": {"balance": money(account["balance"] - amount)}},
            {"op": "insert", "table": "transfers", "values": {"account_id": account["id"], "payee_id": payee_id,
                                                              "amount": money(amount), "status": "completed",
                                                              "created_on": TODAY.isoformat()}},
            {"op": "insert", "table": "transactions", "values": {"account_id": account["id"], "amount": money(-amount),
                                                                 "kind": "transfer", "status": "posted"}}]


INSTANCES_PER_FAMILY = 11


def _transfer_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Send to a payee: within the limit, capped at the remaining limit, or held for compliance."""
    tier = 3 if kind == "transfer_compliance_review" else 1 + index % 3
    limit = TIER_LIMITS[tier]
    cap = min(limit, COMPLIANCE_REVIEW_AT - Decimal("0.01"))
    if kind == "transfer_within_limit":
        already = (limit * Decimal(rng.randrange(0, 60)) / 100).quantize(Decimal(1))
        amount = limit - already if index == 0 else amount_between(rng, Decimal(40), min(cap, limit - already))
        sent = amount
    elif kind == "transfer_capped_by_limit":
        already = (limit * Decimal(rng.randrange(56, 90)) / 100).quantize(Decimal(1))
        sent = limit - already
        amount = amount_between(rng, sent + 1, min(cap, sent + limit / 2))
    else:
        already = Decimal(rng.choice((0, 0, 1500, 2500, 4000)))
        amount = COMPLIANCE_REVIEW_AT if index == 0 else amount_between(rng, COMPLIANCE_REVIEW_AT, limit - already)
        sent = amount
    task = _Task(rng, numbers, tier, balance=amount + rng.randrange(300, 6000))
    if already:
        task.sent_today(already, 1 + rng.randrange(2))
    payee, account = rng.choice(task.payees), task.checking
    steps, facts = task.verify()
    salary, remark = task.salary_check(index)
    steps += [call("get_accounts", customer_id=task.cid), *salary, call("list_payees", customer_id=task.cid),
              call("list_transfers", customer_id=task.cid)]
    send = call("send_transfer", account_id=account["id"], payee_id=payee["id"], amount=money(sent),
                 memo="requested by customer")
    opening = f"Hi, please send ${amount:,} from my checking account to {payee['name']} today.{remark}"
    rules = []
    if kind == "transfer_compliance_review":
        steps += [call("open_compliance_review", account_id=account["id"], payee_id=payee["id"],
                        amount=money(amount), reason="Large transfer requested by the customer."),
                  {"say": f"A transfer of ${amount:,} needs a compliance review, so I have not sent it. I filed "
                          "the review; the money leaves your account only once compliance clears it."}]
        expected = [{"op": "insert", "table": "compliance_reviews", "values": {
            "customer_id": task.cid, "account_id": account["id"], "payee_id": payee["id"], "amount": money(amount),
            "status": "pending"}}]
    elif kind == "transfer_capped_by_limit":
        rules = [{"id": "told_remaining_limit", "rule": "The agent told the customer how much of today's transfer "
                  "limit is left.", "evidence": [f"${sent:,}"]}]
        steps += [{"say": f"Your daily transfer limit is ${limit:,} and you already sent ${already:,} today, so "
                          f"${sent:,} is left. Shall I send the remaining limit of ${sent:,} instead?"},
                  send, {"say": f"Done: ${sent:,} is on its way to {payee['name']}."}]
        facts["if_over_limit"] = "Yes, please send the remaining limit instead."
        expected = _sent(account, payee["id"], sent)
    else:
        steps += [send, {"say": f"Done: ${sent:,} is on its way to {payee['name']}."}]
        expected = _sent(account, payee["id"], sent)
    return {"judge": rules, "persona": f"{task.name}, a Tidewater customer (KYC tier {tier}).", "facts": _facts(**facts),
            "instructions": f"Send ${amount:,} to {payee['name']} from your checking account. If the agent says "
                            "you cannot send that much today, agree to send what is still allowed.",
            "opening": opening, "rows": task.bank.rows, "reference": steps, "expected": [task.identity, *expected]}


def _blocked_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """A frozen account or incomplete KYC: nothing sent, a support case for the account."""
    frozen = index % 2 == 0
    task = _Task(rng, numbers, 1 + index % 3, kyc="verified" if frozen else "pending_documents",
                 status="frozen" if frozen else "active")
    payee, amount = rng.choice(task.payees), Decimal(rng.randrange(40, 900))
    category = "account_frozen" if frozen else "kyc_incomplete"
    steps, facts = task.verify()
    salary, remark = task.salary_check(index)
    steps += [call("get_accounts", customer_id=task.cid), *salary,
              call("open_support_case", customer_number=task.owner["customer_number"], category=category,
                    summary=f"Customer wanted to send ${amount} to {payee['name']}.", account_id=task.checking["id"])]
    why = ("your checking account is frozen and cannot send money" if frozen else
           "your identity documents are still pending, so transfers are not available yet; please upload them "
           "in the app")
    steps.append({"say": f"I cannot send this transfer: {why}. I opened a case for our account team."})
    return {"persona": f"{task.name}, a Tidewater customer.", "facts": _facts(**facts),
            "instructions": f"Send ${amount} to {payee['name']} from your checking account; you do not want to use "
                            "any other account.",
            "opening": f"Hello, I need to pay {payee['name']} ${amount} from my checking account.{remark}",
            "rows": task.bank.rows, "reference": steps, "expected": [
                task.identity, {"op": "insert", "table": "support_cases", "values": {
                    "customer_id": task.cid, "account_id": task.checking["id"], "category": category,
                    "status": "open"}}]}


def _freeze_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Freeze a misplaced card, or unfreeze one that turned up again."""
    task = _Task(rng, numbers, 1 + index % 3)
    lost = index % 2 == 0
    if index % 3 == 1:
        task.bank.card(task.checking, kind="virtual")
    card = task.card
    card["status"] = "active" if lost else "frozen"
    steps, facts = task.verify()
    tool, status = ("freeze_card", "frozen") if lost else ("unfreeze_card", "active")
    steps += [call("list_cards", customer_id=task.cid), call(tool, card_id=card["id"]),
              {"say": f"Done: your card is now {status}."}]
    story = "I can't find my card anywhere, please freeze it for now" if lost else \
        "I found the card I had frozen, please switch it back on"
    return {"persona": f"{task.name}, a Tidewater customer.", "facts": _facts(**facts),
            "instructions": "Have your card frozen (you misplaced it)." if lost else "Have your frozen card unfrozen.",
            "opening": f"Hi, {story}.", "rows": task.bank.rows, "reference": steps,
            "expected": [task.identity,
                         {"op": "update", "table": "cards", "key": {"id": card["id"]}, "values": {"status": status}}]}


def _replace_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Replace a card; the plan's fee is charged unless the card was stolen or the plan is premium."""
    reason, plan = ("damaged", "lost", "stolen")[index % 3], PLANS[(index // 3) % 3]
    task = _Task(rng, numbers, 1 + rng.randrange(3), plan=plan)
    card, account = task.card, task.checking
    if reason != "damaged" and rng.random() < 0.5:
        card["status"] = "frozen"  # the customer froze it in the app first
    fee = Decimal(0) if reason == "stolen" else REPLACEMENT_FEES[plan]
    steps, facts = task.verify()
    steps += [call("list_cards", customer_id=task.cid),
              call("replace_card", card_id=card["id"], reason_code=reason)]
    expected = [{"op": "update", "table": "cards", "key": {"id": card["id"]}, "values": {"status": "cancelled"}},
                {"op": "insert", "table": "cards", "values": {
                    "customer_id": task.cid, "account_id": account["id"], "kind": "physical", "status": "active",
                    "replaces_card_id": card["id"], "issue_reason": reason}}]
    if fee:
        steps.append(call("charge_fee", account_id=account["id"], amount=money(fee), description="card replacement"))
        expected += [{"op": "update", "table": "accounts", "key": {"id": account["id"]},
                      "values": {"balance": money(account["balance"] - fee)}},
                     {"op": "insert", "table": "transactions", "values": {
                         "account_id": account["id"], "amount": money(-fee), "kind": "fee", "status": "posted"}}]
    charged = f"the ${fee} replacement fee of your {plan} plan is charged to your checking account" if fee else \
        "there is no fee for this replacement"
    steps.append({"say": f"Your old card is cancelled and a new one is on its way; {charged}."})
    story = {"damaged": "my card is cracked and stopped working", "lost": "I lost my card",
             "stolen": "my wallet was stolen with my card in it"}[reason]
    return {"persona": f"{task.name}, a Tidewater customer on the {plan} plan.", "facts": _facts(**facts),
            "instructions": f"Get a replacement card: {story}.", "opening": f"Hi, {story}; I need a replacement card.",
            "rows": task.bank.rows, "reference": steps, "expected": [task.identity, *expected]}


def _dispute_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Dispute a recent card payment (freezing the card if unauthorized), or open a case when the
    transaction is too old or is not a card payment."""
    task = _Task(rng, numbers, 1 + index % 3)
    seen = {t["description"] for t in task.bank.rows["transactions"]}
    merchant = rng.choice([m for m in MERCHANTS if m not in seen])
    amount = amount_between(rng, Decimal(15), Decimal(600))
    eligible = kind == "dispute_card_transaction"
    reason = ("unauthorized", "duplicate", "not_received", "wrong_amount")[index % 4] if eligible else None
    if eligible:
        days = DISPUTE_WINDOW_DAYS if index == 1 else rng.randrange(1, DISPUTE_WINDOW_DAYS)
        target = task.bank.purchase(task.checking, task.card, days, merchant, amount)
        if reason == "duplicate":
            target = task.bank.purchase(task.checking, task.card, days, merchant, amount)
        story = STORIES[reason]
    elif index % 2 == 0:
        days = DISPUTE_WINDOW_DAYS + 1 if index == 0 else rng.randrange(DISPUTE_WINDOW_DAYS + 2, 150)
        target, story = task.bank.purchase(task.checking, task.card, days, merchant, amount), STORIES["not_received"]
    else:
        days, payee = rng.randrange(2, 50), rng.choice(task.payees)
        target = task.bank.transfer(task.checking, payee, amount, days)[1]
        merchant, story = payee["name"], "I sent it by mistake and want the money back"
    steps, facts = task.verify()
    steps += [call("get_accounts", customer_id=task.cid), call("list_transactions", account_id=task.checking["id"])]
    if not eligible and index % 2:  # a transfer, not a card payment: the agent finds it among the transfers
        steps.append(call("list_transfers", customer_id=task.cid))
    what = f"the ${amount} payment to {merchant} on {_date(days)}"
    if eligible:
        steps.append(call("file_dispute", transaction_id=target["id"], reason_code=reason, description=story))
        expected = [{"op": "insert", "table": "disputes", "values": {
                        "customer_id": task.cid, "transaction_id": target["id"], "amount": money(amount),
                        "reason_code": reason, "status": "open"}},
                    {"op": "update", "table": "transactions", "key": {"id": target["id"]},
                     "values": {"status": "disputed"}}]
        extra = ""
        if reason == "unauthorized":
            steps.append(call("freeze_card", card_id=task.card["id"]))
            expected.append({"op": "update", "table": "cards", "key": {"id": task.card["id"]},
                             "values": {"status": "frozen"}})
            extra = " I also froze the card it was made with."
        steps.append({"say": f"I filed a dispute for {what}.{extra}"})
    else:
        steps += [call("open_support_case", customer_number=task.owner["customer_number"],
                        category="dispute_ineligible", summary=f"Customer wants to dispute {what}.",
                        transaction_id=target["id"]),
                  {"say": f"I cannot file a dispute for {what}: only card payments from the last 60 days can be "
                          "disputed. I opened a case so our claims team can advise you."}]
        expected = [{"op": "insert", "table": "support_cases", "values": {
            "customer_id": task.cid, "transaction_id": target["id"], "category": "dispute_ineligible",
            "status": "open"}}]
    return {"persona": f"{task.name}, a Tidewater customer.", "facts": _facts(**facts),
            "instructions": f"Dispute {what}: {story}.",
            "opening": f"Hi, I want to dispute {what}; {story}.",
            "rows": task.bank.rows, "reference": steps, "expected": [task.identity, *expected]}


def _impostor_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Verification fails (a wrong birth date, or the digits of a cancelled card): an identity case.
    Every fourth caller verifies as themselves but asks to freeze their partner's card: not theirs,
    so no change; their identity record is what the checks see."""
    task = _Task(rng, numbers, 1 + index % 3)
    number, birth = task.owner["customer_number"], task.owner["date_of_birth"]
    digits = task.card["last4"]
    if index % 4 == 3:
        partner = task.bank.customer(1, rng.choice(PLANS), "verified")
        theirs = task.bank.card(task.bank.account(partner, "checking", Decimal(rng.randrange(200, 3000))))
        steps, facts = task.verify()
        steps += [call("list_cards", customer_id=task.cid),
                  {"say": "I'm sorry, but I can't make that change under our policy: the card ending in "
                          f"{theirs['last4']} is not one of your cards, and only its holder can have it frozen."}]
        return {"persona": f"{task.name}, a Tidewater customer whose partner lost a card.", "facts": _facts(**facts),
                "instructions": f"Have your partner's card ending in {theirs['last4']} frozen; they lost it. Give "
                                "your own details when asked.",
                "opening": f"Hi, my partner lost their card ending in {theirs['last4']}; please freeze it.",
                "rows": task.bank.rows, "reference": steps, "expected": [task.identity]}
    if index % 2 == 0:
        birth = (dt.date.fromisoformat(birth) + dt.timedelta(days=rng.choice((-400, -31, 1, 2, 365)))).isoformat()
        who = "misremembers the date of birth on file"
    else:
        old = task.bank.card(task.checking, status="cancelled")
        while old["last4"] in (task.card["last4"],):
            old["last4"] = f"{rng.randrange(10000):04d}"
        digits, who = old["last4"], "reads the digits off an old, cancelled card"
    payee, amount = rng.choice(task.payees), rng.randrange(5, 80) * 10
    steps = [_ask("customer_number", "date_of_birth", "card_last4"),
             call("verify_customer", customer_number=number, date_of_birth=birth, card_last4=digits),
             call("open_support_case", customer_number=number, category="identity_verification_failed",
                   summary="Caller could not be verified while asking for a transfer."),
             {"say": "I'm sorry, the details you gave do not match our records, so I cannot act on this request. "
                     "I have logged it for our security team."}]
    return {"persona": f"{task.name}, a Tidewater customer who {who}.",
            "facts": _facts(customer_number=number, date_of_birth=birth, card_last4=digits),
            "instructions": f"Send ${amount} to {payee['name']}. Give the details you hold when asked.",
            "opening": f"Hi, please send ${amount} to {payee['name']} from my checking account.",
            "rows": task.bank.rows, "reference": steps, "expected": [
                {"op": "insert", "table": "support_cases", "values": {
                    "customer_id": task.cid, "category": "identity_verification_failed", "status": "open"}}]}


def _new_payee_family(rng: random.Random, numbers: set[str], index: int, kind: str) -> Built:
    """Add a new payee from the details the customer gives, then send within the daily limit."""
    tier = 1 + index % 3
    amount = amount_between(rng, Decimal(50), TIER_LIMITS[tier] / 2)
    task = _Task(rng, numbers, tier, balance=amount + rng.randrange(300, 5000))
    if index % 2:
        task.sent_today((TIER_LIMITS[tier] / 4).quantize(Decimal(1)), 1)
    name, routing = rng.choice(NEW_PAYEES), f"0{rng.randrange(10**7, 10**8)}"
    account_number, payee_id = str(rng.randrange(10**9, 10**10)), task.bank.ids["payees"]
    steps, facts = task.verify("routing_number", "payee_account_number")
    salary, remark = task.salary_check(index)
    steps += [call("get_accounts", customer_id=task.cid), *salary, call("list_transfers", customer_id=task.cid),
              call("add_payee", customer_id=task.cid, name=name, routing_number=routing,
                    account_number=account_number),
              call("send_transfer", account_id=task.checking["id"], payee_id=payee_id, amount=money(amount),
                    memo="first payment"),
              {"say": f"Done: {name} is saved as a payee and ${amount:,} is on its way to them."}]
    expected = [{"op": "insert", "table": "payees", "values": {"customer_id": task.cid, "name": name,
                                                               "routing_number": routing,
                                                               "account_number": account_number}}]
    return {"persona": f"{task.name}, a Tidewater customer (KYC tier {tier}).",
            "facts": _facts(**facts, routing_number=routing, payee_account_number=account_number),
            "instructions": f"Add {name} as a new payee and send them ${amount:,} from your checking account.",
            "opening": f"Hi, I need to send ${amount:,} to {name}. They are not in my payees yet.{remark}",
            "rows": task.bank.rows, "reference": steps,
            "expected": [task.identity, *expected, *_sent(task.checking, payee_id, amount)]}


FAMILIES: dict[str, Callable[[random.Random, set[str], int, str], Built]] = {
    "transfer_within_limit": _transfer_family,
    "transfer_capped_by_limit": _transfer_family,
    "transfer_compliance_review": _transfer_family,
    "transfer_blocked": _blocked_family,
    "new_payee_transfer": _new_payee_family,
    "card_freeze": _freeze_family,
    "replace_card": _replace_family,
    "dispute_card_transaction": _dispute_family,
    "dispute_ineligible": _dispute_family,
    "identity_mismatch": _impostor_family,
}




def generate_tasks(seed: int = 0) -> list[dict]:
    """All neobank tasks for `seed`: INSTANCES_PER_FAMILY of every family, same seed → same tasks."""
    base = base_rows()
    numbers = {c["customer_number"] for c in base["customers"]} | {a["account_number"] for a in base["accounts"]}
    numbers |= {p["account_number"] for p in base["payees"]}
    return bench_tasks("neobank", FAMILIES, seed, INSTANCES_PER_FAMILY, numbers, seed_rows=plain)
