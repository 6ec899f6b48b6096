"""Benchmark: the embedded SmolLM2 policy through its batching scheduler.

Prints turns/s and completion tokens/s at 1, 4 and 16 concurrent agents (each agent asks for
turns one after another, as episodes do), and the share of turns that parse as tool calls
(and name an available tool) on a simple bank prompt with few-shot demonstrations, greedy and
sampled. The model loads from the converted cache (run the tests or the policy once first, or
pay the one-time conversion here). This is a measurement, not a test: it asserts nothing.

    .venv/bin/python benchmarks/local_policy.py                  # one torch thread
    .venv/bin/python benchmarks/local_policy.py --threads 2      # ModelConfig's default

One thread by default: on the shared 2-core machine, two torch threads ran 4-5x slower than one
whenever other processes competed for the cores (1 agent: 3.9 vs 12.8 tokens/s).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from types import SimpleNamespace

from tbx.config import ModelConfig
from tbx.messages import AssistantTurn, Message, ToolSchema
from tbx.policies.base import EpisodeContext
from tbx.policies.decoding import Decoder
from tbx.policies.hf_model import load_model
from tbx.policies.local import LocalPolicy

POLICY = "# Mock bank policy\n- Verify the account owner's name before moving money."
TOOLS = [
    ToolSchema("get_account", "Look up an account by its id.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}}, "required": ["account_id"]}),
    ToolSchema("transfer", "Move money between two accounts. Frozen accounts cannot send money.",
               {"type": "object", "properties": {"from_account": {"type": "integer"}, "to_account": {"type": "integer"},
                                                 "amount": {"type": "number"}}, "required": ["from_account", "to_account",
                                                                                             "amount"]}),
    ToolSchema("set_nickname", "Give an account a nickname.",
               {"type": "object", "properties": {"account_id": {"type": "integer"}, "nickname": {"type": "string"}},
                "required": ["account_id", "nickname"]}),
]
REQUESTS = ["What is the balance of account 3?", "Please look up account 12 for me.",
            "Send 50 dollars from account 1 to account 2.", "Call account 7 'Savings' please.",
            "Can you tell me about account number 5?", "Move 20 dollars from account 4 to account 9.",
            "I'd like to see account 8.", "Rename account 2 to 'Travel'."]


async def run_agents(policy: LocalPolicy, agents: int, turns_each: int) -> tuple[list[AssistantTurn], float]:
    """`agents` concurrent agents, each asking for `turns_each` turns in sequence."""
    task = SimpleNamespace(id="bench")

    async def one(index: int) -> list[AssistantTurn]:
        agent = policy.agent(EpisodeContext(task, 0, seed=index))
        results = []
        for turn in range(turns_each):
            text = REQUESTS[(index + turn * agents) % len(REQUESTS)]
            results.append(await agent.act([Message("system", POLICY), Message("user", text)], TOOLS))
        return results

    start = time.perf_counter()
    nested = await asyncio.gather(*(one(index) for index in range(agents)))
    return [turn for group in nested for turn in group], time.perf_counter() - start


def call_share(turns: list[AssistantTurn]) -> str:
    names = {tool.name for tool in TOOLS}
    calls = sum(bool(turn.tool_calls) for turn in turns)
    right = sum(any(call.name in names for call in turn.tool_calls) for turn in turns)
    return f"{calls}/{len(turns)} parse as tool calls, {right}/{len(turns)} name an available tool"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)  # see the module docstring
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()

    start = time.perf_counter()
    loaded = load_model(ModelConfig())
    print(f"model: {loaded.directory.name}  converted={loaded.converted} ({loaded.convert_seconds:.1f} s)  "
          f"load {time.perf_counter() - start:.1f} s  threads={args.threads}  cpus={os.cpu_count()}  "
          f"load average {os.getloadavg()[0]:.1f}")
    decoder = Decoder(loaded.model, loaded.tokenizer)
    base = dataclasses.replace(ModelConfig(), threads=args.threads, max_new_tokens=args.max_new_tokens)
    greedy = LocalPolicy(loaded, dataclasses.replace(base, temperature=0.0, batch_size=16), decoder)
    start = time.perf_counter()
    asyncio.run(run_agents(greedy, 1, 1))  # warm-up: encodes and caches the shared prompt prefix
    print(f"warm-up turn (prefix encoding) {time.perf_counter() - start:.1f} s")

    print(f"\n{'agents':>6} {'turns':>5} {'seconds':>8} {'turns/s':>8} {'tokens/s':>9} {'batches':>8}")
    rates = {}
    for agents, turns_each in ((1, 4), (4, 2), (16, 1)):
        greedy.scheduler.batches.clear()
        turns, seconds = asyncio.run(run_agents(greedy, agents, turns_each))
        tokens = sum(turn.usage.completion_tokens for turn in turns)
        rates[agents] = tokens / seconds
        print(f"{agents:>6} {len(turns):>5} {seconds:>8.1f} {len(turns) / seconds:>8.2f} {rates[agents]:>9.1f} "
              f"{max(greedy.scheduler.batches):>8}")
        if agents == 16:
            print(f"\ngreedy (16 turns): {call_share(turns)}")
    print(f"tokens/s speed-up 1 -> 16 agents: x{rates[16] / rates[1]:.1f}")

    sampled = LocalPolicy(loaded, dataclasses.replace(base, batch_size=16), decoder)  # config temperature
    turns, _ = asyncio.run(run_agents(sampled, 16, 1))
    print(f"sampled T={base.temperature} top_p={base.top_p} (16 turns): {call_share(turns)}")
    asyncio.run(greedy.aclose())
    asyncio.run(sampled.aclose())


if __name__ == "__main__":
    main()
