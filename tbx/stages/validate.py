"""stage=validate: the admission gate for a task set.

A task is admitted when it loads (schema), its reference solution passes, the null agent fails,
and every single-fault mutation of its reference (a write dropped, a value wrong, one extra
write elsewhere) fails. On τ²-bench's tasks the gate reports which tasks it would refuse and why
(a do-nothing agent passes some; the figures are in docs/tau2.md, "The admission gate on τ²"); their
splits keep them. A task a do-nothing agent passes measures nothing, so this gate keeps such tasks
out of tbx's own sets. A mutation that leaves exactly the reference's changes (dropping a
verification that failed and so wrote nothing) is equivalent: counted apart, not a miss. Run it on your own files too:

    python launch.py stage=validate tasks=files tasks.path=my_tasks/ summary_path=gate.json

Judge rules need a judge: the configured one, or, with none, the deterministic evidence judge.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace

from tqdm import tqdm

from tbx.backend import Backend
from tbx.campaign.components import build_backend, build_judge
from tbx.campaign.workers import map_shares, share_processes
from tbx.catalog import TaskRuntime, load_domain_task, prepare_task, select_tasks, task_items, tau2_task_list
from tbx.config import Config
from tbx.episodes import EpisodeWorld, Outcome, episode_limits, run_episode
from tbx.errors import TaskFormatError
from tbx.grading.judge import EvidenceJudge
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.policies.reference import NullPolicy, OraclePolicy, ScriptAgent, turns_from_steps
from tbx.process.durable import write_text
from tbx.process.preemption import run_loop
from tbx.runs.results import FamilyGate, Rejection, ValidateResult
from tbx.tasks.model import Step
from tbx.tau2 import is_tau2
from tbx.users.scripted import ScriptedUser

GATE_TASKS_PER_WORKER = 16  # each task is a dozen episodes or more: a worker's start-up pays off sooner


@dataclass
class TaskVerdict:
    task_id: str
    family: str
    source: str
    reasons: list[str] = field(default_factory=list)
    mutations: int = 0
    equivalent: int = 0  # mutations that leave the reference's own changes (tbx.grading.same_changes)

    @property
    def admitted(self) -> bool:
        return not self.reasons


class StepsPolicy(Policy):
    name = "mutation"

    def __init__(self, steps: tuple[Step, ...]):
        self.steps = steps

    def agent(self, context: EpisodeContext) -> Agent:
        return ScriptAgent(turns_from_steps(self.steps))


def gate_world(cfg: Config, backend: Backend) -> EpisodeWorld:
    """The gate's episodes: the scripted user, the configured judge, no injected faults, and the task's own turn
    limit (a reference solution is checked whole, whatever eval.max_turns caps); tasks are prepared one by one."""
    return EpisodeWorld(backend=backend, runtimes={}, user=ScriptedUser(), judge=build_judge(cfg),
                        limits=replace(episode_limits(cfg), max_turns=None))


async def check_task(world: EpisodeWorld, runtime: TaskRuntime) -> TaskVerdict:
    task = runtime.task
    verdict = TaskVerdict(task.id, task.family, task.source)
    if task.checks.judge and world.judge is None:
        world = replace(world, judge=EvidenceJudge())
    oracle = await run_episode(world, runtime, OraclePolicy(), 0, 0)
    if oracle.outcome is not Outcome.SUCCESS:
        verdict.reasons.append(f"reference solution does not pass ({oracle.outcome.value}: {oracle.cause})")
    null = await run_episode(world, runtime, NullPolicy(), 0, 0)
    if null.outcome is not Outcome.FAILURE:
        verdict.reasons.append(f"the null agent is not failed ({null.outcome.value})")
    mutations = runtime.gate_mutations()
    verdict.mutations = len(mutations)
    if not any(m.kind in ("extra_write", "tau2") for m in mutations) and not is_tau2(task.domain):
        verdict.reasons.append("no extra-write mutation possible: give the domain a distractor write")
    for mutation in mutations:
        result = await run_episode(world, runtime, StepsPolicy(mutation.steps), 0, 0)
        if result.outcome is Outcome.SUCCESS and runtime.is_equivalent(result, oracle):
            verdict.equivalent += 1
        elif result.outcome is not Outcome.FAILURE:
            verdict.reasons.append(f"mutation passes ({mutation.description}): the checks miss this fault")
    return verdict


def _load(cfg: Config, verdicts: list[TaskVerdict]) -> list:
    """Every task that loads; a task that does not is rejected with the loader's message."""
    tasks = []
    try:
        items = task_items(cfg.tasks)
    except TaskFormatError as exc:  # a whole file unreadable
        verdicts.append(TaskVerdict(exc.source, "(file)", exc.source, [str(exc)]))
        return []
    for data, source in items:
        try:
            tasks.append(load_domain_task(data, source))
        except TaskFormatError as exc:
            task_id = data.get("id", source) if isinstance(data, dict) else source
            family = data.get("family", "(unknown)") if isinstance(data, dict) else "(unknown)"
            verdicts.append(TaskVerdict(str(task_id), str(family), source, [str(exc)]))
    return select_tasks(tasks + tau2_task_list(cfg.tasks), cfg.tasks)


