"""policy=model: the agent is a language model, chosen by the `model` group.

`model.kind: local` runs it in-process with transformers (the embedded default, SmolLM2 on
CPU); `model.kind: openai` talks to an OpenAI-compatible endpoint (vLLM on clusters, or any
provider). Both parse replies with the same parser.
"""

from __future__ import annotations

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.policies.base import Policy


def from_config(cfg: Config) -> Policy:
    if cfg.model.kind == "local":
        from tbx.policies.local import LocalPolicy

        return LocalPolicy.from_config(cfg)
    if cfg.model.kind == "openai":
        from tbx.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy.from_config(cfg)
    raise ConfigError(f"conf/model/{cfg.model.name}.yaml", "model.kind", f"is {cfg.model.kind!r}",
                      "use kind: local (transformers in-process) or kind: openai (an endpoint)")
