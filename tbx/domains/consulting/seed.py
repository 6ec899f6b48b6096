"""Consulting seed: the deterministic base rows every task starts from, the row builders tasks use
to add their own records, and the business constants that mirror policy.md.

Base ids live below the task ranges (clients < 100, consultants < 1000, engagements < 2000,
purchase orders < 3000, assignments < 4000, time entries < 5000, invoices < 7000, invoice lines
< 8000, expenses < 9000), so a task's own rows never collide with the distractor data.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from typing import Any

from tbx.domains.kit import IdPool

Row = dict[str, Any]

TODAY = dt.date(2026, 5, 20)
CREDIT_APPROVAL_THRESHOLD, VOLUME_THRESHOLD, VOLUME_POINTS = 2_000, 50_000, 2
TIER_DISCOUNT = {"standard": 0, "preferred": 5, "strategic": 10}  # percent: policy.md §3
LEVELS = ("analyst", "consultant", "senior_consultant", "manager", "partner")
RATES = {2025: (150, 205, 255, 315, 440), 2026: (160, 215, 270, 330, 460)}  # by LEVELS
PER_DIEM = {"meals": 75, "lodging": 250}  # high-cost cities: HIGH_COST_PER_DIEM
HIGH_COST_PER_DIEM = {"meals": 95, "lodging": 350}
HIGH_COST_CITIES = ("New York", "San Francisco", "Boston", "London")
CITIES = HIGH_COST_CITIES + ("Columbus", "Denver", "Charlotte", "Phoenix", "Minneapolis")
PERIODS = (  # semi-monthly timesheet periods of 2026; the second half of April is still open
    ("01-01", "01-15"), ("01-16", "01-31"), ("02-01", "02-15"), ("02-16", "02-28"), ("03-01", "03-15"),
    ("03-16", "03-31"), ("04-01", "04-15"), ("04-16", "04-30"), ("05-01", "05-15"), ("05-16", "05-31"))
OPEN_PERIODS = (8, 9, 10)
COMPANIES = ("Northwind Logistics", "Bluefin Health", "Cobalt Energy", "Juniper Foods", "Meridian Bank",
             "Orchard Retail", "Pinnacle Pharma", "Quarry Materials", "Redwood Insurance", "Summit Telecom",
             "Tidewater Ports", "Vantage Media", "Willow Education", "Atlas Aerospace", "Beacon Utilities",
             "Cascade Software", "Delta Agritech", "Evergreen Hotels", "Fairway Sports", "Granite Capital")
TASK_COMPANIES = ("Harbor Freight Lines", "Ironwood Mining", "Kestrel Airlines", "Lumen Optics", "Mosaic Foods",
                  "Nimbus Cloud", "Osprey Shipping", "Prairie Grain", "Riverbend Health", "Sterling Chemicals",
                  "Topaz Jewelers", "Upland Water", "Verdant Farms", "Westgate Realty", "Zephyr Wind")
PROJECTS = ("supply chain redesign", "ERP migration", "pricing strategy", "cost transformation",
            "data platform build", "customer journey review", "due diligence", "operating model design")
FIRST_NAMES = ("Priya", "Marcus", "Elena", "Tomas", "Aisha", "Daniel", "Mei", "Jonas", "Sofia", "Kwame",
               "Laura", "Ravi", "Hannah", "Diego", "Yuki", "Olivia", "Samir", "Grace", "Mateo", "Ingrid")
BASE_LAST_NAMES = ("Shah", "Okafor", "Lindqvist", "Novak", "Haddad", "Brennan", "Tanaka", "Weber", "Rossi",
                   "Mensah", "Fischer", "Iyer", "Kowalski", "Alvarez", "Sato", "Murphy", "Khan", "Dubois")
TASK_LAST_NAMES = ("Ainsworth", "Barlow", "Cordero", "Dunleavy", "Eastman", "Fairbanks", "Galloway",
                   "Holloway", "Ingram", "Jessup", "Kincaid", "Lockhart", "Merriweather", "Northcott",
                   "Oakley", "Prescott", "Quimby", "Radcliffe", "Stanhope", "Thackeray", "Underwood",
                   "Vickery", "Whitmore", "Yardley")
CODE_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"
CENT = Decimal("0.01")


def money(value: Decimal | int | float) -> float:
    """Dollars rounded half up to the cent, as the float a task file carries."""
    return float(Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP))


def current_rate(level: str) -> int:
    """The rate-card rate in force today (the 2026 card)."""
    return RATES[2026][LEVELS.index(level)]


def period_rows() -> list[Row]:
    return [{"id": i, "start_date": f"2026-{s}", "end_date": f"2026-{e}",
             "status": "open" if i in OPEN_PERIODS else "closed"} for i, (s, e) in enumerate(PERIODS, start=1)]


def period_of(work_date: str) -> int:
    return next(p["id"] for p in period_rows() if p["start_date"] <= work_date <= p["end_date"])


@cache
def period_weekdays(period_id: int) -> tuple[str, ...]:
    """The weekdays of a timesheet period up to TODAY."""
    period = period_rows()[period_id - 1]
    start, end = dt.date.fromisoformat(period["start_date"]), dt.date.fromisoformat(period["end_date"])
    days = [start + dt.timedelta(days=k) for k in range((end - start).days + 1)]
    return tuple(d.isoformat() for d in days if d.weekday() < 5 and d <= TODAY)


def workday(rng: random.Random, period_id: int) -> str:
    """A weekday inside a timesheet period, never after TODAY."""
    return rng.choice(period_weekdays(period_id))


def unique_code(rng: random.Random, used: set[str], make) -> str:
    while True:
        code = make(rng)
        if code not in used:
            used.add(code)
            return code


def client(rng: random.Random, client_id: int, used: set[str], tier: str, name: str | None = None) -> Row:
    name = name or rng.choice(COMPANIES)
    prefix = "".join(w[0] for w in name.split())[:2] + "".join(rng.choice(CODE_LETTERS) for _ in range(2))
    contact_first, contact_last = rng.choice(FIRST_NAMES), rng.choice(TASK_LAST_NAMES + BASE_LAST_NAMES)
    domain = name.split()[0].lower() + ".example"
    return {"id": client_id, "client_code": unique_code(rng, used, lambda r: f"{prefix}-{r.randrange(100, 1000)}"),
            "name": name, "tier": tier, "billing_contact_name": f"{contact_first} {contact_last}",
            "billing_contact_email": f"{contact_first[0].lower()}.{contact_last.lower()}@{domain}",
            "updated_at": None}


def consultant(rng: random.Random, consultant_id: int, level: str, last_names=BASE_LAST_NAMES) -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(last_names)
    return {"id": consultant_id, "first_name": first, "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{consultant_id % 1000}@halden.example", "level": level,
            "status": "active"}


def engagement(rng: random.Random, engagement_id: int, used: set[str], client_row: Row, partner_id: int) -> Row:
    return {"id": engagement_id, "code": unique_code(rng, used, lambda r: f"ENG-{r.randrange(1000, 10000)}"),
            "client_id": client_row["id"], "name": f"{client_row['name']} {rng.choice(PROJECTS)}",
            "status": "active", "partner_id": partner_id, "updated_at": None}


def purchase_order(rng: random.Random, po_id: int, used: set[str], engagement_id: int, cap: float,
                   committed: float) -> Row:
    return {"id": po_id, "po_number": unique_code(rng, used, lambda r: f"PO-{r.randrange(10000, 100000)}"),
            "engagement_id": engagement_id, "budget_cap": cap, "committed": committed, "status": "open",
            "updated_at": None}


def invoice(invoice_id: int, number: str, engagement_row: Row, status: str, lines: list[Row],
            discount_percent: float) -> Row:
    subtotal = sum(Decimal(str(line["amount"])) for line in lines)
    discount = money(subtotal * Decimal(str(discount_percent)) / 100)
    return {"id": invoice_id, "invoice_number": number, "client_id": engagement_row["client_id"],
            "engagement_id": engagement_row["id"], "status": status,
            "issue_date": None if status == "draft" else "2026-05-05", "subtotal": money(subtotal),
            "discount_percent": discount_percent, "discount_amount": discount, "credits": 0,
            "total": money(subtotal - Decimal(str(discount))), "updated_at": None}


def invoice_line(line_id: int, invoice_id: int, person: Row, hours: float, rate: float) -> Row:
    return {"id": line_id, "invoice_id": invoice_id, "consultant_id": person["id"],
            "description": f"{person['first_name']} {person['last_name']}, {person['level'].replace('_', ' ')}",
            "hours": hours, "rate": rate, "amount": money(Decimal(str(hours)) * Decimal(str(rate)))}


def expense(expense_id: int, person_id: int, engagement_id: int, category: str, city: str, date: str,
            amount: float, receipt: int, status: str = "submitted") -> Row:
    return {"id": expense_id, "consultant_id": person_id, "engagement_id": engagement_id, "category": category,
            "city": city, "expense_date": date, "amount": amount, "receipt_attached": receipt, "status": status,
            "decision_note": None, "updated_at": None}


def invoice_number(rng: random.Random, used: set[str]) -> str:
    return unique_code(rng, used, lambda r: f"INV-26-{r.randrange(1000, 10000)}")


class Account:
    """One task's rows: a client with a lead partner, an engagement and its PO, plus fresh consultants,
    staffing, invoices and time entries on demand (ids from the task ranges, days never reused)."""

    def __init__(self, rng: random.Random, used: set[str], tier: str | None = None):
        self.rng, self.used, self.ids = rng, used, IdPool(rng)
        self.names, self.days = rng.sample(TASK_LAST_NAMES, 8), set()
        self.client = client(rng, self.ids(100, 1000), used, tier or rng.choice(tuple(TIER_DISCOUNT)),
                             rng.choice(TASK_COMPANIES))
        self.rows: dict[str, list[Row]] = {"clients": [self.client], "consultants": []}
        self.partner = self.person("partner")
        self.engagement = self.new_engagement()
        self.po = self.rows["purchase_orders"][0]

    def add(self, table: str, row: Row) -> Row:
        self.rows.setdefault(table, []).append(row)
        return row

    def person(self, level: str) -> Row:
        return self.add("consultants", consultant(self.rng, self.ids(1000, 2000), level, (self.names.pop(),)))

    def new_engagement(self) -> Row:
        """An engagement of the client led by the partner, with its own open PO and a distinct name."""
        row = engagement(self.rng, self.ids(2000, 3000), self.used, self.client, self.partner["id"])
        taken = {e["name"] for e in self.rows.get("engagements", [])}
        row["name"] = self.rng.choice([f"{self.client['name']} {p}" for p in PROJECTS
                                       if f"{self.client['name']} {p}" not in taken])
        self.add("purchase_orders", purchase_order(self.rng, self.ids(3000, 4000), self.used, row["id"], 0, 0))
        return self.add("engagements", row)

    def rate(self, level: str) -> float:
        """The client's hourly rate for a level: today's rate card less the tier discount (policy §3)."""
        return money(Decimal(current_rate(level)) * (100 - TIER_DISCOUNT[self.client["tier"]]) / 100)

    def assign(self, person: Row, hours: int = 80, engagement_row: Row | None = None) -> Row:
        return self.add("assignments", {
            "id": self.ids(4000, 5000), "engagement_id": (engagement_row or self.engagement)["id"],
            "consultant_id": person["id"], "hourly_rate": self.rate(person["level"]), "planned_hours": hours,
            "status": "active"})

    def free_day(self, periods) -> str:
        """A weekday of one of `periods` that no other time entry of this task uses."""
        day = self.rng.choice([d for p in periods for d in period_weekdays(p) if d not in self.days])
        self.days.add(day)
        return day

    def entries(self, person: Row, periods: list[int]) -> list[Row]:
        """One approved time entry of `person` per period given."""
        return [self.add("time_entries", {
            "id": self.ids(5000, 7000), "consultant_id": person["id"], "engagement_id": self.engagement["id"],
            "period_id": period, "work_date": self.free_day([period]), "hours": self.rng.choice((4, 6, 7.5, 8, 9)),
            "status": "approved", "note": "client work", "updated_at": None}) for period in periods]

    def bill(self, status: str, lines: int, hours: tuple[int, int]) -> tuple[Row, list[Row]]:
        """An invoice of `lines` newly staffed consultants at the client's rates, discounted per policy §3."""
        invoice_id = self.ids(7000, 8000)
        rows = []
        for _ in range(lines):
            person = self.person(self.rng.choice(LEVELS[:-1]))
            self.assign(person)
            rows.append(invoice_line(self.ids(8000, 9000), invoice_id, person, self.rng.randrange(*hours),
                                     self.rate(person["level"])))
        subtotal = sum(Decimal(str(line["amount"])) for line in rows)
        percent = TIER_DISCOUNT[self.client["tier"]] + (VOLUME_POINTS if subtotal >= VOLUME_THRESHOLD else 0)
        bill = self.add("invoices", invoice(invoice_id, invoice_number(self.rng, self.used), self.engagement,
                                            status, rows, percent))
        self.rows["invoice_lines"] = rows
        return bill, rows


