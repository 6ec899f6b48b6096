"""What every bundled domain's generated tasks share, one parametrized test per property (the
domain-specific rules stay in tests/domains/test_<domain>.py): generation is deterministic and
depends on the seed; each task loads, names real tools and arguments and writes; references fit
the scripted user and hold back the private facts; task rows never collide with the base seed;
the reference passes and every single fault fails; an oracle episode with the scripted user
passes and the do-nothing agent fails. Training domains: easy families are one obvious write."""

import asyncio
import json
import time
from collections import Counter

import pytest

from tbx.catalog import load_domain_task
from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.grading import grade_state, same_changes
from tbx.grading.judge import EvidenceJudge
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks import load_task
from tbx.tasks.mutations import mutate
from tests.helpers.episodes import world_of

from .harness import BUNDLED, TRAINING, families_of, pick, replay

# (fewest tasks, fewest families, fewest tasks of one family) a domain must have
SIZES = {"auto_insurance": (105, 9, 11), "consulting": (105, 9, 11), "neobank": (105, 9, 10),
         "retail": (105, 9, 10), "travel": (60, 6, 6), "clinic": (60, 6, 8), "helpdesk": (60, 6, 8),
         "hr_payroll": (60, 6, 8)}
# the private facts the opening message must not give away (every fact where not listed)
WITHHELD = {"auto_insurance": ("policy_number", "date_of_birth"), "travel": ("employee_id",),
            "neobank": ("customer_number", "date_of_birth", "card_last4"),
            "consulting": ("client_code", "consultant_id")}
# three families per domain whose third task is played as a whole episode
EPISODES = {"auto_insurance": ("claim_adjuster_review", "add_driver_underage", "identity_mismatch"),
            "consulting": ("invoice_credit_approval", "time_correction_closed_period", "expense_review"),
            "neobank": ("transfer_capped_by_limit", "new_payee_transfer", "identity_mismatch"),
            "retail": ("exchange_unavailable", "goodwill_needs_approval", "identity_mismatch"),
            "travel": ("downgrade_needs_approval", "rebook_flight", "identity_mismatch"),
            "clinic": ("cancel_appointment_easy", "insurance_update_medium", "specialist_needs_referral_hard"),
            "helpdesk": ("set_priority_easy", "chase_within_sla_medium", "offboard_leaver_hard"),
            "hr_payroll": ("cancel_leave_easy", "leave_as_unpaid_hard", "process_expenses_hard")}


