"""The policy the native trainer updates: rollouts from vLLM, updates on a transformers copy.

vLLM samples every turn (the same token-in/token-out path as evaluation) and hands back the token
ids and the version of the weights that sampled them; each training episode is played by `traced()`, a view
of the policy whose agent keeps the turns it sampled, which the trainer reads with the episode's result, and
the GRPO update runs on the policy's own torch module. After each update the new weights
reach the running server through vLLM's own API (`sync_weights`):

- full parameters: the module is saved as safetensors into `<run>/weights/step_N` (with its output
  layer as a tensor of its own when it ties it to the embeddings: tbx/vllm/weights.py says why) and
  reloaded in place (`reload_weights`), the prefix cache is dropped, and responses carry `<run>:step_N`;
- LoRA (`pool=lora`): the adapter is saved into `<run>/weights/step_N` and loaded as a runtime
  adapter named `<model>-step_N`, which requests then name.

`check_samples` refuses turns sampled by any other weights than the current version's, so a step
never learns from stale rollouts. A resumed run loads its checkpoint and syncs those weights before
its first rollout, so the server answers as the uninterrupted run's did.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from tbx.config import Config
from tbx.errors import InfraError
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.policies.vllm import Served, Turn, VLLMAgent, VLLMPolicy, serve
from tbx.process.durable import prune_step_folders
from tbx.vllm.weights import save_for_reload

KEPT_WEIGHTS = 2  # weight folders kept under <run>/weights (the served one and the one before)


class StaleSamplesError(InfraError):
    """Turns sampled by other weights than the ones the step trains."""


class TrainablePolicy(VLLMPolicy):
    name = "trainable"

    def __init__(self, served: Served, *, model: Any, finetune: str, weights_dir: Path, run_name: str,
                 max_staleness: int = 0):
        super().__init__(served)
        self.model, self.finetune = model, finetune  # the torch module being trained
        self.weights_dir, self.run_name = weights_dir, run_name
        self.sync_seconds: list[float] = []
        # asynchronous GRPO (grpo.max_staleness >= 1) plays while it updates: a turn may come from any weights
        # this policy served; which of them a step trains on is the trainer's rule (tbx/rl/staleness.py)
        self.max_staleness = max_staleness
        self.served_versions = [self.weights_version]  # oldest first; the last is the one served now

    def accepts_versions(self, versions: tuple[str, ...]) -> bool:
        if self.max_staleness == 0:
            return super().accepts_versions(versions)
        return set(versions) <= set(self.served_versions)

    @property
    def pad_id(self) -> int:
        tokenizer = self.tokenizer
        return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def agent(self, context: EpisodeContext) -> Agent:
        return VLLMAgent(self, seed=context.seed)

    def traced(self) -> TracedPolicy:
        """This policy for one episode, keeping the turns its agent samples."""
        return TracedPolicy(self)

    def sync_weights(self, step: int) -> float:
        """Send the module's current weights to the server as version `<run>:step_<step>`; seconds taken."""
        version = f"{self.run_name}:step_{step}"
        if self.served_versions[-1] != version:  # a resumed run re-syncs the step it serves
            # before the swap: a turn queued during it answers with this version
            self.served_versions.append(version)
        folder = self.weights_dir / f"step_{step}"
        staging = self.weights_dir / f".step_{step}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        if self.finetune == "lora":
            self.model.save_pretrained(staging, safe_serialization=True)  # the adapter only
        else:
            save_for_reload(self.model, staging)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
        if self.finetune == "lora":
            name = f"{self.run_name}-step_{step}"  # the run's own: two runs on one server never collide
            previous = self.served_model if self.served_model != self.server.spec.served_name else None
            seconds = self.server.load_adapter(name, folder, version, replaces=previous)
            self.served_model = name
        else:
            seconds = self.server.load_weights(folder, version)
        self.weights_version = version
        self.sync_seconds.append(seconds)
        prune_step_folders(self.weights_dir, step, KEPT_WEIGHTS)  # the served step's folder and the one before
        return seconds

    def check_samples(self, turns: list[Turn]) -> None:
        """Raise `StaleSamplesError` when a turn was sampled (in whole or part) by other weights."""
        stale = [t.weight_versions for t in turns if set(t.weight_versions) != {self.weights_version}]
        if stale:
            raise StaleSamplesError(f"{len(stale)} of {len(turns)} turns were sampled by weights {stale[0]}, not "
                                    f"{self.weights_version}: the server's weights changed under the step")

    def save_final(self, folder: Path) -> Path:
        """A plain Hugging Face folder (LoRA merged in) that `model.path=` loads for evaluation; the
        caller publishes it atomically."""
        model = self.model
        if hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        shutil.rmtree(folder, ignore_errors=True)
        model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        return folder


class TracedPolicy(Policy):
    """A policy for one episode that keeps the turns its agent sampled (`turns`): the trainer reads them with
    the episode's result, so a trace travels with its episode (a cancelled episode's goes with it)."""

    def __init__(self, inner: Policy):
        self.inner, self.name, self.model_name = inner, inner.name, inner.model_name
        self._agent: Agent | None = None

    def agent(self, context: EpisodeContext) -> Agent:
        self._agent = self.inner.agent(context)
        return self._agent

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The turns the episode's agent sampled (none before it played, or for an agent that samples none)."""
        return tuple(getattr(self._agent, "trace", ()))


def build_trainable(cfg: Config, run_dir: Path, finetune: str) -> TrainablePolicy:
    """Load the model, make it trainable (`finetune`, the pool manifest's: full parameters, or a LoRA
    adapter), serve it."""
    from tbx.policies.hf_model import load_model

    loaded = load_model(cfg.model)
    model = loaded.model
    lora = finetune == "lora"
    if lora:
        from peft import LoraConfig, get_peft_model

        adapter = LoraConfig(r=cfg.grpo.lora_rank, lora_alpha=cfg.grpo.lora_alpha,
                             target_modules=cfg.grpo.lora_target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, adapter)
    else:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    if cfg.grpo.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.eval()
    served = serve(cfg.model, lora_rank=cfg.grpo.lora_rank if lora else 0, seed=cfg.seed, directory=loaded.directory,
                   tokenizer=loaded.tokenizer)
    print(f"training {cfg.model.name} ({finetune}) against vLLM at {served.server.base_url}", file=sys.stderr)
    return TrainablePolicy(served, model=model, finetune=finetune, weights_dir=run_dir / "weights",
                           max_staleness=cfg.grpo.max_staleness,
                           run_name=run_dir.name)