async def _gate(cfg: Config, tasks: list, backend: Backend, verdicts: list[TaskVerdict], show: bool = True) -> None:
    world = gate_world(cfg, backend)
    gate = asyncio.Semaphore(cfg.eval.concurrency)
    bar = tqdm(total=len(tasks), desc="validate", unit="task", file=sys.stderr, disable=not show, mininterval=2.0)

    async def one(task) -> None:
        async with gate:
            try:
                runtime = prepare_task(task, backend)
            except TaskFormatError as exc:
                verdicts.append(TaskVerdict(task.id, task.family, task.source, [str(exc)]))
            else:
                verdicts.append(await check_task(world, runtime))
            bar.update(1)

    try:
        await asyncio.gather(*(one(t) for t in tasks))
    finally:
        bar.close()


def gate_summary(verdicts: list[TaskVerdict]) -> ValidateResult:
    """The gate's result: exit status 1 when a task is kept out."""
    families: dict[str, list[TaskVerdict]] = defaultdict(list)
    for v in verdicts:
        families[v.family].append(v)
    admitted = sum(v.admitted for v in verdicts)
    return ValidateResult(
        n_tasks=len(verdicts), admitted=admitted,
        rejected=tuple(Rejection(v.task_id, v.source, tuple(v.reasons))
                       for v in sorted(verdicts, key=lambda v: v.task_id) if not v.admitted),
        by_family={name: FamilyGate(tasks=len(vs), admitted=sum(v.admitted for v in vs),
                                    mutations=sum(v.mutations for v in vs), equivalent=sum(v.equivalent for v in vs))
                   for name, vs in sorted(families.items())},
        exit_code=0 if admitted == len(verdicts) else 1)


def format_gate(summary: ValidateResult) -> str:
    lines = [f"{'family':36s} {'tasks':>6s} {'admitted':>9s} {'rejected':>9s} {'mutations':>10s} {'equivalent':>11s}"]
    for name, row in summary.by_family.items():
        lines.append(f"{name[:36]:36s} {row.tasks:6d} {row.admitted:9d} {row.tasks - row.admitted:9d} "
                     f"{row.mutations:10d} {row.equivalent:11d}")
    lines.append(f"{'all':36s} {summary.n_tasks:6d} {summary.admitted:9d} {summary.n_tasks - summary.admitted:9d}")
    for item in summary.rejected[:50]:
        lines.append(f"REJECTED {item.id}: " + " | ".join(item.reasons))
    return "\n".join(lines)


def _gate_share(cfg: Config, tasks: list, show: bool = False) -> list[TaskVerdict]:
    """The verdicts on `tasks` (in a worker process: without a progress bar of its own)."""
    verdicts: list[TaskVerdict] = []
    backend = build_backend(cfg)
    try:
        run_loop(_gate(cfg, tasks, backend, verdicts, show=show))
    finally:
        backend.close()
    return verdicts


def run_validate(cfg: Config) -> ValidateResult:
    """The gate over every task, spread over `eval.workers` processes (default: the cores available, one
    per 16 tasks at most): its episodes are the reference policies' and the scripted user's."""
    verdicts: list[TaskVerdict] = []
    tasks = _load(cfg, verdicts)
    workers = share_processes(cfg, len(tasks), GATE_TASKS_PER_WORKER)
    if workers > 1:
        for share in map_shares(_gate_share, cfg, tasks, workers, f"validate ({workers} workers)"):
            verdicts.extend(share)
    else:
        verdicts.extend(_gate_share(cfg, tasks, show=True))
    summary = gate_summary(verdicts)
    if cfg.summary_path:
        write_text(cfg.summary_path, json.dumps(summary.to_json(), indent=2), "summary_path")
    print(format_gate(summary))
    return summary
