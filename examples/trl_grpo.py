"""TRL's GRPOTrainer trains the embedded SmolLM2-135M on tbx tasks through `tbx.envs.trl` (docs/environments.md).

    .venv-envs/bin/python examples/trl_grpo.py [STEPS] [tbx overrides ...] [--rollouts 4] [--completion-tokens 48]
        [--temperature 1.0] [--tool-format trl|json|compact|model] [--tool-calls 2]
    .venv-envs/bin/python examples/trl_grpo.py 1 tasks=mock 'tasks.families=[transfer]' tasks.limit=1 \
        --temperature 0.2 --tool-format json --tool-calls 1
    .venv-envs/bin/python examples/trl_grpo.py 2 tasks=train_sample

TRL's own generation (transformers, CPU, no vLLM); the reward is tbx's verdict (`tbx_trl.reward`),
every rollout is stored in the run's results store (`outputs/serve-<tasks>-trl-<hash>/`) with `trl` as the
agent. The prompts carry tbx's worked tool calls when `model.few_shot` is on (SmolLM2-135M's default). SmolLM2's
chat template has no tool calls, so it gets TRL's Qwen2.5 template (ChatML, the same special tokens) and TRL's
parser for it; `--tool-format json|compact` gives the model tbx's own prompt instead of TRL's tool list (the text
tbx's `stage=eval` renders, plus `reply_to_user`; `tbx_trl.chat_tokenizer`). Gradient checkpointing stays off: with
it transformers generates without its KV cache, which on a prompt of a task's policy and tools is many times
slower. Prints one JSON line: steps, seconds, the rewards TRL logged, the tool format and the run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tokenizer_with_tools(directory: str, tool_format: str | None = None):  # a transformers tokenizer
    from tbx.envs import trl as tbx_trl
    from tbx.policies.hf_model import load_tokenizer

    return tbx_trl.chat_tokenizer(load_tokenizer(directory), tool_format)  # type: ignore[arg-type]


def train(steps: int, overrides: list[str], rollouts: int = 4, completion_tokens: int = 48,
          temperature: float = 1.0, tool_format: str | None = None, tool_calls: int = 2) -> dict:
    """`steps` GRPO steps, each one task of `overrides` rolled out `rollouts` times (a group); `tool_format`:
    None: TRL renders the tools (JSON schemas); "json" | "compact": tbx's own prompt for the model, its tools rendered
    so ("model": `model.tool_format`); `tool_calls`: TRL's `max_tool_calling_iterations`."""
    from trl import GRPOConfig, GRPOTrainer

    from tbx.envs import trl as tbx_trl
    from tbx.policies.hf_model import load_directory, model_directory

    start = time.perf_counter()
    tasks = tbx_trl.load(*overrides)
    try:
        directory, _ = model_directory(tasks.cfg.model)  # the packaged GGUF, converted once into the cache
        model, _ = load_directory(directory, "float32")
        tool_format = tasks.cfg.model.tool_format.value if tool_format == "model" else tool_format
        args = GRPOConfig(output_dir=str(tasks.run_dir / "trl"), max_steps=steps,
                          per_device_train_batch_size=rollouts, num_generations=rollouts,
                          max_completion_length=completion_tokens, max_tool_calling_iterations=tool_calls,
                          learning_rate=1e-5, logging_steps=1, gradient_checkpointing=False, report_to="none",
                          save_strategy="no", use_cpu=True,
                          bf16=False, temperature=temperature, seed=tasks.cfg.seed, dataloader_num_workers=0)
        dataset = tbx_trl.dataset(tasks, repeat=steps, few_shot=tasks.cfg.model.few_shot, tool_format=tool_format)
        trainer = GRPOTrainer(model=model, processing_class=tokenizer_with_tools(str(directory), tool_format),
                              args=args, train_dataset=dataset,
                              environment_factory=tbx_trl.environment_factory(tasks), reward_funcs=tbx_trl.reward)
        trainer.train()
        logged = [entry for entry in trainer.state.log_history if "reward" in entry]
        return {"steps": trainer.state.global_step, "seconds": round(time.perf_counter() - start, 1),
                "rewards": [entry["reward"] for entry in logged], "tool_format": tool_format or "trl",
                "run_dir": str(tasks.run_dir)}
    finally:
        tasks.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", type=int, nargs="?", default=2)
    parser.add_argument("overrides", nargs="*", help="the tbx task set, as on the command line")
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts of one task per step (the GRPO group)")
    parser.add_argument("--completion-tokens", type=int, default=48, help="TRL's max_completion_length")
    parser.add_argument("--temperature", type=float, default=1.0, help="TRL's sampling temperature")
    parser.add_argument("--tool-format", default="trl", choices=["trl", "json", "compact", "model"],
                        help="trl: TRL renders the tools; json | compact | model (model.tool_format): tbx's own prompt")
    parser.add_argument("--tool-calls", type=int, default=2, help="TRL's max_tool_calling_iterations")
    args = parser.parse_args()
    tool_format = None if args.tool_format == "trl" else args.tool_format
    print(json.dumps(train(args.steps, args.overrides or ["tasks=train_sample"], args.rollouts, args.completion_tokens,
                           args.temperature, tool_format, args.tool_calls)))


if __name__ == "__main__":
    main()
