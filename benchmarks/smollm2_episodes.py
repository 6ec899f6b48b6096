"""Benchmark: whole SmolLM2-135M episodes on vLLM (its CPU build here), at concurrency 1, 4 and 16,
and the seconds one weight sync takes.

Each level is an ordinary `stage=eval` run (its own run folder under a temporary directory) with
the model group's own settings (SmolLM2: up to 160 new tokens a turn, temperature 1.0): the first
`--tasks` tasks of the easy training sample (three domains, one or two tool calls, every fact in
the opening message), SQLite, the scripted user, at most `--max-turns` agent turns per episode.
Every level plays the same episodes (`--attempts` of each task, the same seeds), and all levels use
the process's one vLLM server, started before the first level (its start-up is printed apart).
Prints episodes/s, agent turns/s, generated tokens/s, parsed and malformed tool calls and pass@1 per
level. Then `--syncs` full-parameter weight syncs of SmolLM2 into the running server (save the
module as safetensors, pause, reload in place, drop the prefix cache, label the version, resume),
timed one by one. A measurement, not a test: it asserts nothing.

    .venv/bin/python benchmarks/smollm2_episodes.py [--repeats 2] [--syncs 5] [--travel 18] [OVERRIDES...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tbx.config import Config, register_configs
from tbx.records import Outcome
from tbx.stages.eval import run_eval
from tbx.store.results import read_records

ROOT = Path(__file__).resolve().parents[1]


def config(out: Path, *overrides: str) -> Config:
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=[
            "stage=eval", "logger=none", "policy=model", "model=smollm2_135m", f"out_root={out}",
            f"backend.workdir={out}/db", *overrides]))


def measure(out: Path, label: str, *overrides: str) -> dict:
    start = time.perf_counter()
    summary = run_eval(config(out / label, *overrides))
    seconds = time.perf_counter() - start
    records = read_records(summary.run_dir)
    turns = sum(r.counts.get("turns", 0) for r in records)
    calls = sum(r.counts.get("tool_calls", 0) for r in records)
    malformed = sum(r.counts.get("malformed_calls", 0) for r in records)
    tokens = sum(r.usage["agent"].completion_tokens for r in records if "agent" in r.usage)
    errors = sum(r.outcome not in (Outcome.SUCCESS, Outcome.FAILURE) for r in records)
    return {"episodes": len(records), "seconds": seconds, "turns": turns, "calls": calls, "malformed": malformed,
            "tokens": tokens, "errors": errors, "pass_at_1": summary.pass_at_1}


def time_syncs(cfg: Config, out: Path, count: int) -> list[float]:
    """Full-parameter syncs of the model into the running server, as the trainer does after a step."""
    from tbx.policies.hf_model import load_directory, model_directory
    from tbx.policies.trainable import TrainablePolicy
    from tbx.policies.vllm import folder_version, serve

    directory = model_directory(cfg.model)[0]
    served = serve(cfg.model, directory=directory)
    module, _ = load_directory(directory, cfg.model.dtype)
    policy = TrainablePolicy(served, model=module, finetune="full", weights_dir=out / "weights", run_name="bench")
    seconds = []
    for step in range(1, count + 1):
        started = time.perf_counter()
        reload = policy.sync_weights(step)
        seconds.append(time.perf_counter() - started)
        print(f"sync {step}: {seconds[-1]:.2f} s (save + reload; the server's part {reload:.2f} s)")
    served.server.load_weights(served.server.spec.directory, folder_version(cfg.model.name, directory))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8, help="the first N tasks of the easy sample, at every level")
    parser.add_argument("--attempts", type=int, default=8,
                        help="attempts of each task, the same episodes (seeds) at every level")
    parser.add_argument("--travel", type=int, default=0, help="also evaluate this many travel tasks")
    parser.add_argument("--repeats", type=int, default=1, help="run the three levels this many times in turn")
    parser.add_argument("--syncs", type=int, default=5, help="full-parameter weight syncs to time")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every level")
    args = parser.parse_args()
    register_configs()
    common = [f"eval.max_turns={args.max_turns}", *args.overrides]
    print(f"cpus={os.cpu_count()} load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        start = time.perf_counter()
        measure(out, "warm", "tasks=train_sample", "tasks.limit=1", *common)  # the server's start, imports
        print(f"first run (vLLM start-up, imports, one episode): {time.perf_counter() - start:.0f} s")
        print(f"{'concurrency':>11} {'episodes':>8} {'turns':>6} {'tokens':>7} {'seconds':>8} {'episodes/s':>10} "
              f"{'turns/s':>8} {'tokens/s':>8} {'tool calls':>10} {'malformed':>9} {'errors':>6} {'pass@1':>7}")
        for round_ in range(args.repeats):
            for concurrency in (1, 4, 16):  # the same tasks at every level
                row = measure(out, f"c{concurrency}-{round_}", "tasks=train_sample", f"tasks.limit={args.tasks}",
                              f"eval.attempts={args.attempts}", f"eval.concurrency={concurrency}", *common)
                print(f"{concurrency:>11} {row['episodes']:>8} {row['turns']:>6} {row['tokens']:>7} "
                      f"{row['seconds']:>8.1f} {row['episodes'] / row['seconds']:>10.3f} "
                      f"{row['turns'] / row['seconds']:>8.2f} {row['tokens'] / row['seconds']:>8.1f} "
                      f"{row['calls']:>10} {row['malformed']:>9} {row['errors']:>6} {row['pass_at_1']:>7.1%}")
        if args.travel:
            row = measure(out, "travel", "tasks=travel", "tasks.per_family=2", f"tasks.limit={args.travel}",
                          "eval.concurrency=16", *common)
            print(f"travel: {row['episodes']} episodes in {row['seconds']:.0f} s, {row['turns']} turns, "
                  f"{row['calls']} tool calls, {row['malformed']} malformed, {row['errors']} errors, "
                  f"pass@1 {row['pass_at_1']:.1%}")
        if args.syncs:
            seconds = time_syncs(config(out / "sync", *common), out / "sync", args.syncs)
            print(f"weight sync (full parameters, SmolLM2-135M float32): median {statistics.median(seconds):.2f} s, "
                  f"min {min(seconds):.2f}, max {max(seconds):.2f} over {len(seconds)}")


if __name__ == "__main__":
    main()
