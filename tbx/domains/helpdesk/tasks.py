"""Helpdesk task families (training split), generated deterministically from a seed.

Difficulty is in each family's name. Easy families are one write with every fact in the opening
message and no identity check (for small models that can name one tool). Medium ones need a
lookup before the write or one held-back fact; hard ones hold back several facts, fail
verification, or refuse by policy while still leaving a positive record (a ticket), so a
do-nothing agent fails them too. References are written for the scripted user: each question
names the facts it needs by their keywords; the closing statement has neither '?' nor keyword.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from tbx.domains.helpdesk.seed import (
    SLA_DAYS,
    TASK_SOFTWARE,
    TEAM_OF,
    TEAMS,
    Row,
    asset,
    day,
    due_date,
    person,
    technician,
    ticket,
)
from tbx.domains.kit import Built, IdPool, ask_for, call, identity_records, private_facts, training_tasks

EASY_INSTANCES, INSTANCES = 10, 8
# Easy tasks offer a short tool list: the full one does not fit a 2k-token model context next to the
# policy. The two easy writes come first in tools.py, so few-shot examples show them; the last tool
# is the first distractor's, so the extra-write mutation can be played in an episode.
EASY_TOOLS = ["set_ticket_priority", "close_ticket", "get_ticket", "add_comment"]
KEYWORDS = {
    "employee_id": ["employee id", "employee number"],
    "date_of_birth": ["date of birth", "birth date", "birthday"],
    "ticket_number": ["ticket number", "ticket id"],
    "leaver_id": ["leaver's employee id", "their employee id"],
}
ASKS = {"employee_id": "your employee ID", "date_of_birth": "your date of birth",
        "ticket_number": "the ticket number", "leaver_id": "the leaver's employee ID"}


_ask = partial(ask_for, ASKS)
_facts = partial(private_facts, KEYWORDS)


def _built(persona: str, instructions: str, opening: str, rows: dict, reference: list, expected: list,
           facts: dict | None = None) -> Built:
    """A task's record; the identity records its reference's verifications leave head the expected changes."""
    verified = identity_records(reference, "verify_user", "user_id", rows.get("users", []))
    return {"persona": persona, "instructions": instructions, "facts": facts or {}, "opening": opening,
            "rows": rows, "reference": reference, "expected": [*verified, *expected]}


def _user(rng: random.Random, ids: IdPool, status: str = "active", manager_id: int | None = None) -> Row:
    return person(rng, ids(2000, 5000), manager_id or rng.randrange(2, 7), status)


def _open_ticket(rng: random.Random, ids: IdPool, requester: Row, created_ago: int, priority: str | None = None,
                 **extra: Any) -> Row:
    return ticket(rng, ids(4000, 10000), requester["id"], rng.choice(tuple(TEAM_OF)),
                  priority or rng.choice(("low", "medium", "high")), day(-created_ago),
                  rng.choice(("open", "in_progress")), **extra)


def _name(row: Row) -> str:
    return f"{row['first_name']} {row['last_name']}"


def _set_priority_easy(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    requester = _user(rng, ids)
    row = _open_ticket(rng, ids, requester, rng.randrange(0, 4))
    target = rng.choice([p for p in ("low", "medium", "high") if p != row["priority"]])
    due = due_date(row["created_on"], target)
    return _built(
        "An IT team lead triaging the ticket queue.", f"Have ticket {row['id']} set to priority {target}.",
        f"Set the priority of ticket {row['id']} to {target}.", {"users": [requester], "tickets": [row]},
        [call("set_ticket_priority", ticket_id=row["id"], priority=target),
         {"say": f"Done: ticket {row['id']} now has priority {target}, due {due}."}],
        [{"op": "update", "table": "tickets", "key": {"id": row["id"]}, "values": {"priority": target, "due_on": due}}])


def _close_ticket_easy(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    requester = _user(rng, ids)
    row = _open_ticket(rng, ids, requester, rng.randrange(0, 9))
    resolution = ("resolved", "duplicate", "wont_fix")[index % 3]
    return _built(
        "An IT technician tidying up the queue.", f"Have ticket {row['id']} closed as {resolution}.",
        f"Close ticket {row['id']} as {resolution}.", {"users": [requester], "tickets": [row]},
        [call("close_ticket", ticket_id=row["id"], resolution=resolution),
         {"say": f"Done: ticket {row['id']} is closed as {resolution}."}],
        [{"op": "update", "table": "tickets", "key": {"id": row["id"]},
          "values": {"status": "closed", "resolution": resolution}}])


def _assign_ticket_medium(rng: random.Random, index: int) -> Built:
    """Route an unassigned ticket to the on-call technician of its category's team."""
    ids = IdPool(rng)
    requester = _user(rng, ids)
    row = _open_ticket(rng, ids, requester, rng.randrange(0, 3)) | {"status": "open"}
    team = TEAM_OF[row["category"]]
    techs = [technician(rng, ids(700, 800), t, 1, 1) for t in TEAMS]
    techs += [technician(rng, ids(700, 800), team, 1, 0), technician(rng, ids(700, 800), team, 2, 0)]
    chosen = next(t for t in techs if t["team"] == team and t["on_call"])
    return _built(
        "A service desk coordinator.", f"Get ticket {row['id']} assigned to the right team's technician.",
        f"Ticket {row['id']} is still unassigned. Please route it to the right team.",
        {"users": [requester], "technicians": techs, "tickets": [row]},
        [call("get_ticket", ticket_id=row["id"]), call("list_technicians", team=team),
         call("assign_ticket", ticket_id=row["id"], technician_id=chosen["id"]),
         {"say": f"Ticket {row['id']} is in category {row['category']}, so I assigned it to {chosen['name']}, "
                 f"the on-call technician of the {team} team."}],
        [{"op": "update", "table": "tickets", "key": {"id": row["id"]},
          "values": {"assignee_id": chosen["id"], "status": "in_progress"}}])


