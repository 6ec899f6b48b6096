"""Benchmark: whole SmolLM2-135M episodes on this machine's CPU, at concurrency 1, 4 and 16.

Each level is an ordinary `stage=eval` run (its own run folder under a temporary directory) with
the model group's own settings (SmolLM2: up to 160 new tokens a turn, temperature 1.0): the first
`--tasks` tasks of the easy training sample (three domains, one or two tool calls, every fact in
the opening message), SQLite, the scripted user, at most `--max-turns` agent turns per episode.

Every level plays the same episodes: `--attempts` attempts of each task, with the same seeds, so
the same sampled turns up to float differences between batch shapes (64 episodes by default; at 16
concurrent agents that is four waves, so the level is measured with its agents busy, not on one
wave's tail). The work is what is compared: an episode's length depends on its seed (on these 8
tasks attempts 0-1 generated 117 tokens an episode, attempts 2-7 159), so levels that played
different attempts would compare different work. Each level prints its generated tokens and turns
so that the equal work can be seen. The time counted is the whole eval run. Prints episodes/s,
agent turns/s, generated tokens/s, how many assistant turns carried a tool call that parsed (and
how many were malformed), and pass@1; then the speed-up from 1 to 16 concurrent episodes.
`--travel N` also evaluates N travel (benchmark) tasks. A measurement, not a test: it asserts nothing.

    .venv/bin/python benchmarks/smollm2_episodes.py [--threads 2] [--repeats 2] [--travel 18] [OVERRIDES...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tbx.config import Config, register_configs
from tbx.policies import products
from tbx.policies.hf_model import load_model, product_plans
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
    records = read_records(summary["run_dir"])
    turns = sum(r["counts"].get("turns", 0) for r in records)
    calls = sum(r["counts"].get("tool_calls", 0) for r in records)
    malformed = sum(r["counts"].get("malformed_calls", 0) for r in records)
    tokens = sum(r["usage"].get("agent", {}).get("completion_tokens", 0) for r in records)
    return {"episodes": len(records), "seconds": seconds, "turns": turns, "calls": calls, "malformed": malformed,
            "tokens": tokens, "pass_at_1": summary["pass_at_1"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8, help="the first N tasks of the easy sample, at every level")
    parser.add_argument("--attempts", type=int, default=8,
                        help="attempts of each task, the same episodes (seeds) at every level")
    parser.add_argument("--travel", type=int, default=0, help="also evaluate this many travel tasks")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the three levels this many times in turn; each run is printed, and the "
                             "speed-up is given per round and for each level's fastest run (on a shared "
                             "machine other work only ever adds time)")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every level, e.g. "
                        "tasks.domains=[helpdesk] tasks.per_family=4 (one domain: one shared prompt prefix)")
    args = parser.parse_args()
    register_configs()
    common = [f"model.threads={args.threads}", f"eval.max_turns={args.max_turns}", *args.overrides]
    print(f"cpus={os.cpu_count()} threads={args.threads} load average {os.getloadavg()[0]:.1f}")
    print(f"{'concurrency':>11} {'episodes':>8} {'turns':>6} {'tokens':>7} {'seconds':>8} {'episodes/s':>10} "
          f"{'turns/s':>8} {'tokens/s':>8} {'tool calls':>10} {'malformed':>9} {'pass@1':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        measure(out, "warm", "tasks=train_sample", "tasks.limit=1", *common)  # model conversion/cache, imports
        if not products.planned():  # the products' plan is timed once per machine: not inside a level
            cfg = config(out / "plan", *common)
            torch.set_num_threads(cfg.model.threads)
            products.plan_for(load_model(cfg.model).model, product_plans(cfg.model))
        for matrices, threads, plan in products.planned():
            print(f"weight products ({matrices} matrices, {threads} threads): {products.describe(plan)}")
        runs: dict[int, list[tuple[float, float, float]]] = {1: [], 4: [], 16: []}
        for round_ in range(args.repeats):
            for concurrency in (1, 4, 16):  # the same tasks at every level
                row = measure(out, f"c{concurrency}-{round_}", "tasks=train_sample", f"tasks.limit={args.tasks}",
                              f"eval.attempts={args.attempts}", f"eval.concurrency={concurrency}", *common)
                runs[concurrency].append((row["episodes"] / row["seconds"], row["turns"] / row["seconds"],
                                          row["tokens"] / row["seconds"]))
                print(f"{concurrency:>11} {row['episodes']:>8} {row['turns']:>6} {row['tokens']:>7} "
                      f"{row['seconds']:>8.1f} {runs[concurrency][-1][0]:>10.3f} "
                      f"{row['turns'] / row['seconds']:>8.2f} {row['tokens'] / row['seconds']:>8.1f} "
                      f"{row['calls']:>10} {row['malformed']:>9} "
                      f"{row['pass_at_1']:>7.1%}")
            gains = [high / low for high, low in zip(runs[16][-1], runs[1][-1], strict=True)]
            print(f"speed-up 1 -> 16 (round {round_ + 1}): episodes/s x{gains[0]:.2f}, turns/s x{gains[1]:.2f}, "
                  f"tokens/s x{gains[2]:.2f}")
        if args.repeats > 1:
            best = {level: max(rates) for level, rates in runs.items()}  # the fastest run (by episodes/s)
            gains = [high / low for high, low in zip(best[16], best[1], strict=True)]
            print(f"speed-up 1 -> 16 (each level's fastest of {args.repeats} runs): episodes/s x{gains[0]:.2f}, "
                  f"turns/s x{gains[1]:.2f}, tokens/s x{gains[2]:.2f}")
        if args.travel:
            row = measure(out, "travel", "tasks=travel", "tasks.per_family=2", f"tasks.limit={args.travel}",
                          "eval.concurrency=16", *common)
            print(f"travel: {row['episodes']} episodes in {row['seconds']:.0f} s, {row['turns']} turns, "
                  f"{row['calls']} tool calls, {row['malformed']} malformed, pass@1 {row['pass_at_1']:.1%}")


if __name__ == "__main__":
    main()
