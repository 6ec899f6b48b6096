"""Auto insurance task families, generated deterministically from a seed.

Each family is one situation from policy.md; its instances vary the policyholder, state,
coverages, vehicles, dates and amounts, and sit on the rule's boundaries (an incident exactly 30
days old, a driver turning 21 today or tomorrow, a payout of exactly $10,000). Five families are
refusals or escalations that still leave a positive record (a support case, an underwriting
referral, an adjuster review), so a do-nothing agent fails them too. References are written for
the scripted user: the question names the facts it needs by their keywords, and the closing
statement has no question mark and no fact keyword.
"""


from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from tbx.domains.auto_insurance.seed import (
    ADJUSTERS,
    CANCELLATION_FEE,
    CARS,
    COVERAGE_FOR,
    DRIVER_PREMIUM,
    FIRST_NAMES,
    MIN_DRIVER_AGE,
    REVIEW_THRESHOLD,
    TODAY,
    VEHICLE_PREMIUM,
    Row,
    age_on_today,
    birth_date_for_age,
    customer,
    day,
    license_number,
    money,
    settlement,
    start_term,
    used_policy_numbers,
    vin,
)
from tbx.domains.kit import IdPool, ask_for, bench_tasks, call, insert_change, private_facts, update_change

KEYWORDS = {
    "policy_number": ["policy number"],
    "date_of_birth": ["date of birth", "birth date"],
    "incident_date": ["date of the incident", "incident date"],
    "estimated_damage": ["repair estimate", "estimated damage"],
    "claim_number": ["claim number"],
    "driver_name": ["driver's full name", "driver's name"],
    "driver_birth_date": ["driver's date of birth", "driver's birth date"],
    "driver_license": ["license number", "licence number"],
    "vin": ["vehicle identification number"],
    "cancellation_date": ["cancellation date", "cancellation to take effect"],
    "new_phone": ["new phone number", "phone number"],
    "new_email": ["new email address", "email address"],
}
ASKS = {
    "policy_number": "your policy number", "date_of_birth": "your date of birth",
    "incident_date": "the date of the incident", "estimated_damage": "the repair estimate",
    "claim_number": "the claim number", "driver_name": "the new driver's full name",
    "driver_birth_date": "the new driver's date of birth", "driver_license": "their license number",
    "vin": "the car's vehicle identification number",
    "cancellation_date": "the cancellation date you want",
    "new_phone": "your new phone number", "new_email": "your new email address",
}
INCIDENTS = ("collision", "collision", "collision", "hail", "theft", "vandalism", "flood", "fire",
             "animal_strike", "glass")
WHAT_HAPPENED = {"collision": "a collision", "hail": "hail damage", "theft": "a break-in and theft of parts",
                 "vandalism": "vandalism", "flood": "flood damage", "fire": "fire damage",
                 "animal_strike": "hitting a deer", "glass": "a cracked windshield"}
Built = dict[str, Any]  # persona, instructions, facts, opening, rows, reference, expected
_facts = partial(private_facts, KEYWORDS)
_ask = partial(ask_for, ASKS)


def _usd(amount: Any) -> str:
    return f"${float(amount):,.2f}"


def _who(rows: dict) -> tuple[Row, Row]:
    return rows["policyholders"][0], rows["policies"][0]


def _cover(rows: dict, kind: str) -> Row:
    return next(c for c in rows["coverages"] if c["coverage_type"] == kind)


def _car(car: Row) -> str:
    return f"{car['year']} {car['make']} {car['model']}"


def _task(person: Row, instructions: str, opening: str, facts: dict, rows: dict, reference: list,
          expected: list, persona: str = "", verified: bool = True) -> Built:
    """A task's record; `verified`: the reference verifies the policyholder, which leaves an identity record."""
    if verified:
        expected = [insert_change("identity_checks", policyholder_id=person["id"]), *expected]
    return {"persona": persona or f"{person['first_name']} {person['last_name']}, a Harborline Mutual "
                                  f"policyholder in {person['city']}, {person['state']}.",
            "instructions": instructions, "facts": facts, "opening": opening, "rows": rows,
            "reference": reference, "expected": expected}


