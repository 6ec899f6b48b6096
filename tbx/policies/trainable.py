"""The local policy the native trainer updates: same generation path as evaluation, plus the
token trace of every turn, LoRA when the pool says so, and a way to save the trained model."""

from __future__ import annotations

from pathlib import Path

from tbx.config import Config
from tbx.policies.base import Agent, EpisodeContext
from tbx.policies.hf_model import load_model
from tbx.policies.local import LocalAgent, LocalPolicy


class TrainablePolicy(LocalPolicy):
    name = "trainable"

    def __init__(self, *args, **kwargs):  # noqa: ANN002, ANN003 - LocalPolicy's arguments
        super().__init__(*args, **kwargs)
        self._agents: dict[int, LocalAgent] = {}

    @property
    def model(self):  # noqa: ANN201 - the torch module being trained
        return self.loaded.model

    @property
    def pad_id(self) -> int:
        tokenizer = self.loaded.tokenizer
        return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def agent(self, context: EpisodeContext) -> Agent:
        agent = LocalAgent(self, seed=context.seed)
        self._agents[context.seed] = agent
        return agent

    def take_trace(self, seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The (prompt ids, generated ids) of each turn of the episode played with `seed`."""
        agent = self._agents.pop(seed, None)
        return agent.trace if agent is not None else []

    def weights_changed(self) -> None:
        """Cached prefix keys/values were computed with the old weights: drop them."""
        self.decoder.clear_prefixes()

    def save_final(self, folder: Path) -> Path:
        """A plain Hugging Face folder (LoRA merged in) that `model.path=` loads for evaluation."""
        model = self.model
        if hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder)
        self.loaded.tokenizer.save_pretrained(folder)
        return folder


def build_trainable(cfg: Config) -> TrainablePolicy:
    """Load the model, make it trainable (full parameters, or a LoRA adapter for pool=lora)."""
    import dataclasses

    loaded = load_model(cfg.model)
    model = loaded.model
    if cfg.pool.finetune == "lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.grpo.lora_rank, lora_alpha=cfg.grpo.lora_alpha,
                          target_modules=cfg.grpo.lora_target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    else:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    if cfg.grpo.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.eval()
    return TrainablePolicy(dataclasses.replace(loaded, model=model), cfg.model)
