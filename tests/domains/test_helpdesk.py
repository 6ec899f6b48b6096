"""The helpdesk training domain: deterministic generation, easy families a small model can solve,
tasks the scripted user can play, tools that fail clearly, and checks that pass the reference and
fail the do-nothing agent and single faults."""

import asyncio
import datetime as dt
import inspect
import json
import re
from collections import Counter
from typing import get_args

import pytest

from tbx.backend import dump_state
from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import load_domain_task, prepare_task
from tbx.domains import get_domain
from tbx.domains.helpdesk.seed import SLA_DAYS, TODAY, base_rows
from tbx.episodes import Outcome, run_episode
from tbx.grading import grade_state, same_changes
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks import load_task
from tbx.tasks.mutations import mutate
from tbx.tools.runtime import invoke
from tbx.users.scripted import ScriptedUser

HELPDESK = get_domain("helpdesk")
TOOLS = {spec.name: spec for spec in HELPDESK.tools}
TASKS = HELPDESK.generate_tasks(0)
FAMILIES = sorted({t["family"] for t in TASKS})


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = SQLiteBackend(str(tmp_path_factory.mktemp("helpdesk")))
    yield b
    b.close()


@pytest.fixture(scope="module")
def runtime(backend):
    cache = {}

    def get(data: dict):
        if data["id"] not in cache:  # prepare_task fails unless the reference meets the task's checks
            cache[data["id"]] = prepare_task(load_domain_task(data, data["id"]), backend)
        return cache[data["id"]]

    return get


def play(backend, rt, calls: list[tuple[str, dict]]):
    """Run tool calls on a fresh clone of the task's template; return (results, terminal state)."""
    db = backend.clone(rt.template)
    try:
        results = [invoke(TOOLS[name], db.engine, arguments) for name, arguments in calls]
        return results, dump_state(db.engine, HELPDESK.metadata)
    finally:
        backend.drop(db)


def row(state: dict, table: str, key: int) -> dict:
    return next(r for r in state[table]["rows"] if r["id"] == str(key))


def test_generation_is_fast_deterministic_and_depends_on_the_seed():
    assert json.dumps(HELPDESK.generate_tasks(0), sort_keys=True) == json.dumps(TASKS, sort_keys=True)
    other = HELPDESK.generate_tasks(1)
    assert json.dumps(other, sort_keys=True) != json.dumps(TASKS, sort_keys=True)
    assert {t["id"] for t in other}.isdisjoint({t["id"] for t in TASKS})
    assert len({t["id"] for t in TASKS}) == len(TASKS)
    assert base_rows() == base_rows()


def test_counts_families_and_difficulty_labels():
    families = Counter(t["family"] for t in TASKS)
    assert len(TASKS) >= 60 and len(families) >= 6, families
    levels = Counter(f.rsplit("_", 1)[1] for f in families)
    assert set(levels) == {"easy", "medium", "hard"} and levels["easy"] >= 2, levels
    assert all(n >= (10 if f.endswith("_easy") else 8) for f, n in families.items()), families
    assert all(t["split"] == "train" for t in TASKS) and HELPDESK.split == "train"


def test_every_task_loads_and_names_real_tools_and_arguments():
    for data in TASKS:
        loaded = load_task(data, data["id"], HELPDESK.policy)
        load_domain_task(data, data["id"])  # tables, columns and tools checked against the domain
        assert loaded.checks.expected and loaded.split == "train", data["id"]
        for step in loaded.reference:
            if step.tool:
                assert set(step.arguments) <= set(TOOLS[step.tool].argument_names), (data["id"], step)
        assert any(step.tool and TOOLS[step.tool].kind == "write" for step in loaded.reference)


def test_easy_tasks_are_one_obvious_write_with_every_fact_in_the_opening():
    for data in (t for t in TASKS if t["family"].endswith("_easy")):
        calls = [s for s in data["reference"] if "tool" in s]
        assert len(calls) == 1 and TOOLS[calls[0]["tool"]].kind == "write", data["id"]
        assert data["user"]["private_facts"] == {} and data["turn_limit"] <= 10
        # a short tool list led by the two easy writes (the ones few-shot examples show), ending with
        # the first distractor's tool so the extra-write mutation can be played in an episode
        assert len(data["tools"]) <= 4 and list(data["tools"][:2]) == list(HELPDESK.tool_names[:2])
        assert calls[0]["tool"] in data["tools"] and HELPDESK.distractors[0]["tool"] in data["tools"]
        opening = data["user"]["opening_message"]
        assert calls[0]["tool"].split("_")[0] in opening.lower()  # "set ... priority", "close ..."
        for value in calls[0]["arguments"].values():
            assert str(value) in opening, (data["id"], value)
        assert "verify" not in json.dumps(data["reference"])