def _second_item(rng: random.Random, index: int, person: Row, number: str, field: str) -> dict:
    """Every third caller also has a changed phone number or email: (facts, ask, step, expected, said)
    of that second item, or empty ones (a second shape of a family: update_contact after the change)."""
    if index % 3 != 2:
        return {"facts": {}, "ask": (), "steps": [], "expected": [], "said": "", "opening": ""}
    value = (f"+1-555-{rng.randrange(200, 999)}-{rng.randrange(10000):04d}" if field == "phone" else
             f"{person['first_name'].lower()}.{person['last_name'].lower()}@post.example")
    return {"facts": {f"new_{field}": value}, "ask": (f"new_{field}",),
            "steps": [call("update_contact", policy_number=number, field=field, value=value)],
            "expected": [update_change("policyholders", person["id"], **{field: value})],
            "said": " Your contact details are updated too.",
            "opening": f" Also, my {'phone number' if field == 'phone' else 'email address'} has changed."}


INSTANCES_PER_FAMILY = 11


def _claim_setup(rng: random.Random, used: set[str], index: int, kind: str) -> tuple[dict, str, Row, int]:
    """(rows, incident type, damaged car, days since the incident) of a first-notice-of-loss task."""
    ids = IdPool(rng)
    incident = rng.choice(INCIDENTS)
    needed = COVERAGE_FOR[incident]
    other = "comprehensive" if needed == "collision" else "collision"
    kinds = ("liability", needed) + ((other,) if rng.random() < 0.5 else ()) + (("rental",) if index % 3 else ())
    if kind == "claim_not_covered" and index % 2 == 0:  # the coverage the incident needs is missing
        kinds = tuple(k for k in kinds if k != needed) + ((other,) if other not in kinds else ())
    rows = customer(rng, ids, used, kinds, cars=1 + index % 3)
    car = rows["vehicles"][-1]
    if kind == "claim_not_covered" and index % 2 == 1:  # the car was taken off the policy
        car["status"] = "removed"
    if kind == "file_claim":
        days = 30 if index == 0 else rng.randrange(0, 30)
    elif kind == "claim_late_report":
        days = 31 if index == 0 else rng.randrange(32, 90)
    else:
        days = rng.randrange(1, 28)
    start_term(rows["policies"][0], rng.randrange(days + 5, 360))  # the incident falls inside the term
    return rows, incident, car, days


def _claim_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Report a new loss: file it with the right reserve, or refuse with a late-report/not-covered case."""
    rows, incident, car, days = _claim_setup(rng, used, index, kind)
    person, row = _who(rows)
    number, when, estimate = row["policy_number"], day(-days), rng.randrange(24, 300) * 50
    unsure = index % 3 == 2  # not sure it was reported already: the agent checks the policy's claims first
    steps = [_ask("policy_number", "date_of_birth", "incident_date", "estimated_damage"),
             call("verify_policyholder", policy_number=number, date_of_birth=person["date_of_birth"]),
             call("get_policy", policy_number=number), *([call("list_claims", policy_number=number)] if unsure else [])]
    if kind == "file_claim":
        cover = _cover(rows, COVERAGE_FOR[incident])
        if index % 4 == 3:  # a car worth less than the repair: the limit caps the reserve
            cover["limit_amount"] = max(1000, estimate - cover["deductible"] - rng.randrange(2, 20) * 100)
        reserve = settlement(estimate, cover["deductible"], cover["limit_amount"])
        steps += [call("file_claim", policy_number=number, vehicle_id=car["id"], incident_type=incident,
                        coverage_type=cover["coverage_type"], incident_date=when, estimated_damage=estimate,
                        reserve=reserve, description=f"{WHAT_HAPPENED[incident]} to the {_car(car)}"),
                  {"say": f"Your claim for the {_car(car)} is filed under your {cover['coverage_type']} coverage "
                          f"with a reserve of {_usd(reserve)}. A claims specialist will be in touch."}]
        expected = [insert_change("claims", policy_id=row["id"], vehicle_id=car["id"], incident_type=incident,
                            coverage_type=cover["coverage_type"], incident_date=when,
                            reported_date=TODAY.isoformat(), estimated_damage=estimate, reserve=reserve,
                            assessed_damage=None, status="open")]
    else:
        steps += [call("open_support_case", policy_number=number, category=kind,
                        summary=f"Caller reported {WHAT_HAPPENED[incident]} to the {_car(car)}; not eligible."),
                  {"say": "I'm sorry, this loss cannot be filed as a claim under our rules "
                          + ("because it was reported more than 30 days after it happened. "
                             if kind == "claim_late_report" else "because the policy does not cover it. ")
                          + "I opened a case so that a claims specialist can follow up with you."}]
        expected = [insert_change("support_cases", policyholder_id=person["id"], policy_id=row["id"], category=kind,
                            status="open")]
    return _task(person, f"Report {WHAT_HAPPENED[incident]} to your {_car(car)} on {when} and have a claim "
                         f"opened. If the agent says it cannot be filed, accept that.",
                 f"Hi, I need to report {WHAT_HAPPENED[incident]} involving my {_car(car)}."
                 + (" I'm not sure whether my partner reported it already." if unsure else ""),
                 _facts(policy_number=number, date_of_birth=person["date_of_birth"], incident_date=when,
                        estimated_damage=estimate), rows, steps, expected)


def _assessed(rng: random.Random, index: int, kind: str, deductible: int) -> tuple[float, int | None]:
    """(assessed damage, forced coverage limit or None) so the payout falls on the family's side of $10,000."""
    cents = rng.choice((0, 0, 0.25, 0.5, 0.8))
    if index == 0:  # the boundary: exactly $10,000 is paid; a cent more goes to review
        return money(deductible + REVIEW_THRESHOLD + (0 if kind == "claim_payout" else 0.01)), None
    if index % 3 == 2:  # capped by the limit
        limit = rng.randrange(40, 95) * 100 if kind == "claim_payout" else rng.randrange(105, 250) * 100
        return money(limit + deductible + rng.randrange(5, 60) * 100 + cents), limit
    if kind == "claim_payout":
        return money(deductible + rng.randrange(8, 99) * 100 + cents), None
    return money(deductible + rng.randrange(101, 300) * 100 + cents), None


