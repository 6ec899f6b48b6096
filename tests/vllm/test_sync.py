"""Weight syncs into the real vLLM: after the trainer's update reaches the server (full parameters: an
in-place reload; LoRA: a runtime adapter), the server's greedy tokens are the trained HF model's, every
response carries the new version, and turns of any other version are refused."""

from __future__ import annotations

import asyncio

import pytest
import torch

from tbx.messages import Message
from tbx.policies.trainable import StaleSamplesError, TrainablePolicy
from tbx.policies.vllm import Turn, folder_version, serve
from tbx.rl.grpo import LossSettings
from tbx.rl.native import TurnSample, grpo_update
from tests.helpers.prompts import POLICY, REQUESTS, TOOLS
from tests.vllm.servers import attached

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def hf_greedy(model, ids: tuple[int, ...], count: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                             max_new_tokens=count, do_sample=False)
    return out[0, len(ids):].tolist()


def hf_logprobs(model, ids: tuple[int, ...], tokens: tuple[int, ...]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1).tolist()


def served_greedy(policy: TrainablePolicy, ids: tuple[int, ...]):
    async def main():
        try:
            return await policy.generate(ids, seed=0)
        finally:
            await policy.aclose()
    return asyncio.run(main())


def one_update(policy: TrainablePolicy, ids: tuple[int, ...], target: tuple[int, ...], lr: float) -> None:
    """A GRPO step that pushes the model towards `target` after `ids` (advantage +1)."""
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=lr)
    grpo_update(policy.model, optimizer, [TurnSample(ids, target, 1.0)], LossSettings(), pad_id=policy.pad_id,
                micro_batch_size=1, temperature=1.0, max_grad_norm=1e9)


def test_a_full_parameter_sync_makes_the_server_answer_as_the_trained_model(smollm2_vllm, smollm2_directory,
                                                                             tmp_path):
    """The production path: the tied SmolLM2 trained, its step written with its output layer beside it
    (tbx/vllm/weights.py), reloaded into the server that serves its serving copy."""
    from tbx.policies.hf_model import load_directory

    model_cfg = attached(smollm2_vllm, temperature=0.0, max_new_tokens=16, path=str(smollm2_directory))
    module, _ = load_directory(smollm2_directory, "float32")
    assert module.config.tie_word_embeddings
    policy = TrainablePolicy(serve(model_cfg), model=module, finetune="full", weights_dir=tmp_path / "weights",
                             run_name="run")
    ids = policy.prompt_ids([Message("system", POLICY), Message("user", REQUESTS[0])], TOOLS)
    try:
        before = hf_greedy(module, ids, 16)
        served_before = served_greedy(policy, ids)  # also fills vLLM's prefix cache with the old weights' keys
        assert list(served_before.token_ids) == before[:len(served_before.token_ids)]
        target = tuple(policy.tokenizer("I will look up account 3 for you.", add_special_tokens=False)["input_ids"])
        one_update(policy, ids, target, lr=1e-4)
        after = hf_greedy(module, ids, 16)
        assert after != before  # the step changed the model's answer: the comparison below has teeth
        seconds = policy.sync_weights(1)
        served = served_greedy(policy, ids)
        assert list(served.token_ids) == after[:len(served.token_ids)] and len(served.token_ids) > 1
        # the served log-probs are the trained module's (a stale prefix cache would shift them)
        trained = hf_logprobs(module, ids, served.token_ids)
        assert max(abs(a - b) for a, b in zip(served.logprobs, trained, strict=True)) < 1e-3
        assert served.weight_versions == ("run:step_1",) and policy.weights_version == "run:step_1"
        print(f"full-parameter sync of SmolLM2-135M: {seconds:.2f} s")
        policy.check_samples([Turn(ids, served.token_ids, served.logprobs, served.weight_versions)])
        with pytest.raises(StaleSamplesError, match="1 of 2 turns"):
            policy.check_samples([Turn(ids, served.token_ids, (), served.weight_versions),
                                  Turn(ids, served.token_ids, (), ("smollm2_135m@base",))])
    finally:  # the base weights back, for the other tests
        smollm2_vllm.load_weights(smollm2_vllm.spec.directory, folder_version("smollm2_135m", smollm2_directory))


def test_a_lora_sync_serves_the_adapter_the_trainer_holds(tiny_vllm, tmp_path):
    from peft import LoraConfig, get_peft_model

    from tbx.policies.hf_model import load_directory

    module, _ = load_directory(tiny_vllm.spec.directory, "float32")
    torch.manual_seed(0)  # the adapter's random init: without a seed it came from whatever earlier tests drew
    module = get_peft_model(module, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                               task_type="CAUSAL_LM"))
    policy = TrainablePolicy(serve(attached(tiny_vllm, temperature=0.0, max_new_tokens=4)), model=module,
                             finetune="lora", weights_dir=tmp_path / "weights", run_name="lora-run")
    ids = policy.prompt_ids([Message("system", "Help."), Message("user", "hi")], [])
    before = hf_greedy(module, ids, 4)
    target = (next(t for t in range(len(policy.tokenizer)) if t != before[0]),)  # another first token
    for _ in range(3):
        one_update(policy, ids, target, lr=0.05)
    after = hf_greedy(module, ids, 4)
    assert after[0] != before[0]  # the adapter changed the answer: the comparison below has teeth
    policy.sync_weights(1)
    served = served_greedy(policy, ids)
    assert policy.served_model == "lora-run-step_1" and served.weight_versions == ("lora-run:step_1",)
    assert list(served.token_ids) == after[:len(served.token_ids)]
    policy.sync_weights(2)  # the next step's adapter replaces the first one
    assert policy.served_model == "lora-run-step_2"
    assert served_greedy(policy, ids).weight_versions == ("lora-run:step_2",)
    assert {"lora-run-step_2"} == {m for m in tiny_vllm.served_models() if m.startswith("lora-run")}
    policy.sync_weights(2)  # a resumed run syncs a step a killed one had loaded already: no clash
    assert tiny_vllm.served_models().count("lora-run-step_2") == 1
