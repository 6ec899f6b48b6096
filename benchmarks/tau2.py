"""Benchmark: a τ²-bench gold replay through tbx against τ²'s own code path, on the same tasks, in one run.

Per domain it prints the CPU seconds (time.process_time) of one episode on each path, mean and max over
the tasks, their ratio, and whether the two paths gave the same verdict on every task:
- tbx: `run_episode` with the oracle policy and the scripted user on prepared τ² runtimes, MCP sessions
  kept across episodes as a campaign keeps them (an environment reused and put back, the gold state kept
  per task: tbx/tau2/environment.py, grading.py);
- τ²: its environment built by its own `get_environment()` (which reads db.json), the gold actions played
  through `Environment.get_response`, one assistant message holding every `communicate_info` string,
  then τ²'s `EnvironmentEvaluator` and `CommunicateEvaluator` combined over the task's reward basis
  (`tbx.tau2.grading.evaluate_transcript`, which calls τ²'s evaluators and nothing of tbx's grader).
τ²'s path runs first, before tbx loads a τ² domain, so its garbage collections walk none of tbx's
objects; the CPU each path spends in full (generation 2) garbage collections is printed (a τ² database
is a great many small Python objects, and a full collection walks every live one). It also splits tbx's
episode into its phases (EpisodeResult.timings, wall time: environment taken, MCP session bound, tool
calls, grading, putting the environment back) and prints the one-time costs
(parsing db.json, building an environment, the gold state of each task) apart.

`--mutations` adds the single-fault sweep: every mutant (tbx.tau2.mutations) of every task with a write,
replayed through `policy=replay`, against the verdict τ²'s own code gives the same calls (a fresh
environment, its database hash against the gold one's, its communicate evaluator: tests/tau2/conftest.py).

This is a measurement, not a test: it asserts nothing. The machine's load is printed with the figures.

    .venv/bin/python benchmarks/tau2.py                                   # airline and retail, every task
    .venv/bin/python benchmarks/tau2.py --mutations                       # and every mutant
    .venv/bin/python benchmarks/tau2.py --domains retail --tasks 3        # the smallest run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]  # this checkout's tbx; and
# the package `tau2`, not this script (python puts the script's folder first on the path)

from tbx.backend import make_backend  # noqa: E402
from tbx.catalog import prepare_task  # noqa: E402
from tbx.config import Config  # noqa: E402
from tbx.episodes import Outcome, episode_limits, run_episode  # noqa: E402
from tbx.episodes.world import EpisodeWorld  # noqa: E402
from tbx.messages import Message, ToolCall  # noqa: E402
from tbx.policies.reference import OraclePolicy, ReplayPolicy  # noqa: E402
from tbx.tau2.environment import tau2_domain  # noqa: E402
from tbx.tau2.grading import evaluate_transcript  # noqa: E402
from tbx.tau2.mutations import argument_values, mutants  # noqa: E402
from tbx.tau2.package import tau2_domain_module  # noqa: E402
from tbx.tau2.tasks import SAY_PREFIX, tau2_record, tau2_tasks  # noqa: E402
from tbx.tools.mcp_server import ToolSessions  # noqa: E402
from tbx.users.scripted import ScriptedUser  # noqa: E402

LIMITS = episode_limits(Config())


def cpu() -> float:
    return time.process_time()


class CyclicGC:
    """CPU seconds the cyclic garbage collector's full (generation 2) collections take while on (each walks
    every live object, τ² databases' included), and the CPU seconds of the whole time it was on."""

    def __init__(self) -> None:
        self.seconds, self.count, self._began, self.within = 0.0, 0, 0.0, 0.0  # within: CPU s while on

    def _callback(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = cpu()
        else:
            self.seconds, self.count = self.seconds + cpu() - self._began, self.count + 1

    def __enter__(self) -> CyclicGC:
        gc.callbacks.append(self._callback)
        self.within = cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        self.within = cpu() - self.within


def said(record) -> list[str]:
    info = record.evaluation_criteria.communicate_info
    return [SAY_PREFIX + "; ".join(info)] if info else []


@dataclass
class Figures:
    """One domain's measurements."""

    domain: str
    one_time: dict[str, float] = field(default_factory=dict)  # CPU s
    gold_state: list[float] = field(default_factory=list)  # CPU s per task
    tbx: list[float] = field(default_factory=list)  # CPU s per episode
    tau2: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)  # wall s per episode
    full_gc: dict[str, CyclicGC] = field(default_factory=dict)  # path -> its full collections
    same: int = 0
    passed: tuple[int, int] = (0, 0)  # tasks scored 1 by tbx, by τ²
    mutations: dict[str, int] = field(default_factory=dict)