def test_only_easy_tasks_restrict_tools_and_closed_choices_are_enums():
    assert all(("tools" in t) == t["family"].endswith("_easy") for t in TASKS)
    hint = inspect.signature(TOOLS["close_ticket"].fn).parameters["resolution"].annotation
    assert get_args(hint) == ("resolved", "duplicate", "wont_fix")  # the agent's schema lists them as an enum


def test_references_fit_the_scripted_user():
    for data in TASKS:
        facts = data["user"]["private_facts"]
        keywords = [k for fact in facts.values() for k in fact["keywords"]]
        says = [s["say"] for s in data["reference"] if "say" in s]
        assert data["reference"][-1] == {"say": says[-1]}, data["id"]
        for question in says[:-1]:
            assert "?" in question and any(k in question.lower() for k in keywords), (data["id"], question)
        assert "?" not in says[-1] and not any(k in says[-1].lower() for k in keywords), (data["id"], says[-1])
        asked = " ".join(says[:-1]).lower()
        assert all(any(k in asked for k in f["keywords"]) for f in facts.values()), data["id"]
        for fact in facts.values():  # held-back facts are really held back
            assert str(fact["value"]) not in data["user"]["opening_message"], data["id"]


def test_task_rows_never_collide_with_base_rows():
    base = {table: {r["id"] for r in rows} for table, rows in base_rows().items()}
    software = {r["software"] for r in base_rows()["licences"]}
    for data in TASKS:
        for table, rows in data["seed"]["rows"].items():
            ids = [r["id"] for r in rows]
            assert len(set(ids)) == len(ids) and base.get(table, set()).isdisjoint(ids), (data["id"], table)
        assert software.isdisjoint(r["software"] for r in data["seed"]["rows"].get("licences", []))


def test_policy_states_the_rules_the_tasks_check():
    policy = HELPDESK.policy
    assert f"Today is **{TODAY.isoformat()}**" in policy
    sla = dict(re.findall(r"(critical|high|medium|low) (\d+) day", policy))
    assert {p: int(d) for p, d in sla.items()} == SLA_DAYS
    for phrase in ("no identity verification", "employee ID and date of birth", "on call", "**public**",
                   "category `licence`", "`security`", "manager_id"):
        assert phrase in policy, phrase


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_passes_and_single_faults_fail(backend, runtime, family):
    rt = runtime(task(family, 1))
    assert grade_state(rt.initial, rt.initial, rt.expected, rt.volatile).passed is False
    mutations = mutate(rt.task.reference, TOOLS, HELPDESK.distractors)
    assert {m.kind for m in mutations} >= {"drop_write", "extra_write"}
    _, reference = play(backend, rt, [(s.tool, s.arguments) for s in rt.task.reference if s.tool])
    for mutation in mutations:
        _, final = play(backend, rt, [(s.tool, s.arguments) for s in mutation.steps if s.tool])
        passed = grade_state(rt.initial, final, rt.expected, rt.volatile).passed
        if passed and same_changes(rt.initial, final, reference):
            continue  # equivalent: a verification that fails by design, dropped or changed: no write
        assert passed is False, mutation.description


@pytest.mark.parametrize("family", ["set_priority_easy", "chase_within_sla_medium", "offboard_leaver_hard"])
def test_oracle_episode_with_scripted_user_passes_and_null_fails(backend, runtime, family):
    rt = runtime(task(family, 2))
    good = asyncio.run(run_episode(rt, backend, OraclePolicy(), ScriptedUser(), None, 0, 0))
    assert good.outcome is Outcome.SUCCESS and good.ended_by == "user_stop", good.cause
    bad = asyncio.run(run_episode(rt, backend, NullPolicy(), ScriptedUser(), None, 0, 0))
    assert bad.outcome is Outcome.FAILURE


def test_escalating_a_ticket_within_its_sla_fails_the_task(backend, runtime):
    data = task("chase_within_sla_medium", 0)
    rt = runtime(data)
    ticket_id = seed_row(data, "tickets")["id"]
    assert seed_row(data, "tickets")["due_on"] >= TODAY.isoformat()
    _, final = play(backend, rt, [("escalate_ticket", {"ticket_id": ticket_id, "reason": "chased"}),
                                  ("add_comment", {"ticket_id": ticket_id, "visibility": "public", "body": "x"})])
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "escalations" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("close_ticket_easy", 0))
    results, _ = play(backend, rt, [("get_ticket", {"ticket_id": 3999}), ("get_user", {"user_id": 99}),
                                    ("find_licence", {"software": "Nope"}), ("list_technicians", {"team": "x"}),
                                    ("close_ticket", {"ticket_id": 3999, "resolution": "resolved"})])
    assert [r.is_error for r in results] == [True] * 5
    assert "ticket 3999 not found" in results[0].text and "user 99 not found" in results[1].text
    assert "no licence pool" in results[2].text and "team must be one of" in results[3].text


