"""A policy served by an OpenAI-compatible endpoint (vLLM on a cluster, or a hosted provider).

The agent sends the conversation and the MCP tool schemas, and reads the reply with the shared
parser (`tbx.llm.parsing`), the same one the local model and the verl bridge use, so native
`tool_calls`, hermes `<tool_call>` text and reasoning are read identically in evaluation and
training. An endpoint failure raises `InfraError`; the episode loop maps it to `infra_error`.

Except when the agent's own request caused it (`agent_fault`): a refusal for a conversation longer
than the model's context window, any other refusal of the request's content (400, 413, 422), and a
provider's content filter (a refusal naming it, or `finish_reason: content_filter`) end the
conversation as the agent's (`AgentFault`), so a model with a small window is not scored only on
the episodes it could fit. Refusals of the endpoint itself (401, 403, 404, 429, 5xx) stay errors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tbx.config import EndpointConfig
from tbx.errors import AgentFault
from tbx.llm.client import ChatClient, EndpointError
from tbx.llm.parsing import parse_openai_message
from tbx.llm.wire import to_openai_messages
from tbx.messages import AssistantTurn, Message, ToolSchema
from tbx.policies.base import Agent, EpisodeContext, Policy, PolicySetup

AGENT_STATUSES = frozenset({400, 413, 422})  # the request's content was refused, not the endpoint's state
_CONTEXT = re.compile(r"context.(length|window)|maximum context|too many tokens|prompt is too long|input is too "
                      r"long|reduce the length|longer than the model|max_tokens.{0,40}too large", re.IGNORECASE)
_FILTER = re.compile(r"content.(filter|management|policy)|responsible.?ai|safety system|flagged", re.IGNORECASE)


def agent_fault(error: EndpointError) -> AgentFault | None:
    """The agent's end an endpoint refusal stands for (pure), or None when it is the endpoint's error."""
    if error.status not in AGENT_STATUSES:
        return None
    detail = f"HTTP {error.status}: {error.body or error}"
    if error.status == 413 or _CONTEXT.search(error.body):
        return AgentFault("context_overflow", detail)
    if _FILTER.search(error.body):
        return AgentFault("content_filter", detail)
    return AgentFault("request_refused", detail)


class OpenAIPolicy(Policy):
    name = "openai"
    plays_model = True

    def __init__(self, endpoint: EndpointConfig, *, model_name: str = "", price_input_per_mtok: float = 0.0,
                 price_output_per_mtok: float = 0.0, client: ChatClient | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None):
        """`chat_template_kwargs`: sent with every request (vLLM passes them to the chat template)."""
        self.endpoint = endpoint
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.model_name = model_name or endpoint.model
        self.price_input_per_mtok = price_input_per_mtok
        self.price_output_per_mtok = price_output_per_mtok
        self.client = client or ChatClient(endpoint, role="model")

    @classmethod
    def from_config(cls, setup: PolicySetup) -> OpenAIPolicy:
        """Build from the `model` group: its endpoint, its name (for accounting) and its prices.

        Prices: the model's own fields win; when both are 0 the endpoint's fields are used, so a
        provider preset can carry its prices.
        """
        model, endpoint = setup.model, setup.model.endpoint
        priced = model.price_input_per_mtok or model.price_output_per_mtok
        return cls(
            endpoint,
            model_name=model.name,
            price_input_per_mtok=model.price_input_per_mtok if priced else endpoint.price_input_per_mtok,
            price_output_per_mtok=model.price_output_per_mtok if priced else endpoint.price_output_per_mtok,
            chat_template_kwargs=model.chat_template_kwargs,
        )

    def agent(self, context: EpisodeContext) -> Agent:
        return OpenAIAgent(self.client, seed=context.seed, chat_template_kwargs=self.chat_template_kwargs)

    def engine(self) -> dict[str, Any]:
        return {"name": "openai-compatible", "base_url": self.endpoint.base_url, "model": self.endpoint.model}

    async def aclose(self) -> None:
        await self.client.aclose()


class OpenAIAgent(Agent):
    """One episode's agent: stateless apart from its sampling seed."""

    def __init__(self, client: ChatClient, seed: int | None = None, chat_template_kwargs: dict[str, Any] | None = None):
        self.client = client
        self.seed = seed
        self.chat_template_kwargs = chat_template_kwargs or {}

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        overrides: dict[str, Any] = {} if self.seed is None else {"seed": self.seed}
        if self.chat_template_kwargs:  # only when set: providers may reject a field they do not know
            overrides["chat_template_kwargs"] = self.chat_template_kwargs
        try:
            result = await self.client.chat(to_openai_messages(messages), [t.to_openai() for t in tools] or None,
                                            **overrides)
        except EndpointError as error:
            fault = agent_fault(error)
            if fault is None:
                raise
            raise fault from error
        if result.finish_reason == "content_filter":
            raise AgentFault("content_filter", "the provider's filter stopped the reply (finish_reason content_filter)")
        parsed = parse_openai_message(result.message)
        return AssistantTurn(content=parsed.content, tool_calls=tuple(parsed.tool_calls), usage=result.usage,
                             malformed=tuple(parsed.malformed))