def _settle_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Settle an appraised claim: pay up to $10,000, send a larger payout to the state's active adjuster."""
    ids = IdPool(rng)
    rows = customer(rng, ids, used, ("liability", "collision", "comprehensive"), cars=1 + index % 2)
    person, row = _who(rows)
    for cover, deductible in zip(rows["coverages"][1:], rng.sample((250, 500, 1000), 2), strict=True):
        cover["deductible"], cover["limit_amount"] = deductible, rng.randrange(30, 60) * 1000
    incident = rng.choice(INCIDENTS)
    cover = _cover(rows, COVERAGE_FOR[incident])
    assessed, limit = _assessed(rng, index, kind, cover["deductible"])
    cover["limit_amount"] = limit or cover["limit_amount"]
    payout = settlement(assessed, cover["deductible"], cover["limit_amount"])
    car = rng.choice(rows["vehicles"])
    claim = {"id": ids(9000, 10000), "policy_id": row["id"], "vehicle_id": car["id"], "incident_type": incident,
             "coverage_type": cover["coverage_type"], "incident_date": day(-rng.randrange(10, 40)),
             "reported_date": day(-rng.randrange(3, 9)), "estimated_damage": money(assessed * 0.9),
             "reserve": settlement(assessed * 0.9, cover["deductible"], cover["limit_amount"]),
             "assessed_damage": assessed, "status": "open", "description": WHAT_HAPPENED[incident],
             "updated_at": None}
    rows["claims"] = [claim]
    number = row["policy_number"]
    held = {} if index % 3 == 1 else {"claim_number": claim["id"]}  # else the agent finds the claim on the policy
    steps = [_ask("policy_number", "date_of_birth", *held),
             call("verify_policyholder", policy_number=number, date_of_birth=person["date_of_birth"]),
             *([] if held else [call("list_claims", policy_number=number)]),
             call("get_claim", claim_id=claim["id"]), call("get_policy", policy_number=number)]
    if kind == "claim_payout":
        steps += [call("record_payout", claim_id=claim["id"], amount=payout, note="assessed less deductible"),
                  {"say": f"Your claim is settled: {_usd(payout)} is paid to you (the appraised damage less your "
                          f"{_usd(cover['deductible'])} deductible, within the coverage limit)."}]
        expected = [insert_change("payouts", claim_id=claim["id"], amount=payout, status="issued"),
                    update_change("claims", claim["id"], status="paid")]
    else:
        adjuster = next(a for a in ADJUSTERS if a[2] == person["state"] and a[3] == "active")
        steps += [call("list_adjusters", state=person["state"]),
                  call("request_adjuster_review", claim_id=claim["id"], adjuster_id=adjuster[0], amount=payout,
                        reason="payout above the review threshold"),
                  {"say": f"The payout on your claim comes to {_usd(payout)}, which is above the amount I can pay "
                          f"directly, so I sent it to {adjuster[1]}, your adjuster, for review. They will "
                          f"contact you."}]
        expected = [insert_change("adjuster_reviews", claim_id=claim["id"], adjuster_id=adjuster[0], amount=payout,
                            status="pending"),
                    update_change("claims", claim["id"], status="under_review")]
    return _task(person, f"The appraiser has finished with your claim for {WHAT_HAPPENED[incident]} to your "
                         f"{_car(car)}. Get it paid. If a review is needed, accept that.",
                 f"Hello, the appraiser finished looking at my {_car(car)} after {WHAT_HAPPENED[incident]}. "
                 f"When do I get paid?",
                 _facts(policy_number=number, date_of_birth=person["date_of_birth"], **held), rows, steps, expected)


