"""The helpdesk training domain: deterministic generation, easy families a small model can solve, tasks
the scripted user can play, tools that fail clearly, and checks that pass the reference and fail the
do-nothing agent and single faults. What every domain shares is in test_generated_tasks.py."""

import datetime as dt
import inspect
import json
import re
from typing import get_args

from tbx.domains import get_domain
from tbx.domains.helpdesk.seed import SLA_DAYS, TODAY, base_rows
from tbx.grading import grade_state

from .harness import run_tools, state_row

HELPDESK = get_domain("helpdesk")
TOOLS = {spec.name: spec for spec in HELPDESK.tools}
TASKS = HELPDESK.generate_tasks(0)


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


def test_closed_choices_are_enums():
    hint = inspect.signature(TOOLS["close_ticket"].fn).parameters["resolution"].annotation
    assert get_args(hint) == ("resolved", "duplicate", "wont_fix")  # the agent's schema lists them as an enum


def test_task_licences_are_other_software_than_the_base():
    software = {r["software"] for r in base_rows()["licences"]}
    for data in TASKS:
        assert software.isdisjoint(r["software"] for r in data["seed"]["rows"].get("licences", []))


def test_policy_states_the_rules_the_tasks_check():
    policy = HELPDESK.policy
    assert f"Today is **{TODAY.isoformat()}**" in policy
    sla = dict(re.findall(r"(critical|high|medium|low) (\d+) day", policy))
    assert {p: int(d) for p, d in sla.items()} == SLA_DAYS
    for phrase in ("no identity verification", "employee ID and date of birth", "on call", "**public**",
                   "category `licence`", "`security`", "manager_id"):
        assert phrase in policy, phrase


def test_escalating_a_ticket_within_its_sla_fails_the_task(backend, runtime):
    data = task("chase_within_sla_medium", 0)
    rt = runtime(data)
    ticket_id = seed_row(data, "tickets")["id"]
    assert seed_row(data, "tickets")["due_on"] >= TODAY.isoformat()
    _, final = run_tools(backend, rt, [("escalate_ticket", {"ticket_id": ticket_id, "reason": "chased"}),
                                  ("add_comment", {"ticket_id": ticket_id, "visibility": "public", "body": "x"})])
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "escalations" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("close_ticket_easy", 0))
    results, _ = run_tools(backend, rt, [("get_ticket", {"ticket_id": 3999}), ("get_user", {"user_id": 99}),
                                    ("find_licence", {"software": "Nope"}), ("list_technicians", {"team": "x"}),
                                    ("close_ticket", {"ticket_id": 3999, "resolution": "resolved"})])
    assert [r.is_error for r in results] == [True] * 5
    assert "ticket 3999 not found" in results[0].text and "user 99 not found" in results[1].text
    assert "no licence pool" in results[2].text and "team must be one of" in results[3].text


def test_verify_user_needs_the_right_birth_date(backend, runtime):
    data = task("unlock_account_medium", 0)
    user = seed_row(data, "users")
    rt = runtime(data)
    (wrong, right), _ = run_tools(backend, rt, [("verify_user", {"user_id": user["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_user", {"user_id": user["id"],
                                                            "date_of_birth": user["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text) == {"verified": True,
                                                                                      "user_id": user["id"]}


def test_priority_change_recomputes_the_due_date_and_closed_tickets_stay_closed(backend, runtime):
    data = task("set_priority_easy", 0)
    ticket = seed_row(data, "tickets")
    assert ticket["priority"] != "critical"
    rt = runtime(data)
    results, final = run_tools(backend, rt, [("set_ticket_priority", {"ticket_id": ticket["id"], "priority": " Critical "}),
                                        ("close_ticket", {"ticket_id": ticket["id"], "resolution": "resolved"}),
                                        ("set_ticket_priority", {"ticket_id": ticket["id"], "priority": "low"}),
                                        ("close_ticket", {"ticket_id": ticket["id"], "resolution": "fixed"})])
    assert not results[0].is_error and not results[1].is_error
    assert results[2].is_error and "closed" in results[2].text
    assert results[3].is_error and "resolution must be one of" in results[3].text
    after = state_row(final, "tickets", ticket["id"])
    due = dt.date.fromisoformat(ticket["created_on"]) + dt.timedelta(days=1)  # critical: 1 day after creation
    assert after["due_on"] == due.isoformat() == json.loads(results[0].text)["due_on"]
    assert (after["priority"], after["status"], after["resolution"]) == ("critical", "closed", "resolved")


def test_licence_seats_are_counted_and_cannot_be_overdrawn(backend, runtime):
    data = task("licence_no_seat_hard", 0)
    pool, user = seed_row(data, "licences"), seed_row(data, "users")
    rt = runtime(data)
    (full,), _ = run_tools(backend, rt, [("assign_licence", {"user_id": user["id"], "licence_id": pool["id"]})])
    assert full.is_error and "no free seat" in full.text
    data = task("offboard_leaver_hard", 1)
    grant = seed_row(data, "licence_assignments")
    rt = runtime(data)
    results, final = run_tools(backend, rt, [("revoke_licence", {"assignment_id": grant["id"]}),
                                        ("revoke_licence", {"assignment_id": grant["id"]})])
    assert not results[0].is_error and "already revoked" in results[1].text
    pool = next(p for p in data["seed"]["rows"]["licences"] if p["id"] == grant["licence_id"])
    assert state_row(final, "licences", pool["id"])["seats_used"] == str(pool["seats_used"] - 1)


def test_accounts_assets_and_new_tickets(backend, runtime):
    data = task("offboard_leaver_hard", 0)
    leaver, device = data["seed"]["rows"]["users"][1], seed_row(data, "assets")
    rt = runtime(data)
    results, final = run_tools(backend, rt, [("disable_account", {"user_id": leaver["id"]}),
                                        ("unlock_account", {"user_id": leaver["id"]}),
                                        ("return_asset", {"asset_id": device["id"]}),
                                        ("return_asset", {"asset_id": device["id"]}),
                                        ("create_ticket", {"requester_id": leaver["id"], "category": "security",
                                                           "priority": "high", "subject": "x"})])
    assert [r.is_error for r in results] == [False, True, False, True, False]
    assert "disabled, not locked" in results[1].text and "not assigned" in results[3].text
    created = json.loads(results[4].text)
    assert created["due_on"] == "2026-05-14"  # today + 3 days for high
    assert state_row(final, "assets", device["id"])["assigned_user_id"] is None
    assert state_row(final, "tickets", created["ticket_id"])["requester_id"] == str(leaver["id"])


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("unlock_account_medium", 0))
    for extra in HELPDESK.distractors:
        (result,), final = run_tools(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    base_tickets = {r["id"] for r in base_rows()["tickets"]}
    assert HELPDESK.distractors[0]["arguments"]["ticket_id"] in base_tickets
