"""Auto insurance seed: the deterministic base rows every task starts from, the row builders
tasks use to add their own records, and the business constants that mirror policy.md.

Base ids live below the task ranges (policyholders and policies < 2000, vehicles < 5000,
drivers < 6000, coverages < 7000, claims < 9000), so a task's own rows never collide with the
distractor data. Every date is relative to TODAY, the system date policy.md states.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from typing import Any

from tbx.domains.kit import IdPool

Row = dict[str, Any]

TODAY = dt.date(2026, 6, 15)
FILING_WINDOW_DAYS, REVIEW_THRESHOLD, CANCELLATION_FEE, MIN_DRIVER_AGE = 30, 10_000, 50, 21
DRIVER_PREMIUM = ((21, 460), (25, 240), (70, 310))  # (from age, annual premium change): policy.md §4
VEHICLE_PREMIUM = {"liability": 300, "collision": 220, "comprehensive": 90}  # policy.md §5
COVERAGE_FOR = {"collision": "collision", "hail": "comprehensive", "theft": "comprehensive",
                "vandalism": "comprehensive", "flood": "comprehensive", "fire": "comprehensive",
                "animal_strike": "comprehensive", "glass": "comprehensive"}
STATES = ("MA", "NY", "CA", "TX", "IL", "WA", "GA", "CO")
CITIES = {"MA": "Worcester", "NY": "Albany", "CA": "Sacramento", "TX": "Austin", "IL": "Springfield",
          "WA": "Tacoma", "GA": "Savannah", "CO": "Boulder"}
ADJUSTERS = (  # id, name, state, status: one active adjuster per state, some colleagues on leave
    (1, "Renee Castillo", "MA", "on_leave"), (2, "Owen Patel", "MA", "active"),
    (3, "Harriet Lowe", "NY", "active"), (4, "Gideon Marsh", "CA", "on_leave"),
    (5, "Paloma Reyes", "CA", "active"), (6, "Trent Akers", "TX", "active"),
    (7, "Simone Adeyemi", "IL", "active"), (8, "Bjorn Halvorsen", "WA", "on_leave"),
    (9, "Keiko Mori", "WA", "active"), (10, "Darnell Price", "GA", "active"),
    (11, "Ivy Lundgren", "CO", "on_leave"), (12, "Marco Bellini", "CO", "active"),
)
CARS = (("Toyota", "Camry"), ("Honda", "Civic"), ("Subaru", "Outback"), ("Ford", "F-150"), ("Mazda", "CX-5"),
        ("Tesla", "Model 3"), ("Hyundai", "Tucson"), ("Chevrolet", "Equinox"), ("Kia", "Telluride"),
        ("Volkswagen", "Jetta"), ("BMW", "X3"), ("Nissan", "Rogue"))
FIRST_NAMES = ("Amelia", "Jorge", "Nadia", "Theo", "Imani", "Pavel", "Lucia", "Elliot", "Sana", "Callum",
               "Rosa", "Dmitri", "Wren", "Hector", "Ayla", "Quentin", "Mira", "Tobias", "Leona", "Rafael",
               "Greta", "Idris", "Noor", "Silas", "Beatriz", "Anton", "Freya", "Malik", "Celine", "Oskar")
LAST_NAMES = ("Whitaker", "Ferreira", "Okonkwo", "Lindgren", "Castellanos", "Abernathy", "Mbeki", "Sorensen",
              "Delacroix", "Yamada", "Kowalczyk", "Hargrove", "Esposito", "Nakagawa", "Oyelaran", "Brandt",
              "Villanueva", "Thorne", "Rasmussen", "Achebe", "Montoya", "Pellegrini", "Halloran", "Ibarra")
VIN_ALPHABET = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
CENT = Decimal("0.01")


def day(offset: int) -> str:
    """TODAY shifted by `offset` days, as YYYY-MM-DD."""
    return (TODAY + dt.timedelta(days=offset)).isoformat()


def age_on_today(date_of_birth: str) -> int:
    born = dt.date.fromisoformat(date_of_birth)
    return TODAY.year - born.year - ((TODAY.month, TODAY.day) < (born.month, born.day))


def birth_date_for_age(rng: random.Random, age: int) -> str:
    """A date of birth that makes someone exactly `age` on TODAY."""
    latest = TODAY.replace(year=TODAY.year - age)
    return (latest - dt.timedelta(days=rng.randrange(365))).isoformat()


def money(value: Decimal | int | float) -> float:
    """Dollars rounded half up to the cent, as the float a task file carries."""
    return float(Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP))


def settlement(damage: float, deductible: float, limit: float) -> float:
    """Payout of a claim: damage − deductible, capped by the coverage limit (policy.md §3)."""
    return money(max(Decimal(0), min(Decimal(str(damage)) - Decimal(str(deductible)), Decimal(str(limit)))))


def new_policy_number(rng: random.Random, used: set[str]) -> str:
    while True:
        number = f"PA-{rng.randrange(100000, 1000000)}"
        if number not in used:
            used.add(number)
            return number


def vin(rng: random.Random) -> str:
    return "".join(rng.choice(VIN_ALPHABET) for _ in range(17))


def holder(rng: random.Random, holder_id: int, state: str | None = None) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    state = state or rng.choice(STATES)
    return {
        "id": holder_id, "first_name": first, "last_name": last,
        "date_of_birth": birth_date_for_age(rng, rng.randrange(26, 75)),
        "email": f"{first.lower()}.{last.lower()}{holder_id % 100}@mail.example",
        "phone": f"+1-555-{rng.randrange(100, 1000)}-{rng.randrange(10000):04d}",
        "street": f"{rng.randrange(10, 990)} {rng.choice(('Oak', 'Maple', 'Cedar', 'Elm', 'Birch'))} Street",
        "city": CITIES[state], "state": state, "updated_at": None,
    }


def policy(rng: random.Random, policy_id: int, number: str, holder_id: int, status: str = "active") -> Row:
    start = TODAY - dt.timedelta(days=rng.randrange(20, 330))
    return {
        "id": policy_id, "policy_number": number, "policyholder_id": holder_id, "status": status,
        "effective_date": start.isoformat(), "expiration_date": start.replace(year=start.year + 1).isoformat(),
        "annual_premium": rng.randrange(90, 360) * 5 + rng.choice((0, 0.5)), "cancellation_date": None,
        "updated_at": None,
    }


def coverage(coverage_id: int, policy_id: int, kind: str, limit: int, deductible: int) -> Row:
    return {"id": coverage_id, "policy_id": policy_id, "coverage_type": kind, "limit_amount": limit,
            "deductible": deductible}


def coverage_set(rng: random.Random, next_id: Callable[[], int], policy_id: int,
                 kinds: tuple[str, ...]) -> list[Row]:
    """Coverage rows for `kinds`; liability and rental limits are fixed, physical damage varies."""
    rows = []
    for kind in kinds:
        if kind == "liability":
            limit, deductible = 100_000, 0
        elif kind == "rental":
            limit, deductible = 1_200, 0
        else:
            limit, deductible = rng.randrange(12, 45) * 1000, rng.choice((250, 500, 1000))
        rows.append(coverage(next_id(), policy_id, kind, limit, deductible))
    return rows


def vehicle(rng: random.Random, vehicle_id: int, policy_id: int, status: str = "active") -> Row:
    make, model = rng.choice(CARS)
    return {"id": vehicle_id, "policy_id": policy_id, "vin": vin(rng), "year": rng.randrange(2012, 2026),
            "make": make, "model": model, "status": status}


def driver(rng: random.Random, driver_id: int, policy_id: int, person: Row) -> Row:
    return {"id": driver_id, "policy_id": policy_id, "first_name": person["first_name"],
            "last_name": person["last_name"], "date_of_birth": person["date_of_birth"],
            "license_number": license_number(rng), "status": "active"}


def license_number(rng: random.Random) -> str:
    return f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.randrange(10**7, 10**8)}"


def customer(rng: random.Random, ids: IdPool, used: set[str], kinds: tuple[str, ...], cars: int = 2) -> dict:
    """A policyholder with an active policy, its coverages, `cars` vehicles of distinct models and one driver."""
    person = holder(rng, ids(2000, 5000))
    row = policy(rng, ids(2000, 5000), new_policy_number(rng, used), person["id"])
    models = rng.sample(CARS, cars)
    fleet = [vehicle(rng, ids(5000, 6000), row["id"]) | {"make": m, "model": n} for m, n in models]
    return {"policyholders": [person], "policies": [row], "vehicles": fleet,
            "coverages": coverage_set(rng, lambda: ids(7000, 9000), row["id"], kinds),
            "drivers": [driver(rng, ids(6000, 7000), row["id"], person)]}


def start_term(row: Row, days_ago: int) -> None:
    """Move a policy's one-year term to begin `days_ago` days before TODAY."""
    start = TODAY - dt.timedelta(days=days_ago)
    row["effective_date"], row["expiration_date"] = start.isoformat(), start.replace(year=start.year + 1).isoformat()


