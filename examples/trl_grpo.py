"""TRL's GRPOTrainer trains the embedded SmolLM2-135M on tbx tasks through `tbx.envs.trl` (docs/environments.md).

    .venv-envs/bin/python examples/trl_grpo.py [STEPS] [tbx overrides ...] [--rollouts 4] [--completion-tokens 48]
        [--temperature 1.0]
    .venv-envs/bin/python examples/trl_grpo.py 1 tasks=mock 'tasks.families=[transfer]' tasks.limit=1 --temperature 0.5
    .venv-envs/bin/python examples/trl_grpo.py 2 tasks=train_sample

TRL's own generation (transformers, CPU, no vLLM); the reward is tbx's verdict (`tbx_trl.reward`),
every rollout is stored in the run's results store (`outputs/serve-<tasks>-trl-<hash>/`) with `trl` as the
agent. The prompts carry tbx's worked tool calls when `model.few_shot` is on (SmolLM2-135M's default). SmolLM2's chat template
has no tool calls, so it gets TRL's Qwen2.5 template (ChatML, the same special tokens) and TRL's
parser for it. Gradient checkpointing stays off: with it transformers generates without its KV cache, which
on a prompt of a task's policy and tools is many times slower. Prints one JSON line: steps, seconds, the rewards TRL logged and the run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tokenizer_with_tools(directory: str):  # a transformers tokenizer
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    from tbx.policies.hf_model import load_tokenizer

    tokenizer = load_tokenizer(directory)
    tokenizer.chat_template = qwen2_5_chat_template
    return add_response_schema(tokenizer)


def train(steps: int, overrides: list[str], rollouts: int = 4, completion_tokens: int = 48,
          temperature: float = 1.0) -> dict:
    """`steps` GRPO steps, each one task of `overrides` rolled out `rollouts` times (a group)."""
    from trl import GRPOConfig, GRPOTrainer

    from tbx.envs import trl as tbx_trl
    from tbx.policies.hf_model import load_directory, model_directory

    start = time.perf_counter()
    tasks = tbx_trl.load(*overrides)
    try:
        directory, _ = model_directory(tasks.cfg.model)  # the packaged GGUF, converted once into the cache
        model, _ = load_directory(directory, "float32")
        args = GRPOConfig(output_dir=str(tasks.run_dir / "trl"), max_steps=steps,
                          per_device_train_batch_size=rollouts, num_generations=rollouts,
                          max_completion_length=completion_tokens, max_tool_calling_iterations=2,
                          learning_rate=1e-5, logging_steps=1, gradient_checkpointing=False, report_to="none",
                          save_strategy="no", use_cpu=True,
                          bf16=False, temperature=temperature, seed=tasks.cfg.seed, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, processing_class=tokenizer_with_tools(str(directory)), args=args,
                              train_dataset=tbx_trl.dataset(tasks, repeat=steps, few_shot=tasks.cfg.model.few_shot),
                              environment_factory=tbx_trl.environment_factory(tasks), reward_funcs=tbx_trl.reward)
        trainer.train()
        logged = [entry for entry in trainer.state.log_history if "reward" in entry]
        return {"steps": trainer.state.global_step, "seconds": round(time.perf_counter() - start, 1),
                "rewards": [entry["reward"] for entry in logged], "run_dir": str(tasks.run_dir)}
    finally:
        tasks.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", type=int, nargs="?", default=2)
    parser.add_argument("overrides", nargs="*", help="the tbx task set, as on the command line")
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts of one task per step (the GRPO group)")
    parser.add_argument("--completion-tokens", type=int, default=48, help="TRL's max_completion_length")
    parser.add_argument("--temperature", type=float, default=1.0, help="TRL's sampling temperature")
    args = parser.parse_args()
    print(json.dumps(train(args.steps, args.overrides or ["tasks=train_sample"], args.rollouts, args.completion_tokens,
                           args.temperature)))


if __name__ == "__main__":
    main()
