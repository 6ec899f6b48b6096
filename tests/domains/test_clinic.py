"""The clinic training domain: deterministic generation, easy families a small model can solve,
tasks the scripted user can play, tools that fail clearly, and checks that pass the reference
and fail the do-nothing agent, single faults and the policy's tempting shortcuts."""

import asyncio
import inspect
import json
from collections import Counter
from typing import get_args

import pytest

from tbx.backend import dump_state
from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import load_domain_task, prepare_task
from tbx.domains import get_domain
from tbx.domains.clinic.seed import LATE_CANCEL_FEE, NO_SHOW_FEE, TODAY, base_rows, day
from tbx.episodes import Outcome, run_episode
from tbx.grading import grade_state, same_changes
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks import load_task
from tbx.tasks.mutations import mutate
from tbx.tools.runtime import invoke
from tbx.users.scripted import ScriptedUser

CLINIC = get_domain("clinic")
TOOLS = {spec.name: spec for spec in CLINIC.tools}
TASKS = CLINIC.generate_tasks(0)
FAMILIES = sorted({t["family"] for t in TASKS})


def task(family: str, index: int = 0) -> dict:
    return [t for t in TASKS if t["family"] == family][index]


def seed_row(data: dict, table: str, position: int = 0) -> dict:
    return data["seed"]["rows"][table][position]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = SQLiteBackend(str(tmp_path_factory.mktemp("clinic")))
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
        return results, dump_state(db.engine, CLINIC.metadata)
    finally:
        backend.drop(db)


def row(state: dict, table: str, key: int) -> dict:
    return next(r for r in state[table]["rows"] if r["id"] == str(key))


def test_generation_is_deterministic_and_depends_on_the_seed():
    assert json.dumps(CLINIC.generate_tasks(0), sort_keys=True) == json.dumps(TASKS, sort_keys=True)
    other = CLINIC.generate_tasks(1)
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
    assert all(t["split"] == "train" for t in TASKS) and CLINIC.split == "train"


def test_every_task_loads_and_names_real_tools_and_arguments():
    for data in TASKS:
        loaded = load_task(data, data["id"], CLINIC.policy)
        load_domain_task(data, data["id"])
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
        assert len(data["tools"]) <= 4 and list(data["tools"][:2]) == list(CLINIC.tool_names[:2])
        assert calls[0]["tool"] in data["tools"] and CLINIC.distractors[0]["tool"] in data["tools"]
        opening = data["user"]["opening_message"]
        assert calls[0]["tool"].split("_")[0] in opening.lower()  # "cancel ...", "check in ..."
        assert all(str(v) in opening for v in calls[0]["arguments"].values()), data["id"]


def test_only_easy_tasks_restrict_tools_and_closed_choices_are_enums():
    assert all(("tools" in t) == t["family"].endswith("_easy") for t in TASKS)
    hint = inspect.signature(TOOLS["add_charge"].fn).parameters["kind"].annotation
    assert get_args(hint) == ("late_cancel_fee", "no_show_fee")  # the agent's schema lists them as an enum


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
        for fact in facts.values():
            assert str(fact["value"]) not in data["user"]["opening_message"], data["id"]


def test_task_rows_never_collide_with_base_rows_or_base_slots():
    base = {table: {r["id"] for r in rows} for table, rows in base_rows().items()}
    assert max(s["date"] for s in base_rows()["slots"]) <= day(5)
    for data in TASKS:
        for table, rows in data["seed"]["rows"].items():
            ids = [r["id"] for r in rows]
            assert len(set(ids)) == len(ids) and base.get(table, set()).isdisjoint(ids), (data["id"], table)
        if "referral" in data["family"] or "specialist" in data["family"]:  # booking dates see only task slots
            assert min(s["date"] for s in data["seed"]["rows"]["slots"]) > day(5)


def test_policy_states_the_rules_the_tasks_check():
    policy = CLINIC.policy
    assert f"Today is **{TODAY.isoformat()}**" in policy
    for phrase in (f"${LATE_CANCEL_FEE} late-cancellation fee", f"${NO_SHOW_FEE} no-show fee", "first no-show",
                   "no identity verification", "patient number and date of birth", "**today or tomorrow**",
                   "`expires_on` is on or after", "not a controlled substance", "`eligible`",
                   "`identity_verification_failed`"):
        assert phrase in policy, phrase


