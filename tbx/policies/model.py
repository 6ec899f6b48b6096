"""policy=model: the agent is a language model, chosen by the `model` group.

`model.kind: vllm` serves it with vLLM and sends it prompts rendered by tbx, token ids in and out
(the embedded default, SmolLM2 on CPU, and models on a GPU cluster alike); `model.kind: openai`
talks chat-completions with tools to an OpenAI-compatible endpoint (hosted providers). Both parse
replies with the same parser.
"""

from __future__ import annotations

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.policies.base import Policy


def from_config(cfg: Config) -> Policy:
    if cfg.model.kind == "vllm":
        from tbx.policies.vllm import VLLMPolicy

        return VLLMPolicy.from_config(cfg)
    if cfg.model.kind == "openai":
        from tbx.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy.from_config(cfg)
    raise ConfigError(f"conf/model/{cfg.model.name}.yaml", "model.kind", f"is {cfg.model.kind!r}",
                      "use kind: vllm (tbx serves it with vLLM) or kind: openai (a chat-completions endpoint)")