def test_verify_user_needs_the_right_birth_date(backend, runtime):
    data = task("unlock_account_medium", 0)
    user = seed_row(data, "users")
    rt = runtime(data)
    (wrong, right), _ = play(backend, rt, [("verify_user", {"user_id": user["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_user", {"user_id": user["id"],
                                                            "date_of_birth": user["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text) == {"verified": True,
                                                                                      "user_id": user["id"]}


def test_priority_change_recomputes_the_due_date_and_closed_tickets_stay_closed(backend, runtime):
    data = task("set_priority_easy", 0)
    ticket = seed_row(data, "tickets")
    assert ticket["priority"] != "critical"
    rt = runtime(data)
    results, final = play(backend, rt, [("set_ticket_priority", {"ticket_id": ticket["id"], "priority": " Critical "}),
                                        ("close_ticket", {"ticket_id": ticket["id"], "resolution": "resolved"}),
                                        ("set_ticket_priority", {"ticket_id": ticket["id"], "priority": "low"}),
                                        ("close_ticket", {"ticket_id": ticket["id"], "resolution": "fixed"})])
    assert not results[0].is_error and not results[1].is_error
    assert results[2].is_error and "closed" in results[2].text
    assert results[3].is_error and "resolution must be one of" in results[3].text
    after = row(final, "tickets", ticket["id"])
    due = dt.date.fromisoformat(ticket["created_on"]) + dt.timedelta(days=1)  # critical: 1 day after creation
    assert after["due_on"] == due.isoformat() == json.loads(results[0].text)["due_on"]
    assert (after["priority"], after["status"], after["resolution"]) == ("critical", "closed", "resolved")


def test_licence_seats_are_counted_and_cannot_be_overdrawn(backend, runtime):
    data = task("licence_no_seat_hard", 0)
    pool, user = seed_row(data, "licences"), seed_row(data, "users")
    rt = runtime(data)
    (full,), _ = play(backend, rt, [("assign_licence", {"user_id": user["id"], "licence_id": pool["id"]})])
    assert full.is_error and "no free seat" in full.text
    data = task("offboard_leaver_hard", 1)
    grant = seed_row(data, "licence_assignments")
    rt = runtime(data)
    results, final = play(backend, rt, [("revoke_licence", {"assignment_id": grant["id"]}),
                                        ("revoke_licence", {"assignment_id": grant["id"]})])
    assert not results[0].is_error and "already revoked" in results[1].text
    pool = next(p for p in data["seed"]["rows"]["licences"] if p["id"] == grant["licence_id"])
    assert row(final, "licences", pool["id"])["seats_used"] == str(pool["seats_used"] - 1)


def test_accounts_assets_and_new_tickets(backend, runtime):
    data = task("offboard_leaver_hard", 0)
    leaver, device = data["seed"]["rows"]["users"][1], seed_row(data, "assets")
    rt = runtime(data)
    results, final = play(backend, rt, [("disable_account", {"user_id": leaver["id"]}),
                                        ("unlock_account", {"user_id": leaver["id"]}),
                                        ("return_asset", {"asset_id": device["id"]}),
                                        ("return_asset", {"asset_id": device["id"]}),
                                        ("create_ticket", {"requester_id": leaver["id"], "category": "security",
                                                           "priority": "high", "subject": "x"})])
    assert [r.is_error for r in results] == [False, True, False, True, False]
    assert "disabled, not locked" in results[1].text and "not assigned" in results[3].text
    created = json.loads(results[4].text)
    assert created["due_on"] == "2026-05-14"  # today + 3 days for high
    assert row(final, "assets", device["id"])["assigned_user_id"] is None
    assert row(final, "tickets", created["ticket_id"])["requester_id"] == str(leaver["id"])


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("unlock_account_medium", 0))
    for extra in HELPDESK.distractors:
        (result,), final = play(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    base_tickets = {r["id"] for r in base_rows()["tickets"]}
    assert HELPDESK.distractors[0]["arguments"]["ticket_id"] in base_tickets