def _base_policy(rng: random.Random, index: int, used: set[str], rows: dict[str, list[Row]]) -> None:
    counters = {"coverages": len(rows["coverages"]), "vehicles": len(rows["vehicles"])}
    person = holder(rng, index, STATES[index % len(STATES)])
    status = "cancelled" if index % 9 == 0 else "active"
    row = policy(rng, index, new_policy_number(rng, used), index, status)
    if status == "cancelled":
        row["cancellation_date"] = day(-rng.randrange(5, 60))
    kinds = ("liability", "collision", "comprehensive", "rental")[: rng.randrange(1, 5)]

    def next_coverage() -> int:
        counters["coverages"] += 1
        return counters["coverages"]

    rows["policyholders"].append(person)
    rows["policies"].append(row)
    rows["coverages"] += coverage_set(rng, next_coverage, index, kinds)
    for _ in range(rng.randrange(1, 3)):
        counters["vehicles"] += 1
        rows["vehicles"].append(vehicle(rng, counters["vehicles"], index))
    rows["drivers"].append(driver(rng, len(rows["drivers"]) + 1, index, person))


def _base_claims(rng: random.Random, rows: dict[str, list[Row]]) -> None:
    statuses = ("open", "paid", "paid", "closed", "under_review")
    for claim_id in range(1, 31):
        car = rng.choice(rows["vehicles"])
        kinds = [c for c in rows["coverages"] if c["policy_id"] == car["policy_id"]
                 and c["coverage_type"] in ("collision", "comprehensive")]
        if not kinds:
            continue
        cover = rng.choice(kinds)
        incident = rng.choice([t for t, c in COVERAGE_FOR.items() if c == cover["coverage_type"]])
        damage = rng.randrange(15, 200) * 100
        status = statuses[claim_id % len(statuses)]
        payout = settlement(damage, cover["deductible"], cover["limit_amount"])
        rows["claims"].append({
            "id": claim_id, "policy_id": car["policy_id"], "vehicle_id": car["id"], "incident_type": incident,
            "coverage_type": cover["coverage_type"], "incident_date": day(-rng.randrange(40, 400)),
            "reported_date": day(-rng.randrange(20, 39)), "estimated_damage": damage, "reserve": payout,
            "assessed_damage": damage if status != "open" else None, "status": status,
            "description": f"{incident.replace('_', ' ')} damage", "updated_at": None})
        if status == "paid":
            rows["payouts"].append({"id": len(rows["payouts"]) + 1, "claim_id": claim_id, "amount": payout,
                                    "status": "issued", "note": "settled"})
        if status == "under_review":
            adjuster = next(a for a in ADJUSTERS if a[3] == "active")
            rows["adjuster_reviews"].append({"id": len(rows["adjuster_reviews"]) + 1, "claim_id": claim_id,
                                             "adjuster_id": adjuster[0], "amount": payout, "status": "pending",
                                             "reason": "above the review threshold"})


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260615)
    used: set[str] = set()
    rows: dict[str, list[Row]] = {t: [] for t in (
        "policyholders", "policies", "coverages", "vehicles", "drivers", "claims", "payouts",
        "adjuster_reviews", "endorsements", "underwriting_referrals", "premium_refunds", "support_cases")}
    rows["adjusters"] = [{"id": i, "name": n, "state": s, "status": st} for i, n, s, st in ADJUSTERS]
    for index in range(1, 41):
        _base_policy(rng, index, used, rows)
    _base_claims(rng, rows)
    for policy_row in rows["policies"]:
        if policy_row["status"] == "cancelled":
            rows["premium_refunds"].append({"id": len(rows["premium_refunds"]) + 1, "policy_id": policy_row["id"],
                                            "amount": money(policy_row["annual_premium"] / 3),
                                            "status": "issued", "reason": "pro-rated cancellation refund"})
    rows["endorsements"].append({"id": 1, "policy_id": 3, "kind": "add_driver", "driver_id": 3,
                                 "effective_date": day(-90), "premium_change": 240, "vehicle_id": None})
    rows["underwriting_referrals"].append({"id": 1, "policy_id": 5, "first_name": "Milo", "last_name": "Grant",
                                           "date_of_birth": birth_date_for_age(rng, 17),
                                           "license_number": license_number(rng), "status": "pending",
                                           "reason": "driver under 21"})
    rows["support_cases"].append({"id": 1, "policyholder_id": 7, "policy_id": 7, "category": "other",
                                  "status": "open", "summary": "Asked for a proof-of-insurance card by mail."})
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every auto insurance task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}


def used_policy_numbers() -> set[str]:
    return {p["policy_number"] for p in _base()["policies"]}