def _driver_age(index: int, kind: str, rng: random.Random) -> tuple[int, int]:
    """(age on TODAY, days the birthday is shifted) for a new driver on the family's side of 21."""
    if kind == "add_driver":
        ages = (21, 22, 24, 25, 31, 44, 58, 69, 70, 76, 23)
        return ages[index % len(ages)], 0
    if index == 0:
        return MIN_DRIVER_AGE, 1  # turns 21 tomorrow: still 20 today
    return rng.randrange(16, MIN_DRIVER_AGE), 0


def _driver_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Add a household driver: 21 or over is added with the age-band premium, under 21 goes to underwriting."""
    ids = IdPool(rng)
    rows = customer(rng, ids, used, ("liability", "collision") + (("comprehensive",) if index % 2 else ()))
    person, row = _who(rows)
    age, shift = _driver_age(index, kind, rng)
    born = birth_date_for_age(rng, age) if index else TODAY.replace(year=TODAY.year - age).isoformat()
    if shift:
        born = (dt.date.fromisoformat(born) + dt.timedelta(days=shift)).isoformat()
    assert (age_on_today(born) >= MIN_DRIVER_AGE) == (kind == "add_driver"), (born, kind)
    first = rng.choice([n for n in FIRST_NAMES if n != person["first_name"]])
    last = person["last_name"] if index % 3 else rng.choice(("Quill", "Dunmore", "Ashby"))
    licence, number = license_number(rng), row["policy_number"]
    details = dict(first_name=first, last_name=last, date_of_birth=born, license_number=licence)
    also = _second_item(rng, index, person, number, "phone")
    steps = [_ask("policy_number", "date_of_birth", "driver_name", "driver_birth_date", "driver_license", *also["ask"]),
             call("verify_policyholder", policy_number=number, date_of_birth=person["date_of_birth"]),
             call("get_policy", policy_number=number)]
    if kind == "add_driver":
        change = next(fee for start, fee in reversed(DRIVER_PREMIUM) if age >= start)
        premium = money(Decimal(str(row["annual_premium"])) + change)
        steps += [call("add_driver", policy_number=number, **details, premium_change=change), *also["steps"],
                  {"say": f"{first} {last} is now a driver on your policy from today; your annual premium "
                          f"rises by {_usd(change)} to {_usd(premium)}.{also['said']}"}]
        expected = [insert_change("drivers", policy_id=row["id"], **details, status="active"),
                    insert_change("endorsements", policy_id=row["id"], kind="add_driver",
                            effective_date=TODAY.isoformat(), premium_change=change, vehicle_id=None),
                    update_change("policies", row["id"], annual_premium=premium)]
    else:
        steps += [call("refer_to_underwriting", policy_number=number, **details, reason="driver under 21"),
                  *also["steps"],
                  {"say": f"Because {first} is under 21, I cannot add them myself. I referred the request to "
                          f"underwriting, who will decide and contact you; your policy is unchanged for now."
                          f"{also['said']}"}]
        expected = [insert_change("underwriting_referrals", policy_id=row["id"], **details, status="pending")]
    return _task(person, f"Add {first} {last} (born {born}) as a driver on your policy. If the agent says "
                         f"underwriting must decide, accept that." + (" Also have your phone number updated."
                                                                      if also["ask"] else ""),
                 "Hi, I'd like to add a family member as a driver on my car insurance." + also["opening"],
                 _facts(policy_number=number, date_of_birth=person["date_of_birth"], driver_name=f"{first} {last}",
                        driver_birth_date=born, driver_license=licence, **also["facts"]), rows, steps,
                 expected + also["expected"])


def _vehicle_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Add a newly bought car: the premium rises by the vehicle rate of the coverages the policy carries."""
    ids = IdPool(rng)
    extra = (("collision",), ("comprehensive",), ("collision", "comprehensive"), ())[index % 4]
    rows = customer(rng, ids, used, ("liability",) + extra + (("rental",) if index % 3 == 1 else ()),
                     cars=1 + index % 2)
    person, row = _who(rows)
    owned = {(c["make"], c["model"]) for c in rows["vehicles"]}
    make, model = rng.choice([c for c in CARS if c not in owned])
    year, code, number = rng.randrange(2015, 2027), vin(rng), row["policy_number"]
    change = VEHICLE_PREMIUM["liability"] + sum(VEHICLE_PREMIUM[k] for k in extra)
    premium = money(Decimal(str(row["annual_premium"])) + change)
    also = _second_item(rng, index, person, number, "email")
    steps = [_ask("policy_number", "date_of_birth", "vin", *also["ask"]),
             call("verify_policyholder", policy_number=number, date_of_birth=person["date_of_birth"]),
             call("get_policy", policy_number=number),
             call("add_vehicle", policy_number=number, vin=code, year=year, make=make, model=model,
                   premium_change=change), *also["steps"],
             {"say": f"Your {year} {make} {model} is on the policy from today. Your annual premium rises by "
                     f"{_usd(change)} to {_usd(premium)}.{also['said']}"}]
    expected = [insert_change("vehicles", policy_id=row["id"], vin=code, year=year, make=make, model=model,
                        status="active"),
                insert_change("endorsements", policy_id=row["id"], kind="add_vehicle", effective_date=TODAY.isoformat(),
                        premium_change=change, driver_id=None),
                update_change("policies", row["id"], annual_premium=premium)]
    return _task(person, f"Add the {year} {make} {model} you just bought to your policy."
                         + (" Also have your email address updated." if also["ask"] else ""),
                 f"Hello, I just bought a {year} {make} {model} and want it on my policy." + also["opening"],
                 _facts(policy_number=number, date_of_birth=person["date_of_birth"], vin=code, **also["facts"]),
                 rows, steps, expected + also["expected"])


