"""Benchmark: hostile tool calls against every domain's tools, straight through `runtime.invoke`.

Plays N calls (default 50,000, spread evenly over the domains) drawn by the same hypothesis
strategies as `tests/hardening/test_fuzz_tools.py`, but random (a fresh seed each run unless
--seed) and without stopping at the first problem. Prints calls, calls/s, answers by kind
(answered, refused for the arguments, by the tool, by the database), the faults generated,
crashes (exceptions escaping `invoke`, one example each), wrong answers (a bad call accepted, an
unreadable error, a refused or read call that changed the episode database) and writes outside
the episode database (files in the backend work dir or the working directory added, removed or
changed). A measurement, not a test: it asserts nothing and exits 0.

    .venv/bin/python benchmarks/fuzz_tools.py [--calls 50000] [--seed 1] [--domains travel retail]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tbx.domains import domain_names, get_domain  # noqa: E402
from tbx.tools.runtime import invoke  # noqa: E402
from tests.hardening import Arena, FuzzCall, answer_problems, domain_call, sqlite_file  # noqa: E402

BATCH = 10  # calls per hypothesis example


class Tally:
    """Counts and the first example of each distinct crash or wrong answer."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.crashes: dict[str, str] = {}
        self.wrong: dict[str, str] = {}
        self.outside = 0

    def play(self, arena: Arena, call: FuzzCall) -> None:
        episode = sqlite_file(arena.episode)
        state = episode.read_bytes()
        self.counts["calls"] += 1
        self.faults[call.fault] += 1
        shown = f"{arena.domain.name}.{call.tool.name}({call.arguments!r:.200}) [{call.fault}]"
        try:
            result = invoke(call.tool, arena.episode.engine, call.arguments)
        except Exception as exc:
            self.counts["crash"] += 1
            self.crashes.setdefault(f"{arena.domain.name}.{call.tool.name}: {exc!r:.160}", shown)
            return
        self.counts[_kind(result.text, result.is_error)] += 1
        problems = answer_problems(call, result.text, result.is_error)
        if (result.is_error or call.tool.kind == "read") and episode.read_bytes() != state:
            problems.append("changed the episode database")
        for problem in problems:
            self.counts["wrong answer"] += 1
            self.wrong.setdefault(f"{arena.domain.name}.{call.tool.name}: {problem}", f"{shown} -> {result.text:.200}")


def _kind(text: str, is_error: bool) -> str:
    if not is_error:
        return "answered"
    if text.startswith("Error: invalid arguments for"):
        return "refused: arguments"
    if text.startswith("Error: the database refused"):
        return "refused: database"
    return "refused: tool"


def fuzz_domain(name: str, calls: int, tally: Tally, workdir: Path, run_seed: int) -> None:
    """Play `calls` calls on a fresh arena of domain `name`; count writes outside its episode."""
    cwd = workdir / "cwd"
    cwd.mkdir(parents=True)
    os.chdir(cwd)
    arena = Arena(workdir / "backend", get_domain(name))
    before = arena.outside()

    @seed(run_seed)
    @settings(max_examples=max(1, -(-calls // BATCH)), deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(domain_call(arena.domain, arena.pool), min_size=BATCH, max_size=BATCH))
    def play(batch: list[FuzzCall]) -> None:
        for call in batch:
            tally.play(arena, call)

    try:
        play()
        after = arena.outside()
        tally.outside += len(set(before.items()) ^ set(after.items())) + len(list(cwd.iterdir()))
    finally:
        os.chdir(ROOT)
        arena.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a random one)")
    parser.add_argument("--domains", nargs="*", default=domain_names())
    args = parser.parse_args()
    run_seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    tally = Tally()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tbx-fuzz-") as tmp:
        for i, name in enumerate(args.domains):
            share = args.calls // len(args.domains) + (i < args.calls % len(args.domains))
            fuzz_domain(name, share, tally, Path(tmp) / name, run_seed)
    seconds = time.perf_counter() - start
    calls = tally.counts["calls"]
    print(f"domains: {', '.join(args.domains)}   seed: {run_seed}")
    print(f"calls: {calls}   time: {seconds:.1f} s   calls/s: {calls / seconds:.0f}")
    for key in ("answered", "refused: arguments", "refused: tool", "refused: database"):
        print(f"  {key:<20} {tally.counts[key]:>7}")
    print("faults generated: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.faults.items())))
    print(f"crashes: {tally.counts['crash']} ({len(tally.crashes)} distinct)")
    for crash, example in tally.crashes.items():
        print(f"  {crash}\n      e.g. {example}")
    print(f"wrong answers: {tally.counts['wrong answer']} ({len(tally.wrong)} distinct)")
    for problem, example in tally.wrong.items():
        print(f"  {problem}\n      e.g. {example}")
    print(f"writes outside the episode database: {tally.outside}")


if __name__ == "__main__":
    main()