def prepare(source: str, count: int | None, figures: Figures) -> list:
    """The first `count` tasks of `source`, prepared; the one-time costs measured on the way."""
    name = source.removeprefix("tau2_")
    tau2_domain_module(name)  # τ²'s modules imported (not a cost of an episode: a process imports them once)
    utils = __import__(f"tau2.domains.{name}.utils", fromlist=["x"])
    began = cpu()
    with open(getattr(utils, f"{name.upper()}_DB_PATH"), encoding="utf-8") as handle:
        json.load(handle)
    figures.one_time["parse db.json (json.load alone)"] = cpu() - began
    began = cpu()
    domain = tau2_domain(name)
    figures.one_time["load the domain (db.json parsed, record validators)"] = cpu() - began
    began = cpu()
    domain.idle.append(domain.build())
    figures.one_time["build an environment"] = cpu() - began
    tasks = tau2_tasks(source, "base")[:count]
    backend = make_backend("sqlite", None, tempfile.mkdtemp(prefix="tbx-bench-tau2-"))
    runtimes = []
    for task in tasks:
        began = cpu()
        runtimes.append(prepare_task(task, backend))
        figures.gold_state.append(cpu() - began)
    return runtimes


async def tbx_episodes(runtimes: list, policy, attempts: list[int] | None = None, timed: bool = True) -> list:
    """(CPU s, result) of each runtime's episode, one after another in one loop, MCP sessions kept."""
    sessions = ToolSessions()
    world = EpisodeWorld(None, {}, ScriptedUser(), None, LIMITS, sessions=sessions)
    out = []
    try:
        if timed:  # a warm-up episode: the MCP session started, first-call caches filled
            await run_episode(world, runtimes[0], policy, 0, 0)
        for index, runtime in enumerate(runtimes):
            attempt = attempts[index] if attempts else 0
            began = cpu()
            result = await run_episode(world, runtime, policy, attempt, 0)
            out.append((cpu() - began, result))
    finally:
        await sessions.aclose()
    return out


def tau2_episode(domain_name: str, record) -> float:
    """τ²'s own path: its environment from db.json, the gold calls through get_response, its evaluators."""
    from tau2.data_model.message import ToolCall as Tau2Call

    environment = tau2_domain_module(domain_name).get_environment()
    transcript = []
    for index, action in enumerate(record.evaluation_criteria.actions or ()):
        call = Tau2Call(id=f"gold_{index}", name=action.name, arguments=dict(action.arguments),
                        requestor=action.requestor)
        answer = environment.get_response(call)
        transcript += [Message(role="assistant", tool_calls=(ToolCall(call.name, call.arguments, call.id),)),
                       Message(role="tool", content=answer.content or "", tool_call_id=call.id, is_error=answer.error)]
    transcript += [Message(role="assistant", content=text) for text in said(record)]
    return evaluate_transcript(record, domain_name, transcript, "user_stop")


def phases(result) -> dict[str, float]:
    t = result.timings
    loop_rest = t["loop"] - t.get("session", 0.0) - t.get("tools", 0.0)
    return {"clone": t["clone"], "session": t.get("session", 0.0), "tools": t.get("tools", 0.0),
            "dialogue": loop_rest, "grade": t["grade"],
            "put_back": t["total"] - t["clone"] - t["loop"] - t["grade"], "total": t["total"]}


def measure_tau2(source: str, count: int | None, figures: Figures) -> dict[str, float]:
    """τ²'s path on the first `count` tasks (τ²'s records read by τ²'s own loader): its reward by τ² task id.
    Run before tbx loads any τ² domain, so its garbage collections walk none of tbx's objects."""
    name = source.removeprefix("tau2_")
    records = tau2_domain_module(name).get_tasks("base")[:count]
    tau2_episode(name, records[0])  # a warm-up: τ²'s evaluator modules imported
    rewards = {}
    with CyclicGC() as figures.full_gc["τ²"]:
        for record in records:
            began = cpu()
            rewards[record.id] = tau2_episode(name, record)
            figures.tau2.append(cpu() - began)
    return rewards


def measure_tbx(source: str, count: int | None, figures: Figures, rewards: dict[str, float],
                profile: bool) -> list:
    """tbx's path on the same tasks, its verdicts against τ²'s `rewards`; the prepared runtimes."""
    runtimes = prepare(source, count, figures)
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    with CyclicGC() as figures.full_gc["tbx"]:
        played = asyncio.run(tbx_episodes(runtimes, OraclePolicy()))
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    for seconds, result in played:
        figures.tbx.append(seconds)
        for phase, value in phases(result).items():
            figures.phases.setdefault(phase, []).append(value)
        tbx_reward, reward = (1.0 if result.outcome is Outcome.SUCCESS else 0.0), rewards[result.task_id.split("/")[1]]
        figures.same += tbx_reward == reward
        figures.passed = (figures.passed[0] + (tbx_reward == 1.0), figures.passed[1] + (reward == 1.0))
    return runtimes


