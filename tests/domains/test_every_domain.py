"""Every bundled domain's tasks are valid: the oracle passes all, the null agent fails all, and
every single-fault mutation of each family's reference fails with the faulty record named.
Judge rules are decided by the evidence judge, the default."""

import asyncio
from collections import defaultdict

from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.grading.judge import EvidenceJudge
from tbx.policies.reference import NullPolicy, OraclePolicy, ScriptAgent, turns_from_steps
from tbx.tasks.mutations import mutate
from tests.helpers.episodes import world_of


class StepsPolicy(NullPolicy):
    def __init__(self, steps):
        self.steps = steps

    def agent(self, context):
        return ScriptAgent(turns_from_steps(self.steps))


def play_all(runtimes, backend, policies):
    async def go():
        return await asyncio.gather(*(run_episode(world_of(backend, judge=EvidenceJudge()), rt, policy, 0, 0)
                                      for rt, policy in zip(runtimes, policies, strict=True)))
    return asyncio.run(go())


def test_oracle_passes_every_task(domain_runtimes):
    _, backend, runtimes = domain_runtimes
    results = play_all(runtimes, backend, [OraclePolicy()] * len(runtimes))
    failed = [(r.task_id, r.outcome.value, r.cause) for r in results if r.outcome is not Outcome.SUCCESS]
    assert not failed, failed


def test_null_agent_fails_every_task(domain_runtimes):
    _, backend, runtimes = domain_runtimes
    results = play_all(runtimes, backend, [NullPolicy()] * len(runtimes))
    passed = [r.task_id for r in results if r.outcome is not Outcome.FAILURE]
    assert not passed, passed


def test_every_family_mutation_fails_naming_the_record(domain_runtimes):
    name, backend, runtimes = domain_runtimes
    domain = get_domain(name)
    tools = {spec.name: spec for spec in domain.tools}
    by_family = defaultdict(list)
    for runtime in runtimes:
        by_family[runtime.task.family].append(runtime)
    survivors, kinds, equivalent = [], set(), []
    for family, members in sorted(by_family.items()):
        runtime = members[0]
        mutations = mutate(runtime.task.reference, tools, domain.distractors)
        assert {m.kind for m in mutations} >= {"drop_write", "extra_write"}, family
        oracle, *results = play_all([runtime] * (len(mutations) + 1), backend,
                                    [OraclePolicy()] + [StepsPolicy(m.steps) for m in mutations])
        for mutation, result in zip(mutations, results, strict=True):
            kinds.add(mutation.kind)
            if result.outcome is Outcome.SUCCESS and runtime.is_equivalent(result, oracle):
                equivalent.append((family, mutation.description))  # e.g. dropping a verification that failed
                continue
            failed = result.grade.failed_checks if result.grade else ()
            named = any(c.rows or "missing" in c.detail for c in failed)
            if result.outcome is not Outcome.FAILURE or not named:
                survivors.append((family, mutation.description, result.outcome.value, result.cause))
    assert not survivors, survivors
    assert kinds == {"drop_write", "wrong_value", "extra_write"}
    # only the verifications that fail by design (an impostor's) may be dropped or changed unseen
    assert all(("identity" in family or "unauthorized" in family) and ("verify" in what or "authenticate" in what)
               for family, what in equivalent), equivalent