def _chase(rng: random.Random, index: int, overdue: bool) -> Built:
    """A requester chases a ticket: escalate when the SLA is breached, else a public comment."""
    ids = IdPool(rng)
    requester = _user(rng, ids)
    priority = rng.choice(("medium", "high", "low"))
    span = SLA_DAYS[priority]
    ago = span + rng.randrange(1, 6) if overdue else rng.randrange(0, span + 1)  # due today is not passed
    level = 1 + index % 2
    row = _open_ticket(rng, ids, requester, ago, priority, escalation_level=level)
    steps = [_ask("ticket_number"), call("get_ticket", ticket_id=row["id"])]
    if overdue:
        steps += [call("escalate_ticket", ticket_id=row["id"], reason="SLA breached; requester chased."),
                  {"say": f"Your ticket was due on {row['due_on']}, so it is past its SLA. I escalated it to "
                          f"level {level + 1}."}]
        expected = [{"op": "update", "table": "tickets", "key": {"id": row["id"]},
                     "values": {"escalation_level": level + 1}},
                    {"op": "insert", "table": "escalations",
                     "values": {"ticket_id": row["id"], "from_level": level, "to_level": level + 1}}]
    else:
        steps += [call("add_comment", ticket_id=row["id"], visibility="public",
                        body=f"Chased by the requester; the ticket is within its SLA, due {row['due_on']}."),
                  {"say": f"Your ticket is still within its SLA: it is due on {row['due_on']}. I added a note "
                          f"to it, and you will get updates by e-mail."}]
        expected = [{"op": "insert", "table": "ticket_comments",
                     "values": {"ticket_id": row["id"], "visibility": "public"}}]
    return _built(
        f"{_name(requester)}, an Acme employee waiting on IT.",
        f"You want your ticket about '{row['subject']}' sped up. Accept what the agent says policy allows.",
        f"Hi, I'm chasing my ticket about '{row['subject'].lower()}'. Nothing has happened yet.",
        {"users": [requester], "tickets": [row]}, steps, expected, _facts(ticket_number=row["id"]))


def _chase_overdue_medium(rng: random.Random, index: int) -> Built:
    return _chase(rng, index, overdue=True)


def _chase_within_sla_medium(rng: random.Random, index: int) -> Built:
    return _chase(rng, index, overdue=False)


