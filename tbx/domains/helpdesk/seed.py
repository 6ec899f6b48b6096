"""Helpdesk domain seed: the deterministic base rows every task starts from, and the row builders
tasks use to add their own records on top.

Base ids live below the task ranges (users < 2000, technicians < 700, assets < 3000, tickets
< 4000, licences < 600, licence assignments < 7000), so a task's rows never collide with them.
"""

from __future__ import annotations

import datetime as dt
import random
from functools import cache
from typing import Any

Row = dict[str, Any]

TODAY = dt.date(2026, 5, 11)  # the service desk's "today"; mirrors policy.md
SLA_DAYS = {"critical": 1, "high": 3, "medium": 5, "low": 10}  # mirrors policy.md
TEAM_OF = {"hardware": "hardware", "network": "network", "software": "applications", "access": "security"}
TEAMS = ("service_desk", "hardware", "network", "applications", "security")
SUBJECTS = {
    "hardware": ("Laptop will not boot", "Docking station drops the external monitor", "Keyboard keys stuck",
                 "Battery drains within an hour", "Cracked laptop screen"),
    "network": ("VPN disconnects every few minutes", "No Wi-Fi on the third floor", "Cannot reach the file share",
                "Very slow connection in meeting room B"),
    "software": ("Spreadsheet app crashes on open", "Mail client will not sync", "Need an update of the PDF editor",
                 "Calendar invites arrive twice"),
    "access": ("Need access to the finance share", "Cannot open the HR portal", "Missing rights on the CRM",
               "Shared mailbox not visible"),
}
FIRST_NAMES = ("Alma", "Bruno", "Carmen", "Dev", "Edith", "Farid", "Greta", "Hugo", "Ines", "Jamal", "Kira",
               "Leon", "Maya", "Nils", "Oona", "Pablo", "Quinn", "Rosa", "Stefan", "Tara", "Umar", "Vera",
               "Wes", "Xenia", "Yusuf", "Zara")
LAST_NAMES = ("Abbott", "Bauer", "Castillo", "Dahl", "Eriksen", "Fontaine", "Gupta", "Holm", "Ivanova", "Jensen",
              "Keller", "Lopez", "Maddox", "Nieminen", "Oyelaran", "Park", "Reinholt", "Santos", "Thorne",
              "Underwood", "Vasquez", "Winter", "Yilmaz", "Zeller")
DEPARTMENTS = ("Finance", "Sales", "Engineering", "Marketing", "Operations", "Legal")
MODELS = {"laptop": ("ThinkBook 14", "Latitude 7440", "MacBook Air 13"), "monitor": ("UltraView 27", "P2423D"),
          "phone": ("Pixel 8", "iPhone 15"), "dock": ("USB-C Dock G2", "TB4 Dock")}
BASE_SOFTWARE = (("Office Suite E3", 400, 180), ("PDF Editor Pro", 60, 45), ("Design Studio", 25, 620),
                 ("Diagram Maker", 40, 90), ("Stats Package", 15, 880), ("Screen Recorder", 30, 35))
TASK_SOFTWARE = (("Vector Draw Plus", 220), ("Data Notebook Teams", 310), ("Survey Builder", 95),
                 ("Code Review Cloud", 150), ("Mind Map Pro", 40), ("Video Cutter", 260), ("Project Planner", 120),
                 ("Typing Tutor", 25))


def day(offset: int) -> str:
    """The ISO date `offset` days from TODAY (negative: in the past)."""
    return (TODAY + dt.timedelta(days=offset)).isoformat()


def due_date(created_on: str, priority: str) -> str:
    """SLA due date of a ticket: created_on + the priority's SLA days."""
    return (dt.date.fromisoformat(created_on) + dt.timedelta(days=SLA_DAYS[priority])).isoformat()


def person(rng: random.Random, user_id: int, manager_id: int | None, status: str = "active") -> Row:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    birth = dt.date(1960, 1, 1) + dt.timedelta(days=rng.randrange(365 * 40))
    return {"id": user_id, "first_name": first, "last_name": last, "date_of_birth": birth.isoformat(),
            "email": f"{first.lower()}.{last.lower()}{user_id % 100}@acme.example",
            "department": rng.choice(DEPARTMENTS), "manager_id": manager_id, "account_status": status,
            "updated_at": None}


