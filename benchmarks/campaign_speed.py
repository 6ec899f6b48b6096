"""Benchmark: a whole oracle campaign on the benchmark tasks, before and after a change, in one run.

For each side (a git revision, unpacked into a temporary folder, and this checkout) it runs the
command a user runs, `launch.py stage=eval policy=oracle tasks=bench eval.attempts=N`, in a fresh run
folder and a fresh `backend.workdir` (a cold start: no template or prepared task of an earlier run),
then the same tasks once more with one attempt in another fresh run folder but the same workdir (a
warm start: what a second run of the same tasks pays before its first episode). It prints per run:
wall time, the time to the first stored episode, episodes, episodes/s, CPU seconds of every process
of the run (parent and workers), episodes per CPU second (per-core episodes/s), the load average
around the run; then whether both sides stored the same verdicts (task, attempt, outcome, reward).

This is a measurement, not a test: it asserts nothing. The machine is shared, so the load average is
printed with every figure; repeat runs to see the spread.

    .venv/bin/python benchmarks/campaign_speed.py                          # 512 x 20, before and after
    .venv/bin/python benchmarks/campaign_speed.py --attempts 2 --skip-before
    .venv/bin/python benchmarks/campaign_speed.py --before eae2847 --args eval.workers=2
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def unpack(revision: str, folder: Path) -> Path:
    """The tree of `revision`, unpacked (not checked out: the worktree stays as it is)."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stored(run_dir: Path) -> list[tuple]:
    """(task, attempt, outcome, reward, created_at) of the last try of every attempt."""
    conn = sqlite3.connect(run_dir / "results.sqlite")
    try:
        rows = conn.execute("SELECT task_id, attempt, outcome, reward, created_at, try_index FROM attempts "
                            "ORDER BY task_id, attempt, try_index").fetchall()
    finally:
        conn.close()
    last = {(task, attempt): (task, attempt, outcome, reward, created) for task, attempt, outcome, reward, created, _
            in rows}
    return sorted(last.values())


def run_once(tree: Path, workdir: Path, run_dir: Path, attempts: int, tasks: str, extra: list[str]) -> dict:
    """One eval campaign as a user runs it; its figures."""
    args = [sys.executable, str(tree / "launch.py"), "stage=eval", "policy=oracle", f"tasks={tasks}",
            f"eval.attempts={attempts}", f"out_root={run_dir.parent}", f"backend.workdir={workdir}",
            f"run_dir={run_dir}", *extra]
    load_before, cpu_before = os.getloadavg()[0], cpu_seconds()
    began, wall_began = time.perf_counter(), time.time()
    done = subprocess.run(args, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}\nexit {done.returncode}:\n{done.stderr[-3000:]}")
    rows = stored(run_dir)
    first, last = min(row[4] for row in rows), max(row[4] for row in rows)
    return {"wall_s": wall, "first_episode_s": first - wall_began, "play_s": last - first, "episodes": len(rows),
            "cpu_s": cpu_seconds() - cpu_before, "load": (load_before, os.getloadavg()[0]),
            "verdicts": [row[:4] for row in rows]}


def side(name: str, folder: str, tree: Path, scratch: Path, args: argparse.Namespace, extra: list[str]) -> list[tuple]:
    workdir = scratch / f"{folder}-db"
    cold = run_once(tree, workdir, scratch / f"{folder}-cold", args.attempts, args.tasks, extra)
    warm = run_once(tree, workdir, scratch / f"{folder}-warm", 1, args.tasks, extra)
    return [(f"{name}, cold, {args.attempts} attempts", cold), (f"{name}, warm, 1 attempt", warm)]


def show(rows: list[tuple]) -> None:
    print("wall s: the whole command; to 1st ep s: its start to the first stored episode; play s: first to last "
          "stored episode (ep/s in play: episodes / play s); ep/CPU s: episodes per CPU second of every process of "
          "the run, i.e. per-core episodes/s")
    header = (f"{'run':40s} {'wall s':>8s} {'to 1st ep s':>12s} {'play s':>8s} {'episodes':>9s} {'ep/s':>8s} "
              f"{'ep/s in play':>13s} {'CPU s':>8s} {'ep/CPU s':>9s} {'load 1m':>12s}")
    print(header)
    for name, r in rows:
        print(f"{name:40s} {r['wall_s']:8.1f} {r['first_episode_s']:12.1f} {r['play_s']:8.1f} {r['episodes']:9d} "
              f"{r['episodes'] / r['wall_s']:8.1f} {r['episodes'] / max(r['play_s'], 1e-9):13.1f} {r['cpu_s']:8.1f} "
              f"{r['episodes'] / r['cpu_s']:9.1f} {r['load'][0]:5.2f}->{r['load'][1]:<5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=20)
    parser.add_argument("--tasks", default="bench")
    parser.add_argument("--before", default="eae2847", help="the revision to compare against (before issue 27)")
    parser.add_argument("--skip-before", action="store_true")
    parser.add_argument("--skip-after", action="store_true")
    parser.add_argument("--args", nargs="*", default=[], help="extra launch.py overrides for this checkout's runs")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tbx-speed-"))
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()}; tasks={args.tasks} attempts={args.attempts}")
    try:
        rows = []
        if not args.skip_before:
            rows += side(f"before ({args.before})", "before", unpack(args.before, scratch / "before-tree"), scratch,
                         args, [])
        if not args.skip_after:
            rows += side("after (this checkout)", "after", ROOT, scratch, args, args.args)
        show(rows)
        if not args.skip_before and not args.skip_after:
            same = rows[0][1]["verdicts"] == rows[2][1]["verdicts"]
            print(f"verdicts of the {args.attempts}-attempt campaigns identical: {same} "
                  f"({len(rows[0][1]['verdicts'])} and {len(rows[2][1]['verdicts'])} attempts)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