def test_the_tables_name_every_bundled_domain():
    assert set(SIZES) == set(EPISODES) == set(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_generation_is_fast_deterministic_and_depends_on_the_seed(name):
    domain = get_domain(name)
    tasks = domain.generate_tasks(0)
    start = time.perf_counter()
    again = domain.generate_tasks(0)
    assert time.perf_counter() - start < 1.0
    assert json.dumps(again, sort_keys=True) == json.dumps(tasks, sort_keys=True)  # JSON types only
    other = domain.generate_tasks(1)
    assert json.dumps(other, sort_keys=True) != json.dumps(tasks, sort_keys=True)
    assert {t["id"] for t in other}.isdisjoint({t["id"] for t in tasks})  # the seed is part of the id
    assert len({t["id"] for t in tasks}) == len(tasks)
    assert domain.base_rows() == domain.base_rows()


@pytest.mark.parametrize("name", BUNDLED)
def test_enough_tasks_in_enough_families_of_the_domains_split(name):
    domain, (least, kinds, each) = get_domain(name), SIZES[name]
    tasks = domain.generate_tasks(0)
    families = Counter(t["family"] for t in tasks)
    assert len(tasks) >= least and len(families) >= kinds and min(families.values()) >= each, families
    assert {t["split"] for t in tasks} == {domain.split}


@pytest.mark.parametrize("name", TRAINING)
def test_training_families_carry_difficulty_labels(name):
    families = Counter(t["family"] for t in get_domain(name).generate_tasks(0))
    levels = Counter(f.rsplit("_", 1)[1] for f in families)
    assert set(levels) == {"easy", "medium", "hard"} and levels["easy"] >= 2, levels
    assert all(n >= (10 if f.endswith("_easy") else 8) for f, n in families.items()), families


@pytest.mark.parametrize("name", BUNDLED)
def test_every_task_loads_and_names_real_tools_and_arguments(name):
    domain = get_domain(name)
    tools = {spec.name: spec for spec in domain.tools}
    for i, data in enumerate(domain.generate_tasks(0)):
        loaded = load_task(data, f"{name}#{i}", domain.policy)
        assert loaded.domain == name and loaded.split == domain.split and loaded.policy == domain.policy
        load_domain_task(data, f"{name}#{i}")  # tables, columns and tools checked against the domain
        assert loaded.checks.expected, data["id"]
        for step in loaded.reference:
            if step.tool:
                assert step.tool in tools, (data["id"], step.tool)
                assert set(step.arguments) <= set(tools[step.tool].argument_names), (data["id"], step)
        assert any(step.tool and tools[step.tool].kind == "write" for step in loaded.reference)


@pytest.mark.parametrize("name", BUNDLED)
def test_references_fit_the_scripted_user_and_need_the_private_facts(name):
    for data in get_domain(name).generate_tasks(0):
        facts = data["user"]["private_facts"]
        keywords = [k for fact in facts.values() for k in fact["keywords"]]
        says = [s["say"] for s in data["reference"] if "say" in s]
        assert data["reference"][-1] == {"say": says[-1]}, data["id"]  # the episode ends on the statement
        for question in says[:-1]:
            assert "?" in question and any(k in question.lower() for k in keywords), (data["id"], question)
        assert "?" not in says[-1] and not any(k in says[-1].lower() for k in keywords), (data["id"], says[-1])
        asked = " ".join(says[:-1]).lower()
        for fact_name, fact in facts.items():  # every fact is asked for
            assert any(k in asked for k in fact["keywords"]), (data["id"], fact_name)
        opening = data["user"]["opening_message"]
        for fact_name in set(WITHHELD.get(name, facts)) & set(facts):  # held-back facts are held back
            assert str(facts[fact_name]["value"]) not in opening, (data["id"], fact_name)


@pytest.mark.parametrize("name", BUNDLED)
def test_task_rows_never_collide_with_base_rows(name):
    domain = get_domain(name)
    base_keys = {table: {r["id"] for r in table_rows} for table, table_rows in domain.base_rows().items()}
    for data in domain.generate_tasks(0):
        for table, table_rows in data["seed"]["rows"].items():
            ids = [r["id"] for r in table_rows]
            assert len(set(ids)) == len(ids) and base_keys.get(table, set()).isdisjoint(ids), (data["id"], table)


@pytest.mark.parametrize(("name", "family"), [(n, f) for n in BUNDLED for f in families_of(n)])
def test_reference_passes_and_single_faults_fail(backend, runtime, name, family):
    domain = get_domain(name)
    rt = runtime(pick(domain.generate_tasks(0), family, 1))  # fails unless the reference meets its checks
    assert grade_state(rt.initial, rt.initial, rt.expected, rt.volatile).passed is False
    mutations = mutate(rt.task.reference, {spec.name: spec for spec in domain.tools}, domain.distractors)
    assert {m.kind for m in mutations} >= {"drop_write", "extra_write"}
    reference = replay(backend, rt, rt.task.reference)
    for mutation in mutations:
        final = replay(backend, rt, mutation.steps)
        grade = grade_state(rt.initial, final, rt.expected, rt.volatile)
        if grade.passed and same_changes(rt.initial, final, reference):
            continue  # equivalent: a verification that fails by design, dropped or changed: no write
        assert grade.passed is False, (rt.task.id, mutation.description)


@pytest.mark.parametrize(("name", "family"), [(n, f) for n, fs in EPISODES.items() for f in fs])
def test_oracle_episode_with_scripted_user_passes_and_null_fails(backend, runtime, name, family):
    rt = runtime(pick(get_domain(name).generate_tasks(0), family, 2))
    judge = EvidenceJudge()  # the default: a family may have a judge rule
    good = asyncio.run(run_episode(world_of(backend, judge=judge), rt, OraclePolicy(), 0, 0))
    assert good.outcome is Outcome.SUCCESS and good.ended_by == "user_stop", good.cause
    bad = asyncio.run(run_episode(world_of(backend, judge=judge), rt, NullPolicy(), 0, 0))
    assert bad.outcome is Outcome.FAILURE


@pytest.mark.parametrize("name", TRAINING)
def test_easy_tasks_are_one_obvious_write_with_every_fact_in_the_opening(name):
    domain = get_domain(name)
    tasks = domain.generate_tasks(0)
    assert all(("tools" in t) == t["family"].endswith("_easy") for t in tasks)  # only easy tasks restrict
    for data in (t for t in tasks if t["family"].endswith("_easy")):
        calls = [s for s in data["reference"] if "tool" in s]
        assert len(calls) == 1 and domain.tool(calls[0]["tool"]).kind == "write", data["id"]
        assert data["user"]["private_facts"] == {} and data["turn_limit"] <= 10
        # a short tool list led by the two easy writes (the ones few-shot examples show), ending with
        # the first distractor's tool so the extra-write mutation can be played in an episode
        assert len(data["tools"]) <= 4 and list(data["tools"][:2]) == list(domain.tool_names[:2])
        assert calls[0]["tool"] in data["tools"] and domain.distractors[0]["tool"] in data["tools"]
        opening = data["user"]["opening_message"]
        assert calls[0]["tool"].split("_")[0] in opening.lower()  # "cancel ...", "set ... priority"
        assert all(str(v) in opening for v in calls[0]["arguments"].values()), data["id"]
        assert "verify" not in json.dumps(data["reference"])