def ticket(rng: random.Random, ticket_id: int, requester_id: int, category: str, priority: str, created_on: str,
           status: str = "open", **extra: Any) -> Row:
    row = {"id": ticket_id, "requester_id": requester_id, "category": category, "priority": priority,
           "status": status, "assignee_id": None, "asset_id": None,
           "subject": rng.choice(SUBJECTS.get(category, SUBJECTS["software"])), "created_on": created_on,
           "due_on": due_date(created_on, priority), "escalation_level": 1, "resolution": None, "updated_at": None}
    return row | extra


def asset(rng: random.Random, asset_id: int, user_id: int | None, kind: str, status: str = "in_use") -> Row:
    prefix = {"laptop": "LT", "monitor": "MN", "phone": "PH", "dock": "DK"}[kind]
    return {"id": asset_id, "asset_tag": f"{prefix}-{asset_id:04d}", "kind": kind, "model": rng.choice(MODELS[kind]),
            "assigned_user_id": user_id, "status": status, "updated_at": None}


def technician(rng: random.Random, technician_id: int, team: str, level: int, on_call: int) -> Row:
    return {"id": technician_id, "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}", "team": team,
            "level": level, "on_call": on_call}


def _base_tickets(rng: random.Random, users: list[Row], techs: list[Row]) -> list[Row]:
    rows = []
    for ticket_id in range(1, 61):
        category = rng.choice(tuple(TEAM_OF))
        status = rng.choice(("open", "in_progress", "in_progress", "on_hold", "closed"))
        team = [t for t in techs if t["team"] == TEAM_OF[category]]
        extra = {"assignee_id": rng.choice(team)["id"] if status != "open" else None}
        if status == "closed":
            extra["resolution"] = "resolved"
        rows.append(ticket(rng, ticket_id, rng.choice(users)["id"], category,
                           rng.choice(("low", "medium", "high")), day(-rng.randrange(1, 40)), status, **extra))
    return rows


@cache
def _base() -> dict[str, list[Row]]:
    rng = random.Random(20260511)
    users = [person(rng, 1, None)] + [person(rng, i, 1) for i in range(2, 7)]
    users += [person(rng, i, rng.randrange(2, 7), rng.choice(("active",) * 8 + ("locked", "disabled")))
              for i in range(7, 41)]
    techs = [technician(rng, 3 * k + j + 1, team, 1 + (j == 2), 0) for k, team in enumerate(TEAMS) for j in range(3)]
    kinds = ("laptop", "laptop", "monitor", "phone", "dock")
    assets = [asset(rng, i, users[(i * 7) % 40]["id"], kinds[i % 5]) for i in range(1, 41)]
    licences = [{"id": i, "software": name, "seats_total": seats, "seats_used": 0, "cost_per_seat": cost}
                for i, (name, seats, cost) in enumerate(BASE_SOFTWARE, 1)]
    assignments = []
    for assignment_id in range(1, 31):
        licence = licences[assignment_id % len(licences)]
        licence["seats_used"] += 1
        assignments.append({"id": assignment_id, "licence_id": licence["id"],
                            "user_id": users[(assignment_id * 3) % 40]["id"], "status": "active"})
    tickets = _base_tickets(rng, users, techs)
    comments = [{"id": i, "ticket_id": t["id"], "visibility": "public", "body": "We are looking into it."}
                for i, t in enumerate([t for t in tickets if t["status"] == "in_progress"][:5], 1)]
    escalations = [{"id": 1, "ticket_id": tickets[3]["id"], "from_level": 1, "to_level": 2, "reason": "SLA breached"}]
    tickets[3]["escalation_level"] = 2
    return {"users": users, "technicians": techs, "assets": assets, "licences": licences,
            "licence_assignments": assignments, "tickets": tickets, "ticket_comments": comments,
            "escalations": escalations}


def base_rows() -> dict[str, list[Row]]:
    """The distractor data every helpdesk task starts from (a fresh copy each call)."""
    return {table: [dict(r) for r in rows] for table, rows in _base().items()}