def _base_people(rng: random.Random) -> list[Row]:
    levels = ["partner"] * 6 + ["manager"] * 8 + ["senior_consultant"] * 10 + ["consultant"] * 10 + ["analyst"] * 6
    people = [consultant(rng, i, level) for i, level in enumerate(levels, start=1)]
    people[20]["status"] = "on_leave"
    return people


def _base_work(rng: random.Random, rows: dict[str, list[Row]], used: set[str]) -> None:
    """Engagements with purchase orders, staffing, time entries, invoices and expenses."""
    people = rows["consultants"]
    for index, client_row in enumerate(rows["clients"], start=1):
        eng = engagement(rng, index, used, client_row, people[index % 6]["id"])
        eng["status"] = "closed" if index % 7 == 0 else "active"
        staff = rng.sample(people[6:], 3)
        rates = [money(current_rate(p["level"]) * (100 - TIER_DISCOUNT[client_row["tier"]]) / 100) for p in staff]
        committed = sum(Decimal(str(r)) * 80 for r in rates)
        rows["engagements"].append(eng)
        rows["purchase_orders"].append(purchase_order(rng, index, used, index, money(committed * 2),
                                                      money(committed)))
        lines = []
        for person, rate in zip(staff, rates, strict=True):
            rows["assignments"].append({"id": len(rows["assignments"]) + 1, "engagement_id": index,
                                        "consultant_id": person["id"], "hourly_rate": rate, "planned_hours": 80,
                                        "status": "active"})
            rows["time_entries"].append({
                "id": len(rows["time_entries"]) + 1, "consultant_id": person["id"], "engagement_id": index,
                "period_id": (period := rng.randrange(5, 11)), "work_date": workday(rng, period),
                "hours": rng.choice((4, 6, 7.5, 8)), "status": "approved", "note": "client work",
                "updated_at": None})
            lines.append(invoice_line(len(rows["invoice_lines"]) + len(lines) + 1, index, person,
                                      rng.choice((16, 24, 32, 40)), rate))
        rows["invoice_lines"] += lines
        status = ("issued", "paid", "draft")[index % 3]
        rows["invoices"].append(invoice(index, invoice_number(rng, used), eng, status, lines,
                                        TIER_DISCOUNT[client_row["tier"]]))
        rows["expenses"].append(expense(index, staff[0]["id"], index, rng.choice(("meals", "lodging")),
                                        rng.choice(CITIES), workday(rng, rng.randrange(6, 11)),
                                        rng.randrange(40, 300), rng.randrange(2),
                                        rng.choice(("approved", "submitted"))))


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260520)
    used: set[str] = set()
    tiers = ("standard", "preferred", "strategic", "standard", "preferred")
    rows: dict[str, list[Row]] = {t: [] for t in (
        "engagements", "purchase_orders", "assignments", "time_entries", "invoices", "invoice_lines",
        "invoice_credits", "approval_requests", "expenses", "po_change_requests", "cases")}
    rows["clients"] = [client(rng, i, used, tiers[i % 5], COMPANIES[i - 1]) for i in range(1, 21)]
    rows["consultants"] = _base_people(rng)
    rows["rate_cards"] = [{"id": k * 5 + i + 1, "level": level, "hourly_rate": RATES[year][i],
                           "effective_from": f"{year}-01-01"}
                          for k, year in enumerate(sorted(RATES)) for i, level in enumerate(LEVELS)]
    rows["timesheet_periods"] = period_rows()
    _base_work(rng, rows, used)
    rows["invoice_credits"].append({"id": 1, "invoice_id": 2, "amount": 150, "status": "applied",
                                    "reason": "duplicate hours"})
    rows["invoices"][1]["credits"] = 150
    rows["invoices"][1]["total"] = money(Decimal(str(rows["invoices"][1]["total"])) - 150)
    rows["approval_requests"].append({"id": 1, "invoice_id": 4, "approver_id": rows["engagements"][3]["partner_id"],
                                      "amount": 2600, "status": "approved", "reason": "scope dispute"})
    rows["po_change_requests"].append({"id": 1, "po_id": 6, "amount": 12000, "status": "pending",
                                       "reason": "second phase"})
    rows["cases"].append({"id": 1, "client_id": 3, "consultant_id": None, "category": "other", "status": "open",
                          "summary": "Asked for invoices to be sent to a shared mailbox."})
    return rows


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every consulting task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}


def used_codes() -> set[str]:
    """Client codes, engagement codes, PO and invoice numbers the base seed already uses."""
    base = _base()
    return ({c["client_code"] for c in base["clients"]} | {e["code"] for e in base["engagements"]}
            | {p["po_number"] for p in base["purchase_orders"]} | {i["invoice_number"] for i in base["invoices"]})