def sweep(source: str, runtimes: list, figures: Figures) -> None:
    """Every write mutant of every task, replayed by tbx, against τ²'s verdict on the same calls."""
    from tests.tau2.conftest import tau2_reward  # τ²'s verdict by τ²'s own code

    records = {runtime.task.id: tau2_record(runtime.task.id) for runtime in runtimes}
    values = argument_values(records.values())
    writes = {spec.name for spec in runtimes[0].tools if spec.kind == "write"}
    cases, lines = [], []
    for runtime in runtimes:
        record = records[runtime.task.id]
        for attempt, mutant in enumerate(mutants(record, writes, values)):
            steps = [{"tool": name, "arguments": arguments} for name, arguments in mutant.calls]
            lines.append(json.dumps({"task_id": runtime.task.id, "attempt": attempt,
                                     "steps": steps + [{"say": text} for text in said(record)]}))
            cases.append((runtime, attempt, mutant))
    if not cases:
        figures.mutations = {"mutants": 0, "tasks": 0, "scored 0": 0, "verdicts equal": 0, "errors": 0}
        return
    path = Path(tempfile.mkdtemp(prefix="tbx-bench-tau2-")) / "mutants.jsonl"
    path.write_text("\n".join(lines) + "\n")
    played = asyncio.run(tbx_episodes([c[0] for c in cases], ReplayPolicy(str(path)), [c[1] for c in cases], False))
    equal = caught = errors = 0
    for (runtime, _, mutant), (_, result) in zip(cases, played, strict=True):
        errors += result.outcome not in (Outcome.SUCCESS, Outcome.FAILURE)
        tbx_reward = 1.0 if result.outcome is Outcome.SUCCESS else 0.0
        caught += tbx_reward == 0.0
        equal += tbx_reward == tau2_reward(runtime.task.id, mutant.calls, said(records[runtime.task.id]))
    figures.mutations = {"mutants": len(cases), "tasks": len({c[0].task.id for c in cases}), "scored 0": caught,
                         "verdicts equal": equal, "errors": errors}


def report(figures: Figures) -> None:
    tbx, tau2 = figures.tbx, figures.tau2
    print(f"\n== {figures.domain}: {len(tbx)} tasks, gold replay, CPU s per episode (time.process_time)")
    print(f"{'path':8s} {'mean':>8s} {'max':>8s}")
    print(f"{'tbx':8s} {statistics.mean(tbx):8.4f} {max(tbx):8.4f}")
    print(f"{'τ²':8s} {statistics.mean(tau2):8.4f} {max(tau2):8.4f}")
    print(f"ratio τ²/tbx: {statistics.mean(tau2) / statistics.mean(tbx):.1f}x (means), "
          f"{max(tau2) / max(tbx):.1f}x (maxima)")
    print(f"verdicts identical on {figures.same}/{len(tbx)} tasks (scored 1: tbx {figures.passed[0]}, "
          f"τ² {figures.passed[1]})")
    for path, meter in figures.full_gc.items():
        print(f"{path}'s path (its warm-up episode included): {meter.within:.3f} CPU s, of which full (generation 2) "
              f"garbage collections {meter.seconds:.3f} s ({meter.count} of them)")
    total = statistics.mean(figures.phases["total"])
    print("tbx episode by phase (wall ms: mean, median; the mean's share of the episode):")
    for phase, values in figures.phases.items():
        print(f"  {phase:10s} {1000 * statistics.mean(values):8.2f} {1000 * statistics.median(values):8.2f}  "
              f"{100 * statistics.mean(values) / total:5.1f}%")
    print("one-time costs (CPU s):")
    for what, seconds in figures.one_time.items():
        print(f"  {what:52s} {seconds:8.4f}")
    gold = figures.gold_state
    print(f"  {'gold state, per task (mean / max)':52s} {statistics.mean(gold):8.4f} / {max(gold):.4f}")
    once = statistics.mean(tbx) + statistics.mean(gold)
    print(f"tbx with its task's gold state counted in (one attempt per task): {once:.4f} s, "
          f"ratio {statistics.mean(tau2) / once:.1f}x")
    if figures.mutations:
        print("mutation sweep: " + ", ".join(f"{k} {v}" for k, v in figures.mutations.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", default="airline,retail", help="τ² domains, comma-separated")
    parser.add_argument("--tasks", type=int, default=None, help="the first N tasks of each domain (default: all)")
    parser.add_argument("--mutations", action="store_true", help="also the full single-fault mutation sweep")
    parser.add_argument("--profile", action="store_true", help="cProfile tbx's episodes (prints the top calls)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()}; domains {args.domains}; "
          f"tasks {args.tasks or 'all'}; mutations {args.mutations}")
    sources = [f"tau2_{name.strip()}" for name in args.domains.split(",")]
    figures = {source: Figures(source) for source in sources}
    rewards = {source: measure_tau2(source, args.tasks, figures[source]) for source in sources}  # τ²'s first
    for source in sources:
        runtimes = measure_tbx(source, args.tasks, figures[source], rewards[source], args.profile)
        if args.mutations:
            sweep(source, runtimes, figures[source])
        report(figures[source])
    print(f"\nload average at the end {os.getloadavg()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