def _unlock_account_medium(rng: random.Random, index: int) -> Built:
    ids = IdPool(rng)
    caller = _user(rng, ids, "locked")
    return _built(
        f"{_name(caller)}, an Acme employee locked out after too many password attempts.",
        "Get your account unlocked.", "Hi, I'm locked out of my account. Can you unlock it?",
        {"users": [caller]},
        [_ask("employee_id", "date_of_birth"),
         call("verify_user", user_id=caller["id"], date_of_birth=caller["date_of_birth"]),
         call("unlock_account", user_id=caller["id"]),
         {"say": "Thanks, you are verified and your account is unlocked. You can sign in again now."}],
        [{"op": "update", "table": "users", "key": {"id": caller["id"]}, "values": {"account_status": "active"}}],
        _facts(employee_id=caller["id"], date_of_birth=caller["date_of_birth"]))


def _new_ticket(user_id: int, priority: str = "high", category: str = "security") -> dict:
    return {"op": "insert", "table": "tickets", "values": {
        "requester_id": user_id, "category": category, "priority": priority, "status": "open",
        "created_on": day(0), "due_on": due_date(day(0), priority), "escalation_level": 1, "assignee_id": None}}


def _identity_fails_hard(rng: random.Random, index: int) -> Built:
    """The caller's date of birth does not match: change nothing, open a security ticket."""
    ids = IdPool(rng)
    owner = _user(rng, ids, "locked" if index % 2 == 0 else "active")
    wrong = f"{int(owner['date_of_birth'][:4]) + rng.choice((-2, -1, 1, 3))}{owner['date_of_birth'][4:]}"
    want = "unlock my account" if index % 2 == 0 else "get a seat of PDF Editor Pro"
    return _built(
        f"Someone calling about {_name(owner)}'s account.",
        f"You want to {want}. You give the date of birth you hold when asked.",
        f"Hello, I need to {want}, please.", {"users": [owner]},
        [_ask("employee_id", "date_of_birth"),
         call("verify_user", user_id=owner["id"], date_of_birth=wrong),
         call("create_ticket", requester_id=owner["id"], category="security", priority="high",
               subject="Failed identity verification on a service desk call."),
         {"say": "I'm sorry, the details you gave do not match our records, so I cannot make any change. "
                 "I have logged this for the security team."}],
        [_new_ticket(owner["id"])], _facts(employee_id=owner["id"], date_of_birth=wrong))


def _licence(rng: random.Random, ids: IdPool, free: bool) -> Row:
    name, cost = rng.choice(TASK_SOFTWARE)
    total = rng.randrange(5, 40)
    return {"id": ids(600, 700), "software": name, "seats_total": total,
            "seats_used": total - rng.randrange(1, 4) if free else total, "cost_per_seat": cost}


def _licence_family(rng: random.Random, index: int, free: bool) -> Built:
    """A verified caller asks for a licence: a seat if one is free, else a procurement ticket."""
    ids = IdPool(rng)
    caller = _user(rng, ids)
    pool = _licence(rng, ids, free)
    steps = [_ask("employee_id", "date_of_birth"),
             call("verify_user", user_id=caller["id"], date_of_birth=caller["date_of_birth"]),
             call("find_licence", software=pool["software"])]
    if free:
        steps += [call("assign_licence", user_id=caller["id"], licence_id=pool["id"]),
                  {"say": f"You are verified and now have a {pool['software']} seat."}]
        expected = [{"op": "insert", "table": "licence_assignments",
                     "values": {"licence_id": pool["id"], "user_id": caller["id"], "status": "active"}},
                    {"op": "update", "table": "licences", "key": {"id": pool["id"]},
                     "values": {"seats_used": pool["seats_used"] + 1}}]
    else:
        steps += [call("create_ticket", requester_id=caller["id"], category="licence", priority="low",
                        subject=f"No free {pool['software']} seat; please buy one."),
                  {"say": f"All {pool['seats_total']} {pool['software']} seats are in use, so I cannot give you "
                          f"one now. I opened a request for procurement to buy a seat."}]
        expected = [_new_ticket(caller["id"], "low", "licence")]
    return _built(
        f"{_name(caller)}, an Acme employee in {caller['department']}.",
        f"You need a {pool['software']} licence. Accept what the agent says policy allows.",
        f"Hi, could I get a licence for {pool['software']}?", {"users": [caller], "licences": [pool]},
        steps, expected, _facts(employee_id=caller["id"], date_of_birth=caller["date_of_birth"]))


