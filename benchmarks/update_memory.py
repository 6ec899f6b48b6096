"""Benchmark: one native GRPO update's peak memory and seconds, with micro-batches cut in sampled order
against cut from the turns sorted by prompt (`grpo.sort_by_prompt`).

The step's turns come from two domains, interleaved as groups of different domains end up in a step: each
turn is a domain's shared head (`--prompt` tokens: policy, tools, examples) plus a turn-specific rest and a
completion. In sampled order a micro-batch mixes the two domains, shares no prefix and runs full sequences;
sorted, each micro-batch is one domain's and runs its head once. Token ids are drawn at random (seeded), so
the figures are of the arithmetic, not of what a model would say. Each order runs in a fresh process (its
peak RSS is the process's own); prints seconds, peak RSS, loss and gradient norm per order. A measurement:
it asserts nothing.

    .venv/bin/python benchmarks/update_memory.py                 # SmolLM2-135M, 8 turns of ~1,500 tokens
    .venv/bin/python benchmarks/update_memory.py --turns 4 --prompt 64 --rest 16 --completion 8 --micro 2  # quick
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def turns(args: argparse.Namespace) -> list:
    from tbx.rl.native import TurnSample

    rng = random.Random(args.seed)
    heads = [[rng.randrange(100, 40000) for _ in range(args.prompt)] for _ in range(2)]
    samples = []
    for i in range(args.turns):
        rest = [rng.randrange(100, 40000) for _ in range(args.rest + 10 * i)]
        completion = [rng.randrange(100, 40000) for _ in range(args.completion + 5 * i)]
        samples.append(TurnSample(tuple(heads[i % 2] + rest), tuple(completion), 0.5 if i % 4 < 2 else -0.5))
    return samples


def one_update(args: argparse.Namespace) -> dict:
    import torch

    from tbx.config import ModelConfig
    from tbx.policies.hf_model import load_model
    from tbx.rl.grpo import LossSettings
    from tbx.rl.native import grpo_update

    model = load_model(ModelConfig()).model  # the embedded default, converted into ~/.cache/tbx on first use
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    samples = turns(args)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    started = time.perf_counter()
    result = grpo_update(model, optimizer, samples, LossSettings(), pad_id=0, micro_batch_size=args.micro,
                         temperature=1.0, max_grad_norm=1.0, sort_by_prompt=args.one == "sorted")
    return {"order": args.one, "seconds": time.perf_counter() - started, "loaded_gb": before,
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, "loss": result.loss,
            "grad_norm": result.grad_norm, "tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=1000, help="tokens of each domain's shared head")
    parser.add_argument("--rest", type=int, default=300, help="turn-specific prompt tokens (+10 a turn)")
    parser.add_argument("--completion", type=int, default=200, help="completion tokens (+5 a turn)")
    parser.add_argument("--micro", type=int, default=4, help="grpo.micro_batch_size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", choices=("sampled", "sorted"), help=argparse.SUPPRESS)  # the child's order
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_update(args)))
        return
    print(f"{args.turns} turns of two domains' prompts ({args.prompt}-token heads), micro-batches of {args.micro}")
    for order in ("sampled", "sorted"):
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", order], capture_output=True,
                               text=True, check=True)
        row = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{order:>8}: {row['seconds']:6.1f} s, peak RSS {row['peak_gb']:5.2f} GB (model loaded: "
              f"{row['loaded_gb']:.2f} GB), loss {row['loss']:.6g}, grad norm {row['grad_norm']:.6g}, "
              f"{row['tokens']} tokens", flush=True)


if __name__ == "__main__":
    main()
