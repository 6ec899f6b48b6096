"""policy=model: the agent is a language model, chosen by the `model` group.

`model.kind: vllm` serves it with vLLM and sends it prompts rendered by tbx, token ids in and out
(the embedded default, SmolLM2 on CPU, and models on a GPU cluster alike); `model.kind: openai`
talks chat-completions with tools to an OpenAI-compatible endpoint (hosted providers). Both parse
replies with the same parser.
"""

from __future__ import annotations

from tbx.policies.base import Policy, PolicySetup
from tbx.traits import declares


@declares(plays_model=True)
def from_config(setup: PolicySetup) -> Policy:
    """The model policy `setup.model.kind` names (an enumeration of the schema: vllm or openai)."""
    if setup.model.kind == "vllm":
        from tbx.policies.vllm import VLLMPolicy

        return VLLMPolicy.from_config(setup)
    from tbx.policies.openai_compat import OpenAIPolicy

    return OpenAIPolicy.from_config(setup)