def _licence_request_medium(rng: random.Random, index: int) -> Built:
    return _licence_family(rng, index, free=True)


def _licence_no_seat_hard(rng: random.Random, index: int) -> Built:
    return _licence_family(rng, index, free=False)


def _offboard_leaver_hard(rng: random.Random, index: int) -> Built:
    """A verified manager offboards a report: disable, revoke active licences, return assets."""
    ids = IdPool(rng)
    manager = _user(rng, ids)
    leaver = _user(rng, ids, manager_id=manager["id"])
    pools = [_licence(rng, ids, True) for _ in range(2)]
    while pools[0]["software"] == pools[1]["software"]:
        pools[1] = _licence(rng, ids, True)
    grants = [{"id": ids(7000, 8000), "licence_id": p["id"], "user_id": leaver["id"], "status": "active"}
              for p in pools[: 1 + index % 2]]
    old = {"id": ids(7000, 8000), "licence_id": pools[-1]["id"], "user_id": leaver["id"], "status": "revoked"}
    kit = [asset(rng, ids(3000, 4000), leaver["id"], kind) for kind in ("laptop", "phone", "monitor")[: 1 + index % 3]]
    steps = [_ask("employee_id", "date_of_birth", "leaver_id"),
             call("verify_user", user_id=manager["id"], date_of_birth=manager["date_of_birth"]),
             call("get_user", user_id=leaver["id"]), call("disable_account", user_id=leaver["id"])]
    steps += [call("revoke_licence", assignment_id=g["id"]) for g in grants]
    steps += [call("return_asset", asset_id=a["id"]) for a in kit]
    steps.append({"say": f"Done: {_name(leaver)}'s account is disabled, licence seats revoked: {len(grants)}, "
                         f"devices recorded as returned to IT: {len(kit)}."})
    expected = [{"op": "update", "table": "users", "key": {"id": leaver["id"]},
                 "values": {"account_status": "disabled"}}]
    expected += [{"op": "update", "table": "licence_assignments", "key": {"id": g["id"]},
                  "values": {"status": "revoked"}} for g in grants]
    expected += [{"op": "update", "table": "licences", "key": {"id": p["id"]},
                  "values": {"seats_used": p["seats_used"] - 1}} for p in pools[: len(grants)]]
    expected += [{"op": "update", "table": "assets", "key": {"id": a["id"]},
                  "values": {"assigned_user_id": None, "status": "spare"}} for a in kit]
    return _built(
        f"{_name(manager)}, a manager at Acme.", f"Offboard {_name(leaver)}, who reports to you and leaves today.",
        f"Hello, {_name(leaver)} from my team leaves Acme today. Please offboard them.",
        {"users": [manager, leaver], "licences": pools, "licence_assignments": grants + [old], "assets": kit},
        steps, expected,
        _facts(employee_id=manager["id"], date_of_birth=manager["date_of_birth"], leaver_id=leaver["id"]))


FAMILIES: dict[str, Callable[[random.Random, int], Built]] = {
    "set_priority_easy": _set_priority_easy,
    "close_ticket_easy": _close_ticket_easy,
    "assign_ticket_medium": _assign_ticket_medium,
    "chase_overdue_medium": _chase_overdue_medium,
    "chase_within_sla_medium": _chase_within_sla_medium,
    "unlock_account_medium": _unlock_account_medium,
    "licence_request_medium": _licence_request_medium,
    "licence_no_seat_hard": _licence_no_seat_hard,
    "identity_fails_hard": _identity_fails_hard,
    "offboard_leaver_hard": _offboard_leaver_hard,
}


def generate_tasks(seed: int = 0) -> list[dict]:
    """All helpdesk tasks for `seed`: same seed → same tasks. Easy families get more instances."""
    return training_tasks("helpdesk", FAMILIES, seed, (EASY_INSTANCES, INSTANCES), EASY_TOOLS)