def test_fees_follow_the_calendar_and_the_no_show_history():
    for data in (t for t in TASKS if t["family"] in ("cancel_appointment_easy", "late_cancel_fee_medium")):
        date = seed_row(data, "slots")["date"]
        charged = any(c["table"] == "charges" for c in data["checks"]["expected"])
        assert charged == (date <= day(1)), data["id"]
    for data in (t for t in TASKS if t["family"] == "no_show_medium"):
        earlier = any(a["status"] == "no_show" for a in data["seed"]["rows"]["appointments"])
        assert earlier == any(c["table"] == "charges" for c in data["checks"]["expected"]), data["id"]


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_passes_and_single_faults_fail(backend, runtime, family):
    rt = runtime(task(family, 1))
    assert grade_state(rt.initial, rt.initial, rt.expected, rt.volatile).passed is False
    mutations = mutate(rt.task.reference, TOOLS, CLINIC.distractors)
    assert {m.kind for m in mutations} >= {"drop_write", "extra_write"}
    _, reference = play(backend, rt, [(s.tool, s.arguments) for s in rt.task.reference if s.tool])
    for mutation in mutations:
        _, final = play(backend, rt, [(s.tool, s.arguments) for s in mutation.steps if s.tool])
        passed = grade_state(rt.initial, final, rt.expected, rt.volatile).passed
        if passed and same_changes(rt.initial, final, reference):
            continue  # equivalent: a verification that fails by design, dropped or changed: no write
        assert passed is False, mutation.description


@pytest.mark.parametrize("family", ["cancel_appointment_easy", "insurance_update_medium",
                                    "specialist_needs_referral_hard"])
def test_oracle_episode_with_scripted_user_passes_and_null_fails(backend, runtime, family):
    rt = runtime(task(family, 2))
    good = asyncio.run(run_episode(rt, backend, OraclePolicy(), ScriptedUser(), None, 0, 0))
    assert good.outcome is Outcome.SUCCESS and good.ended_by == "user_stop", good.cause
    bad = asyncio.run(run_episode(rt, backend, NullPolicy(), ScriptedUser(), None, 0, 0))
    assert bad.outcome is Outcome.FAILURE


def test_refilling_a_controlled_substance_fails_the_task(backend, runtime):
    data = next(t for t in TASKS if t["family"] == "refill_needs_renewal_hard"
                and seed_row(t, "prescriptions")["controlled"])
    rt = runtime(data)
    script = seed_row(data, "prescriptions")
    (result,), final = play(backend, rt, [("refill_prescription", {"prescription_id": script["id"]})])
    assert not result.is_error  # the tool allows it: the policy is the agent's to follow
    grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
    assert grade.passed is False and "prescriptions" in grade.explain()


# --- tools, through invoke on a clone of a task's template -------------------------------------

def test_lookups_and_writes_fail_clearly_for_unknown_records(backend, runtime):
    rt = runtime(task("check_in_easy", 0))
    results, _ = play(backend, rt, [("get_appointment", {"appointment_id": 3999}),
                                    ("get_patient", {"patient_id": 99}),
                                    ("find_slots", {"specialty": "dentistry", "date": day(9)}),
                                    ("check_eligibility", {"plan_name": "Nope", "member_id": "M1"}),
                                    ("cancel_appointment", {"appointment_id": 3999})])
    assert [r.is_error for r in results] == [True] * 5
    assert "appointment 3999 not found" in results[0].text and "patient 99 not found" in results[1].text
    assert "specialty must be" in results[2].text and "no insurance plan" in results[3].text


def test_verify_patient_needs_the_right_birth_date(backend, runtime):
    data = task("refill_medium", 0)
    who = seed_row(data, "patients")
    rt = runtime(data)
    (wrong, right), _ = play(backend, rt, [("verify_patient", {"patient_id": who["id"], "date_of_birth": "1900-01-01"}),
                                           ("verify_patient", {"patient_id": who["id"],
                                                               "date_of_birth": who["date_of_birth"]})])
    assert json.loads(wrong.text)["verified"] is False and json.loads(right.text)["verified"] is True


