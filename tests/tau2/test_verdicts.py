"""τ²'s tasks played in tbx get τ²'s verdicts: the gold actions pass every task of every split, the do-nothing
agent's verdicts are τ²'s on every task, every single-fault mutation of a write (replayed through
`policy=replay`) gets the verdict τ²'s own code gives the same actions, and τ²'s full evaluator (transcript
replay) agrees with tbx's verdict on stored transcripts.

The test command plays the gold actions on every task and the other comparisons on a fixed sample of each
domain's tasks (every SAMPLE_STRIDE-th, about 15 tasks a domain: τ²'s side rebuilds its whole database for
each verdict). TBX_TAU2_ALL=1 plays them on every task, as docs/tau2.md's figures were measured:
`TBX_TAU2_ALL=1 .venv/bin/python -m pytest tests/tau2/test_verdicts.py`."""

from __future__ import annotations

import json
import os

import pytest

from tbx.episodes import Outcome
from tbx.policies.reference import DONE, NullPolicy, OraclePolicy, ReplayPolicy
from tbx.tau2 import SOURCES
from tbx.tau2.grading import evaluate_transcript
from tbx.tau2.mutations import argument_values, mutants
from tbx.tau2.tasks import SAY_PREFIX, tau2_record

from .conftest import play, runtimes, tau2_communicate, tau2_reward

pytestmark = pytest.mark.slow
SAMPLE_STRIDE = {"tau2_airline": 5, "tau2_retail": 8}
SPLIT_SIZES = {"tau2_airline": {"train": 30, "test": 20}, "tau2_retail": {"train": 74, "test": 40}}


def _chosen(source: str) -> dict:
    """The tasks a comparison plays: every task with TBX_TAU2_ALL=1, else every SAMPLE_STRIDE-th one."""
    tasks = runtimes(source)
    if os.environ.get("TBX_TAU2_ALL") == "1":
        return tasks
    return {task_id: tasks[task_id] for task_id in list(tasks)[::SAMPLE_STRIDE[source]]}


def _said(record) -> list[str]:
    info = record.evaluation_criteria.communicate_info
    return [SAY_PREFIX + "; ".join(info)] if info else []


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_gold_actions_pass_every_task_of_every_split(source):
    tasks = runtimes(source)
    splits = {split: sum(rt.task.split == split for rt in tasks.values()) for split in ("train", "test")}
    assert splits == SPLIT_SIZES[source]
    results = play([(runtime, 0) for runtime in tasks.values()], OraclePolicy())
    failed = [(r.task_id, r.cause) for r in results if r.outcome is not Outcome.SUCCESS]
    assert not failed
    for result in results:  # τ²'s own communicate check on what the oracle said (its database check: below)
        said = [m.content for m in result.transcript if m.role == "assistant" and m.content]
        assert tau2_communicate(result.task_id, said) == 1.0


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_do_nothing_verdicts_are_tau2s(source):
    chosen = _chosen(source)
    results = play([(runtime, 0) for runtime in chosen.values()], NullPolicy())
    passed = {r.task_id for r in results if r.outcome is Outcome.SUCCESS}
    assert all(r.outcome in (Outcome.SUCCESS, Outcome.FAILURE) for r in results)
    tau2_passed = {r.task_id for r in results if tau2_reward(r.task_id, [], [DONE]) == 1.0}
    assert passed == tau2_passed
    if len(chosen) == len(runtimes(source)):
        assert len(passed) == {"tau2_airline": 19, "tau2_retail": 7}[source]  # τ²'s do-nothing passes (docs/tau2.md)
    print(f"{source}: {len(chosen)} tasks, {len(passed)} pass doing nothing, as τ²'s own verdicts")


def _write_tools(source):
    runtime = next(iter(runtimes(source).values()))
    return {spec.name for spec in runtime.tools if spec.kind == "write"}


def _sample(found):
    """Three mutants of a task in the test command: its first drop, its first and its last argument change
    (benchmarks/tau2.py plays every mutant of every task: docs/tau2.md has its figures)."""
    drops = [m for m in found if m.label.startswith("drop")]
    changes = [m for m in found if m.label.startswith("change")]
    return list({m.label: m for m in drops[:1] + changes[:1] + changes[-1:]}.values())


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_write_mutations_get_tau2s_verdict(source, tmp_path):
    tasks = _chosen(source)
    records = {task_id: tau2_record(task_id) for task_id in tasks}
    values, writes = argument_values(records.values()), _write_tools(source)
    cases, lines = [], []
    for task_id, record in records.items():
        for attempt, mutant in enumerate(_sample(mutants(record, writes, values))):
            steps = [{"tool": name, "arguments": arguments} for name, arguments in mutant.calls]
            steps += [{"say": text} for text in _said(record)]
            lines.append(json.dumps({"task_id": task_id, "attempt": attempt, "steps": steps}))
            cases.append((task_id, attempt, mutant))
    with_writes = {task_id for task_id, _, _ in cases}
    if len(tasks) == len(runtimes(source)):
        assert len(with_writes) == {"tau2_airline": 30, "tau2_retail": 105}[source]
    assert len(with_writes) >= len(tasks) // 2
    path = tmp_path / "mutants.jsonl"
    path.write_text("\n".join(lines) + "\n")
    results = play([(tasks[task_id], attempt) for task_id, attempt, _ in cases], ReplayPolicy(str(path)))
    disagree, caught = [], 0
    for (task_id, _, mutant), result in zip(cases, results, strict=True):
        assert result.outcome in (Outcome.SUCCESS, Outcome.FAILURE), result.cause
        tbx_reward = 1.0 if result.outcome is Outcome.SUCCESS else 0.0
        if tbx_reward != tau2_reward(task_id, mutant.calls, _said(records[task_id])):
            disagree.append((task_id, mutant.label))
        caught += tbx_reward == 0.0
    assert not disagree
    print(f"{source}: {len(cases)} mutants of {len({c[0] for c in cases})} tasks, {caught} scored 0, "
          f"all {len(cases)} verdicts equal τ²'s")


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_tau2s_full_evaluator_agrees_on_stored_transcripts(source, tmp_path):
    """τ²'s own evaluator (transcript replay on new environments, `stage=regrade`'s) on the transcripts tbx
    stored: the gold run and a mutant of each of the first three tasks with a write."""
    tasks = runtimes(source)
    records = {task_id: tau2_record(task_id) for task_id in tasks}
    writes, values = _write_tools(source), argument_values(records.values())
    chosen = [task_id for task_id in tasks if mutants(records[task_id], writes, values)][:3]
    lines = []
    for task_id in chosen:
        mutant = mutants(records[task_id], writes, values)[-1]
        steps = [{"tool": n, "arguments": a} for n, a in mutant.calls] + [{"say": t} for t in _said(records[task_id])]
        lines.append(json.dumps({"task_id": task_id, "steps": steps}))
    path = tmp_path / "one_mutant_each.jsonl"
    path.write_text("\n".join(lines) + "\n")
    played = play([(tasks[t], 0) for t in chosen], OraclePolicy()) + play([(tasks[t], 0) for t in chosen],
                                                                         ReplayPolicy(str(path)))
    outcomes = []
    for result in played:
        reward = evaluate_transcript(records[result.task_id], SOURCES[source], result.transcript, result.ended_by)
        assert reward == (1.0 if result.outcome is Outcome.SUCCESS else 0.0), (result.task_id, result.cause)
        outcomes.append(result.outcome)
    assert Outcome.SUCCESS in outcomes and Outcome.FAILURE in outcomes
