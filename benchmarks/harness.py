"""Benchmark: per-episode harness cost with the oracle policy (no model in the loop).

Prints, per backend, the median cost of each phase of an episode (clone the task database,
start the MCP server and session, or bind a kept one as a campaign does, tool calls over MCP, read
and grade the terminal state) and episodes per second on one core. This is a measurement, not a
test: it asserts nothing.

    .venv/bin/python benchmarks/harness.py                       # SQLite
    .venv/bin/python benchmarks/harness.py --postgres            # also PostgreSQL (starts it)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's tbx, not an installed one

from tbx.backend import make_backend  # noqa: E402
from tbx.catalog import prepare_task, resolve_tasks  # noqa: E402
from tbx.config import Config, TasksConfig  # noqa: E402
from tbx.episodes import Outcome, episode_limits, run_episode  # noqa: E402
from tbx.episodes.world import EpisodeWorld  # noqa: E402
from tbx.grading.judge import EvidenceJudge  # noqa: E402
from tbx.policies.reference import OraclePolicy  # noqa: E402
from tbx.tools.mcp_server import ToolSessions  # noqa: E402
from tbx.users.scripted import ScriptedUser  # noqa: E402


def start_postgres() -> str:
    env = dict(os.environ, PG_PORT="55499", PG_LOCAL_DIR="/dev/shm/tbx-bench-pg")
    subprocess.run(["bash", str(ROOT / "scripts/pg_local.sh"), "start"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return "postgresql+psycopg://postgres@127.0.0.1:55499/postgres"


def stop_postgres() -> None:
    env = dict(os.environ, PG_PORT="55499", PG_LOCAL_DIR="/dev/shm/tbx-bench-pg")
    subprocess.run(["bash", str(ROOT / "scripts/pg_local.sh"), "stop", "--wipe"], env=env, stdout=subprocess.DEVNULL)


def measure(kind: str, url: str | None, domain: str, episodes: int, fresh_sessions: bool = False) -> dict[str, float]:
    backend = make_backend(kind, url, tempfile.mkdtemp(prefix="tbx-bench-"))
    tasks = resolve_tasks(TasksConfig(name=domain, domains=[domain]))
    runtimes = [prepare_task(t, backend) for t in tasks]
    policy, user, judge = OraclePolicy(), ScriptedUser(), EvidenceJudge()  # judge=evidence: 8 travel tasks have rules
    limits = episode_limits(Config())  # the default limits, as a run plays within

    async def play(count: int) -> list:
        sessions = None if fresh_sessions else ToolSessions()  # a campaign keeps its MCP sessions
        world = EpisodeWorld(backend, {}, user, judge, limits, sessions=sessions)  # once, as a run builds it
        results = []
        try:
            for i in range(count):
                results.append(await run_episode(world, runtimes[i % len(runtimes)], policy, 0, 0))
        finally:
            if sessions is not None:
                await sessions.aclose()
        return results

    asyncio.run(play(min(20, episodes)))  # warm-up: imports, caches, first connections
    start = time.perf_counter()
    results = asyncio.run(play(episodes))
    wall = time.perf_counter() - start
    backend.close()
    assert all(r.outcome is Outcome.SUCCESS for r in results), "the oracle must pass every task"
    calls = sum(r.counts["tool_calls"] for r in results)

    def median_ms(key: str) -> float:
        return 1000 * statistics.median(r.timings.get(key, 0.0) for r in results)

    return {
        "episodes": episodes, "tasks": len(runtimes), "clone_ms": median_ms("clone"),
        "session_ms": median_ms("session"), "grade_ms": median_ms("grade"), "total_ms": median_ms("total"),
        "tool_call_ms": 1000 * sum(r.timings["tools"] for r in results) / max(calls, 1),
        "calls_per_episode": calls / episodes, "episodes_per_s": episodes / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="travel")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--postgres", action="store_true", help="also measure PostgreSQL (started here)")
    parser.add_argument("--pg-url", default=None, help="use this PostgreSQL admin URL instead of starting one")
    parser.add_argument("--fresh-sessions", action="store_true",
                        help="an MCP server and session per episode (as before issue 27), not kept ones")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    rows = [("sqlite", measure("sqlite", None, args.domain, args.episodes, args.fresh_sessions))]
    if args.postgres or args.pg_url:
        url = args.pg_url or start_postgres()
        try:
            rows.append(("postgres", measure("postgres", url, args.domain, max(50, args.episodes // 3),
                                             args.fresh_sessions)))
        finally:
            if not args.pg_url:
                stop_postgres()
    keys = ["episodes", "tasks", "clone_ms", "session_ms", "tool_call_ms", "calls_per_episode", "grade_ms",
            "total_ms", "episodes_per_s"]
    print(f"harness cost per episode, oracle policy, {args.domain} tasks, one core (medians)")
    print(f"{'backend':10s}" + "".join(f"{k:>18s}" for k in keys))
    for name, row in rows:
        print(f"{name:10s}" + "".join(f"{row[k]:18.2f}" if isinstance(row[k], float) else f"{row[k]:18d}"
                                      for k in keys))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