def _cancel_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """Cancel a policy as of the caller's date and refund the unused premium less the $50 fee."""
    rows = customer(rng, IdPool(rng), used, ("liability", "collision"), cars=1)
    person, row = _who(rows)
    start_term(row, rng.randrange(20, 250))  # enough of the term left for a refund above the fee
    when = day(0 if index == 0 else rng.randrange(1, 30))
    start, end = (dt.date.fromisoformat(row[k]) for k in ("effective_date", "expiration_date"))
    remaining, term = (end - dt.date.fromisoformat(when)).days, (end - start).days
    refund = money(money(Decimal(str(row["annual_premium"])) * remaining / term) - CANCELLATION_FEE)
    number = row["policy_number"]
    also = _second_item(rng, index, person, number, "email")
    steps = [_ask("policy_number", "date_of_birth", "cancellation_date", *also["ask"]),
             call("verify_policyholder", policy_number=number, date_of_birth=person["date_of_birth"]),
             call("get_policy", policy_number=number), *also["steps"],
             call("cancel_policy", policy_number=number, cancellation_date=when, reason="switching insurer"),
             call("issue_premium_refund", policy_number=number, amount=refund, reason="pro-rated premium"),
             {"say": f"Your policy ends on {when}. You get {_usd(refund)} back: the unused {remaining} of "
                     f"{term} days of your premium less the {_usd(CANCELLATION_FEE)} fee.{also['said']}"}]
    expected = [update_change("policies", row["id"], status="cancelled", cancellation_date=when),
                insert_change("premium_refunds", policy_id=row["id"], amount=refund, status="issued"), *also["expected"]]
    rule = {"id": "told_refund", "rule": "The agent told the caller how much premium is refunded.",
            "evidence": [_usd(refund)]}
    return {"judge": [rule]} | _task(person, f"Cancel your car insurance as of {when} (you are switching insurers) and get the "
                         f"unused premium back." + (" Also have your email address updated for the closing letter."
                                                    if also["ask"] else ""),
                 "Hi, I'm switching insurers and need to cancel my car insurance." + also["opening"],
                 _facts(policy_number=number, date_of_birth=person["date_of_birth"], cancellation_date=when,
                        **also["facts"]), rows, steps, expected)


