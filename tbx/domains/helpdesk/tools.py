"""Helpdesk domain tools: what the IT service desk assistant may read and write.

The tools enforce only hard invariants (records exist, a closed ticket stays closed, a licence
has no more users than seats, an asset returned is not in use). Business rules such as "verify
the caller before touching an account" or "escalate only overdue tickets" live in policy.md and
are the agent's to follow: the tools would let the agent break them, which a task then checks.
"""

from typing import Literal, get_args

from sqlalchemy import func, insert, select, update

from tbx.domains.helpdesk.schema import (
    assets,
    audit_log,
    escalations,
    identity_checks,
    licence_assignments,
    licences,
    technicians,
    ticket_comments,
    tickets,
    users,
)
from tbx.domains.helpdesk.seed import SLA_DAYS, TEAMS, TODAY, due_date
from tbx.domains.kit import fetch_one, record_once
from tbx.tools import ToolFailure, tool

# Closed choices are Literal types, so the schema the agent sees lists them as an enum.
Priority = Literal["low", "medium", "high", "critical"]
Resolution = Literal["resolved", "duplicate", "wont_fix"]
Visibility = Literal["public", "internal"]
Category = Literal["hardware", "software", "network", "access", "security", "licence"]
Team = Literal["service_desk", "hardware", "network", "applications", "security"]
PRIORITIES, RESOLUTIONS, CATEGORIES = get_args(Priority), get_args(Resolution), get_args(Category)
assert set(PRIORITIES) == set(SLA_DAYS) and get_args(Team) == TEAMS
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _choice(value: str, allowed: tuple[str, ...], name: str) -> str:
    value = value.strip().lower()
    if value not in allowed:
        raise ToolFailure(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _user(db, user_id: int) -> dict:
    row = db.execute(select(users).where(users.c.id == user_id)).mappings().first()
    if row is None:
        raise ToolFailure(f"user {user_id} not found")
    return dict(row)


def _ticket(db, ticket_id: int, open_only: bool = False) -> dict:
    row = fetch_one(db, tickets, ticket_id, "ticket")
    if open_only and row["status"] == "closed":
        raise ToolFailure(f"ticket {ticket_id} is closed and cannot be changed")
    return row


def _set_ticket(db, ticket_id: int, **values) -> None:
    db.execute(update(tickets).where(tickets.c.id == ticket_id).values(**values, updated_at=MODIFIED))


def _log(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


# The desk's two most common actions come first: a model's few-shot examples show the
# first tools of the list (tbx.policies.prompting.demonstrations_for).
@tool("write")
def set_ticket_priority(db, ticket_id: int, priority: Priority) -> dict:
    """Change a ticket's priority; its SLA due date is recomputed from the creation date.

    Args:
        ticket_id: The ticket number.
        priority: One of "low", "medium", "high", "critical".
    """
    priority = _choice(priority, PRIORITIES, "priority")
    found = _ticket(db, ticket_id, open_only=True)
    if found["priority"] == priority:
        raise ToolFailure(f"ticket {ticket_id} already has priority {priority}")
    due = due_date(found["created_on"], priority)
    _set_ticket(db, ticket_id, priority=priority, due_on=due)
    _log(db, f"set_ticket_priority ticket={ticket_id} priority={priority}")
    return {"ticket_id": ticket_id, "priority": priority, "due_on": due}


@tool("write")
def close_ticket(db, ticket_id: int, resolution: Resolution) -> dict:
    """Close a ticket with a resolution.

    Args:
        ticket_id: The ticket number.
        resolution: One of "resolved", "duplicate", "wont_fix".
    """
    resolution = _choice(resolution, RESOLUTIONS, "resolution")
    _ticket(db, ticket_id, open_only=True)
    _set_ticket(db, ticket_id, status="closed", resolution=resolution)
    _log(db, f"close_ticket ticket={ticket_id}")
    return {"ticket_id": ticket_id, "status": "closed", "resolution": resolution}


@tool("read")
def get_ticket(db, ticket_id: int) -> dict:
    """Show a ticket with its comments and escalations. Today's date is included for SLA checks.

    Args:
        ticket_id: The ticket number.
    """
    found = _ticket(db, ticket_id)
    found["comments"] = [dict(r) for r in db.execute(select(ticket_comments).where(
        ticket_comments.c.ticket_id == ticket_id).order_by(ticket_comments.c.id)).mappings()]
    found["escalations"] = [dict(r) for r in db.execute(select(escalations).where(
        escalations.c.ticket_id == ticket_id).order_by(escalations.c.id)).mappings()]
    found["today"] = TODAY.isoformat()
    return found


@tool("write")
def verify_user(db, user_id: int, date_of_birth: str) -> dict:
    """Check a caller's identity: their employee ID and date of birth, as the caller stated them.

    Returns {"verified": true, "user_id": ...} when both match (recorded on file), otherwise
    {"verified": false}.

    Args:
        user_id: The employee ID the caller gave.
        date_of_birth: The date of birth the caller gave, as YYYY-MM-DD.
    """
    found = _user(db, user_id)
    if date_of_birth.strip() != found["date_of_birth"]:
        return {"verified": False, "reason": f"the date of birth does not match user {user_id}"}
    record_once(db, identity_checks, user_id=user_id)
    return {"verified": True, "user_id": user_id}


@tool("read")
def get_user(db, user_id: int) -> dict:
    """Show a user's account (status, manager), their assets and their licence assignments.

    Args:
        user_id: The user's employee ID.
    """
    found = {k: v for k, v in _user(db, user_id).items() if k not in ("date_of_birth", "updated_at")}
    found["assets"] = [dict(r) for r in db.execute(select(
        assets.c.id, assets.c.asset_tag, assets.c.kind, assets.c.model, assets.c.status).where(
        assets.c.assigned_user_id == user_id).order_by(assets.c.id)).mappings()]
    found["licences"] = [dict(r) for r in db.execute(select(
        licence_assignments.c.id.label("assignment_id"), licences.c.software, licence_assignments.c.status).join(
        licences, licences.c.id == licence_assignments.c.licence_id).where(
        licence_assignments.c.user_id == user_id).order_by(licence_assignments.c.id)).mappings()]
    return found


@tool("read")
def list_technicians(db, team: Team) -> list[dict]:
    """List the technicians of a team, with their level and whether they are on call.

    Args:
        team: One of "service_desk", "hardware", "network", "applications", "security".
    """
    team = _choice(team, TEAMS, "team")
    return [dict(r) for r in db.execute(select(technicians).where(technicians.c.team == team)
                                        .order_by(technicians.c.id)).mappings()]


@tool("read")
def find_licence(db, software: str) -> dict:
    """Show a software licence pool by product name: seats in total, seats used, cost per seat.

    Args:
        software: The product name, e.g. "PDF Editor Pro" (case does not matter).
    """
    row = db.execute(select(licences).where(func.lower(licences.c.software) == software.strip().lower())
                     ).mappings().first()
    if row is None:
        raise ToolFailure(f"no licence pool for software {software!r}")
    return dict(row)


@tool("write")
def assign_ticket(db, ticket_id: int, technician_id: int) -> dict:
    """Assign a ticket to a technician; the ticket's status becomes in_progress.

    Args:
        ticket_id: The ticket number.
        technician_id: The technician's numeric ID (from list_technicians).
    """
    _ticket(db, ticket_id, open_only=True)
    if db.execute(select(technicians.c.id).where(technicians.c.id == technician_id)).first() is None:
        raise ToolFailure(f"technician {technician_id} not found")
    _set_ticket(db, ticket_id, assignee_id=technician_id, status="in_progress")
    _log(db, f"assign_ticket ticket={ticket_id} technician={technician_id}")
    return {"ticket_id": ticket_id, "assignee_id": technician_id, "status": "in_progress"}


@tool("write", free_args=("body",))
def add_comment(db, ticket_id: int, visibility: Visibility, body: str) -> dict:
    """Add a comment to a ticket. Public comments are e-mailed to the requester.

    Args:
        ticket_id: The ticket number.
        visibility: "public" (the requester sees it) or "internal" (IT staff only).
        body: The comment text.
    """
    visibility = _choice(visibility, get_args(Visibility), "visibility")
    _ticket(db, ticket_id)
    if not body.strip():
        raise ToolFailure("body must not be empty")
    new_id = db.execute(insert(ticket_comments).values(ticket_id=ticket_id, visibility=visibility,
                                                       body=body)).inserted_primary_key[0]
    _log(db, f"add_comment ticket={ticket_id} comment={new_id}")
    return {"comment_id": new_id, "ticket_id": ticket_id, "visibility": visibility}


@tool("write", free_args=("reason",))
def escalate_ticket(db, ticket_id: int, reason: str) -> dict:
    """Escalate a ticket one level (1 → 2 → 3) and record the escalation.

    Args:
        ticket_id: The ticket number.
        reason: Why it is escalated, in a sentence.
    """
    found = _ticket(db, ticket_id, open_only=True)
    level = found["escalation_level"]
    if level >= 3:
        raise ToolFailure(f"ticket {ticket_id} is already at the highest escalation level 3")
    _set_ticket(db, ticket_id, escalation_level=level + 1)
    db.execute(insert(escalations).values(ticket_id=ticket_id, from_level=level, to_level=level + 1, reason=reason))
    _log(db, f"escalate_ticket ticket={ticket_id} level={level + 1}")
    return {"ticket_id": ticket_id, "from_level": level, "to_level": level + 1}


@tool("write", free_args=("subject",))
def create_ticket(db, requester_id: int, category: Category, priority: Priority, subject: str) -> dict:
    """Open a new ticket for a user; its SLA due date follows from today's date and the priority.

    Args:
        requester_id: The employee ID of the user the ticket is for.
        category: One of "hardware", "software", "network", "access", "security", "licence".
        priority: One of "low", "medium", "high", "critical".
        subject: A one-line summary of the problem or request.
    """
    category = _choice(category, CATEGORIES, "category")
    priority = _choice(priority, PRIORITIES, "priority")
    _user(db, requester_id)
    new_id = (db.execute(select(func.max(tickets.c.id))).scalar_one() or 0) + 1
    created = TODAY.isoformat()
    db.execute(insert(tickets).values(
        id=new_id, requester_id=requester_id, category=category, priority=priority, status="open",
        subject=subject, created_on=created, due_on=due_date(created, priority), escalation_level=1))
    _log(db, f"create_ticket ticket={new_id}")
    return {"ticket_id": new_id, "status": "open", "due_on": due_date(created, priority)}


def _set_account(db, user_id: int, status: str) -> dict:
    found = _user(db, user_id)
    if found["account_status"] == status:
        raise ToolFailure(f"the account of user {user_id} is already {status}")
    db.execute(update(users).where(users.c.id == user_id).values(account_status=status, updated_at=MODIFIED))
    _log(db, f"account user={user_id} status={status}")
    return {"user_id": user_id, "account_status": status}


@tool("write")
def unlock_account(db, user_id: int) -> dict:
    """Unlock a locked user account (sets it active). A disabled account cannot be unlocked.

    Args:
        user_id: The user's employee ID.
    """
    if _user(db, user_id)["account_status"] == "disabled":
        raise ToolFailure(f"the account of user {user_id} is disabled, not locked")
    return _set_account(db, user_id, "active")


@tool("write")
def disable_account(db, user_id: int) -> dict:
    """Disable a user account (for leavers): the user can no longer sign in.

    Args:
        user_id: The user's employee ID.
    """
    return _set_account(db, user_id, "disabled")


@tool("write")
def assign_licence(db, user_id: int, licence_id: int) -> dict:
    """Give a user a seat of a licence pool (one seat is used).

    Args:
        user_id: The user's employee ID.
        licence_id: The licence pool's numeric ID (from find_licence).
    """
    _user(db, user_id)
    pool = fetch_one(db, licences, licence_id, "licence")
    if pool["seats_used"] >= pool["seats_total"]:
        raise ToolFailure(f"licence {licence_id} has no free seat ({pool['seats_used']}/{pool['seats_total']} used)")
    new_id = db.execute(insert(licence_assignments).values(licence_id=licence_id, user_id=user_id,
                                                           status="active")).inserted_primary_key[0]
    db.execute(update(licences).where(licences.c.id == licence_id).values(seats_used=pool["seats_used"] + 1))
    _log(db, f"assign_licence assignment={new_id}")
    return {"assignment_id": new_id, "software": pool["software"], "status": "active"}


@tool("write")
def revoke_licence(db, assignment_id: int) -> dict:
    """Take back a user's licence seat (the assignment becomes revoked, the seat is free again).

    Args:
        assignment_id: The licence assignment's numeric ID (from get_user).
    """
    row = fetch_one(db, licence_assignments, assignment_id, "licence assignment")
    if row["status"] != "active":
        raise ToolFailure(f"licence assignment {assignment_id} is already {row['status']}")
    db.execute(update(licence_assignments).where(licence_assignments.c.id == assignment_id).values(status="revoked"))
    db.execute(update(licences).where(licences.c.id == row["licence_id"]).values(
        seats_used=licences.c.seats_used - 1))
    _log(db, f"revoke_licence assignment={assignment_id}")
    return {"assignment_id": assignment_id, "status": "revoked"}


@tool("write")
def return_asset(db, asset_id: int) -> dict:
    """Record that an asset came back to IT: it is unassigned and becomes a spare.

    Args:
        asset_id: The asset's numeric ID (from get_user).
    """
    row = fetch_one(db, assets, asset_id, "asset")
    if row["assigned_user_id"] is None:
        raise ToolFailure(f"asset {asset_id} is not assigned to anyone")
    db.execute(update(assets).where(assets.c.id == asset_id).values(
        assigned_user_id=None, status="spare", updated_at=MODIFIED))
    _log(db, f"return_asset asset={asset_id}")
    return {"asset_id": asset_id, "asset_tag": row["asset_tag"], "status": "spare"}
