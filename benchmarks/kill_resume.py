"""Benchmark: SIGKILL eval, probe and training runs at random points, resume them, and count what
survived against an uninterrupted run of the same config.

The harness is `tests/hardening/kill_harness.py`, the one `tests/hardening/test_kill_resume.py`
uses (real processes forked from a preloaded forkserver; the uninterrupted run and each killed
run's finishing run go through `launch.py`); this runs it with more kills and bigger runs.
Prints, per stage: kills (in start-up, in work, at exact points inside checkpoint writes),
processes started, the clean run's seconds; attempts expected / stored / lost / duplicated and
verdicts that differ; for training, the steps whose checkpoints were compared, how many were not
bit-identical, the largest weight difference, and whether the losses match. A measurement: it
asserts nothing.

    .venv/bin/python benchmarks/kill_resume.py                 # 60 random kills, 20 per stage
    .venv/bin/python benchmarks/kill_resume.py --kills 90 --seed 7
    .venv/bin/python benchmarks/kill_resume.py --kills 2 --stages eval,probe --tasks 3   # a quick look
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the harness lives in tests/ (its forked children import it by name)

from tests.hardening import kill_harness as harness  # noqa: E402
from tests.vllm.servers import vllm_server  # noqa: E402


def measure_stage(context, case, root: Path, seed: int) -> dict:
    started = time.monotonic()
    log = harness.clean_and_killed(context, case, root, seed)
    clean, killed = (harness.stored_rows(root / f"{case.stage}-{kind}") for kind in ("clean", "killed"))
    row = {"stage": case.stage, "log": log, "seconds": time.monotonic() - started,
           "attempts": harness.compare_attempts(clean, killed), "rows_equal": clean == killed,
           "integrity": harness.integrity(root / f"{case.stage}-killed")}
    if case.stage == "train":
        row["checkpoints"] = harness.compare_checkpoints(harness.checkpoint_states(root / "train-clean"),
                                                         harness.checkpoint_states(root / "train-killed"))
        row["losses_equal"] = harness.losses(root / "train-clean") == harness.losses(root / "train-killed")
    return row


def print_rows(rows: list[dict]) -> None:
    print(f"{'stage':6s} {'kills':>5s} {'start-up':>8s} {'work':>5s} {'ckpt':>5s} {'procs':>5s} {'clean s':>7s} "
          f"{'expected':>8s} {'stored':>6s} {'lost':>4s} {'dup':>4s} {'verdicts≠':>9s} {'rows =':>6s} {'store':>5s}")
    for row in rows:
        log, a = row["log"], row["attempts"]
        print(f"{row['stage']:6s} {log.kills:5d} {log.in_startup:8d} {log.in_work:5d} {log.checkpoint_kills:5d} "
              f"{log.runs:5d} {log.clean_s:7.1f} {a['expected']:8d} {a['stored']:6d} {a['lost']:4d} "
              f"{a['duplicated']:4d} {a['verdicts_differ']:9d} {str(row['rows_equal']):>6s} {row['integrity']:>5s}")
    for row in rows:
        if "checkpoints" in row:
            c = row["checkpoints"]
            print(f"training: {c['steps_compared']} steps compared, {c['steps_differing']} not bit-identical "
                  f"(weights, AdamW state, sampler, torch and numpy RNG), "
                  f"max weight difference {c['max_weight_difference']:g}, losses equal: {row['losses_equal']}")
    kills = sum(r["log"].kills + r["log"].checkpoint_kills for r in rows)
    lost = sum(r["attempts"]["lost"] for r in rows)
    duplicated = sum(r["attempts"]["duplicated"] for r in rows)
    print(f"total: {kills} kills, {lost} attempts lost, {duplicated} duplicated, "
          f"{sum(r['seconds'] for r in rows):.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=60, help="random kills, split evenly over the stages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stages", default="eval,probe,train",
                        help="which runs to kill, comma-separated (train starts a vLLM server for its rollouts)")
    parser.add_argument("--tasks", type=int, default=12, help="tasks of the eval and probe runs")
    args = parser.parse_args()
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if not stages or set(stages) - {"eval", "probe", "train"}:
        parser.error(f"--stages {args.stages!r}: give some of eval, probe, train, comma-separated")
    per_stage = max(1, args.kills // len(stages))
    context = harness.forkserver_context()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="tbx-kill-") as folder:
            root = Path(folder)
            cases = [*([harness.eval_case(per_stage, tasks=args.tasks, attempts=12)] if "eval" in stages else []),
                     *([harness.probe_case(per_stage, tasks=args.tasks, attempts=20)] if "probe" in stages else [])]
            with ExitStack() as servers:
                if "train" in stages:
                    train_kills = max(1, args.kills - len(cases) * per_stage)
                    tiny = harness.build_tiny_model(root / "tiny-llama")
                    # the trainer's rollouts, outliving its kills
                    server = servers.enter_context(vllm_server("tiny", tiny, root))
                    cases.append(harness.train_case(root, train_kills, steps=train_kills + 4, server=server))
                for offset, case in enumerate(cases):
                    rows.append(measure_stage(context, case, root, args.seed * 3 + offset))
                    print(f"{case.stage}: done in {rows[-1]['seconds']:.0f} s", file=sys.stderr)
            leftovers = [p for p in (root / "db" / "episodes").glob("*") if any(p.iterdir())]
            left_files = sum(1 for p in leftovers for _ in p.iterdir())
    finally:
        harness.stop_forkserver()
    print_rows(rows)
    print(f"episode database folders a killed process left in backend.workdir: {len(leftovers)} "
          f"({left_files} files; the SQLite backend removes its folder on a clean exit only)")


if __name__ == "__main__":
    main()