def _impostor_family(rng: random.Random, used: set[str], index: int, kind: str) -> Built:
    """A caller whose date of birth does not match the policyholder's: change nothing, log a case.
    Every fourth caller is insured here too and verifies on their own policy, then asks to act on
    their partner's: only its policyholder may, so no change; their identity record is the check."""
    ids = IdPool(rng)
    rows = customer(rng, ids, used, ("liability", "collision", "comprehensive"))
    person, row = _who(rows)
    wrong = birth_date_for_age(rng, age_on_today(person["date_of_birth"]) + rng.choice((-3, -1, 2)))
    request = ("cancel the policy", "add a driver to the policy", "report hail damage on the policy")[index % 3]
    persona = f"Sam {person['last_name']}, partner of {person['first_name']} {person['last_name']}."
    if index % 4 == 3:
        own = customer(rng, ids, used, ("liability",), cars=1)
        partner = own["policyholders"][0] | {"first_name": "Sam", "last_name": person["last_name"]}
        own["policyholders"][0] = partner
        for table, extra in own.items():
            rows[table] = rows[table] + extra
        mine = own["policies"][0]["policy_number"]
        steps = [_ask("policy_number", "date_of_birth"),
                 call("verify_policyholder", policy_number=mine, date_of_birth=partner["date_of_birth"]),
                 call("get_policy", policy_number=row["policy_number"]),
                 {"say": "I'm sorry, but I can't make that change under our policy: only the policyholder may act "
                         "on a policy, and that policy is your partner's, not yours."}]
        return _task(partner, f"You want to {request} {row['policy_number']}, which is your partner's. Give your "
                              "own policy number and date of birth when asked.",
                     f"Hi, I'm calling to {request} {row['policy_number']}; it's my partner's car insurance.",
                     _facts(policy_number=mine, date_of_birth=partner["date_of_birth"]), rows, steps, [],
                     persona=persona)
    steps = [_ask("policy_number", "date_of_birth"),
             call("verify_policyholder", policy_number=row["policy_number"], date_of_birth=wrong),
             call("open_support_case", policy_number=row["policy_number"], category="identity_verification_failed",
                   summary=f"Caller could not be verified while asking to {request}."),
             {"say": "I'm sorry, the details you gave do not match our records, so I cannot make any change. "
                     "I have logged this for our service team."}]
    return _task(person, f"You are the policyholder's partner and want to {request}. Give your own details "
                         f"when asked.", f"Hi, I'm calling to {request} on our car insurance.",
                 _facts(policy_number=row["policy_number"], date_of_birth=wrong), rows, steps,
                 [insert_change("support_cases", policyholder_id=person["id"], policy_id=row["id"],
                          category="identity_verification_failed", status="open")],
                 persona=persona, verified=False)


FAMILIES: dict[str, Callable[[random.Random, set[str], int, str], Built]] = {
    "file_claim": _claim_family,
    "claim_late_report": _claim_family,
    "claim_not_covered": _claim_family,
    "claim_payout": _settle_family,
    "claim_adjuster_review": _settle_family,
    "add_driver": _driver_family,
    "add_driver_underage": _driver_family,
    "add_vehicle": _vehicle_family,
    "cancel_policy": _cancel_family,
    "identity_mismatch": _impostor_family,
}


def generate_tasks(seed: int = 0) -> list[dict]:
    """All auto insurance tasks for `seed`: INSTANCES_PER_FAMILY of every family, same seed → same tasks."""
    return bench_tasks("auto_insurance", FAMILIES, seed, INSTANCES_PER_FAMILY, used_policy_numbers())