def test_appointment_state_changes_and_their_invariants(backend, runtime):
    data = task("late_cancel_fee_medium", 1)  # odd instances are tomorrow
    visit, held, who = seed_row(data, "appointments"), seed_row(data, "slots"), seed_row(data, "patients")
    rt = runtime(data)
    results, final = play(backend, rt, [
        ("get_appointment", {"appointment_id": visit["id"]}),
        ("check_in_appointment", {"appointment_id": visit["id"]}),
        ("mark_no_show", {"appointment_id": visit["id"]}),
        ("add_charge", {"patient_id": who["id"] + 1, "appointment_id": visit["id"], "kind": "late_cancel_fee",
                        "amount": 40}),
        ("add_charge", {"patient_id": who["id"], "appointment_id": visit["id"], "kind": "parking", "amount": 40}),
        ("cancel_appointment", {"appointment_id": visit["id"]}),
        ("cancel_appointment", {"appointment_id": visit["id"]})])
    assert json.loads(results[0].text)["days_until"] == 1
    assert [r.is_error for r in results[1:]] == [True, True, True, True, False, True]
    assert "not today" in results[1].text and "still in the future" in results[2].text
    assert "is not patient" in results[3].text and "kind must be one of" in results[4].text
    assert "cancelled, not booked" in results[6].text
    assert row(final, "slots", held["id"])["status"] == "open"


def test_booking_uses_the_referral_and_the_slot_once(backend, runtime):
    data = task("book_specialist_medium", 0)
    who, referral = seed_row(data, "patients"), seed_row(data, "referrals")
    free = seed_row(data, "slots")
    rt = runtime(data)
    results, final = play(backend, rt, [
        ("find_slots", {"specialty": referral["specialty"], "date": free["date"]}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": free["id"], "referral_id": referral["id"]}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": free["id"], "referral_id": 0}),
        ("book_appointment", {"patient_id": who["id"], "slot_id": seed_row(data, "slots", 1)["id"],
                              "referral_id": referral["id"]})])
    assert len(json.loads(results[0].text)) == 2  # the booked third slot is not offered
    assert [r.is_error for r in results[1:]] == [False, True, True]
    assert "already booked" in results[2].text and "not an active referral" in results[3].text
    assert row(final, "referrals", referral["id"])["status"] == "used"


def test_prescriptions_insurance_and_cases(backend, runtime):
    data = task("insurance_update_medium", 0)
    who, roster = seed_row(data, "patients"), data["seed"]["rows"]["insurance_members"]
    rt = runtime(data)
    plans = {p["id"]: p["name"] for p in base_rows()["insurance_plans"]}
    results, final = play(backend, rt, [
        ("check_eligibility", {"plan_name": plans[roster[0]["plan_id"]].upper(), "member_id": roster[0]["member_id"]}),
        ("check_eligibility", {"plan_name": plans[roster[1]["plan_id"]], "member_id": roster[1]["member_id"]}),
        ("update_insurance", {"patient_id": who["id"], "plan_id": roster[0]["plan_id"],
                              "member_id": roster[0]["member_id"].lower()}),
        ("open_front_desk_case", {"patient_id": who["id"], "category": "gossip", "summary": "x"})])
    assert json.loads(results[0].text)["eligible"] is True and json.loads(results[1].text)["eligible"] is False
    assert results[3].is_error and "category must be one of" in results[3].text
    assert row(final, "patients", who["id"])["insurance_member_id"] == roster[0]["member_id"]
    data = task("refill_needs_renewal_hard", 0)
    script = seed_row(data, "prescriptions")
    assert script["refills_remaining"] == 0
    (empty,), _ = play(backend, runtime(data), [("refill_prescription", {"prescription_id": script["id"]})])
    assert empty.is_error and "no refills left" in empty.text


def test_distractors_touch_base_records_only_and_fail_every_task(backend, runtime):
    rt = runtime(task("refill_medium", 0))
    for extra in CLINIC.distractors:
        (result,), final = play(backend, rt, [(extra["tool"], extra["arguments"])])
        assert not result.is_error, result.text
        assert grade_state(rt.initial, final, rt.expected, rt.volatile).passed is False
    assert CLINIC.distractors[0]["arguments"]["patient_id"] in {r["id"] for r in base_rows()["patients"]}
