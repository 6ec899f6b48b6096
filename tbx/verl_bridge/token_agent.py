"""A tbx `Agent` that speaks token-in/token-out to a rollout server and records the token stream.

verl trains on the exact tokens the rollout produced, so the agent keeps one growing stream for
the episode: the first prompt, then for every turn the generated tokens (mask 1, with their
log-probabilities) and the tokens of whatever the episode appended before the next turn — tool
results, the simulated user's reply, the end-of-turn and the next generation prompt (mask 0).
The next request to the server is the stream itself, never a re-rendering, so the policy is
trained on what it saw.

Where the appended tokens come from: the conversation is rendered with the same prompt builder
evaluation uses (`tbx.policies.prompting`, or the tokenizer's own template with tools for
`prompt_style="native"`), with each of the agent's own turns replaced by a sentinel. The text
after the newest sentinel is the new context; the text before it must equal what was rendered
last turn (else the template rewrites history, and token continuity is impossible: a fatal
config error). A generated end-of-turn token that the template also writes is not repeated.

The output is read by the shared parser (`parse_assistant_text`), as in evaluation. This module
imports neither verl nor ray: `generate` is any coroutine with verl's `LLMServerClient.generate`
signature returning an object with `token_ids`, `log_probs` and `stop_reason`.

Departure from verl's Continuous Token helpers: they render with the chat template's own tool
format; we render with tbx's prompt builder so that training and evaluation prompts agree.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tbx.errors import ConfigError, InfraError
from tbx.llm.parsing import CALL_CLOSE, parse_assistant_text
from tbx.messages import AssistantTurn, Message, ToolSchema, Usage
from tbx.policies.base import Agent
from tbx.policies.prompting import (
    build_chat,
    check_tool_format,
    demonstrations_for,
    encode_prompt,
    render_prompt,
)

PromptStyle = Literal["tbx", "native"]
PROMPT_STYLES = ("tbx", "native")
SENTINEL = "<<tbx-assistant-turn-{}>>"
GenerateFn = Callable[..., Awaitable[Any]]  # (request_id, *, prompt_ids, sampling_params) -> TokenOutput


@dataclass(frozen=True)
class PromptRenderer:
    """Renders a conversation to prompt text, the agent's own turns as numbered sentinels."""

    tokenizer: Any
    style: PromptStyle = "tbx"
    few_shot: bool = True  # tbx style: worked tool-call examples (`model.few_shot`)
    tool_format: str = "json"  # tbx style: `model.tool_format`
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # `model.chat_template_kwargs`

    def __post_init__(self) -> None:
        if self.style not in PROMPT_STYLES:
            raise ConfigError("agent loop", "prompt_style", f"is '{self.style}'",
                              f"use one of {list(PROMPT_STYLES)}")
        if self.style == "native" and not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError("agent loop", "prompt_style", "is 'native' but the tokenizer has no chat template",
                              "use prompt_style=tbx")

    def text(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> str:
        own_turns = sum(message.role == "assistant" for message in messages)
        if self.style == "tbx":
            demonstrations = demonstrations_for(tools) if self.few_shot else ()
            chat = _mark_turns(build_chat(messages, tools, demonstrations, tool_format=check_tool_format(
                self.tool_format)), own_turns)
            return render_prompt(self.tokenizer, chat, self.template_kwargs)
        from tbx.llm.wire import to_openai_messages

        chat = _mark_turns(to_openai_messages(messages), own_turns)
        return self.tokenizer.apply_chat_template(chat, tools=[t.to_openai() for t in tools] or None,
                                                  tokenize=False, add_generation_prompt=True,
                                                  **dict(self.template_kwargs))

    def encode(self, text: str) -> list[int]:
        return encode_prompt(self.tokenizer, text)


def _mark_turns(chat: list[dict[str, Any]], own_turns: int) -> list[dict[str, Any]]:
    """Replace the last `own_turns` assistant entries (the agent's; demonstrations come first)."""
    positions = [i for i, entry in enumerate(chat) if entry["role"] == "assistant"]
    positions = positions[len(positions) - own_turns:] if own_turns else []
    marked = list(chat)
    for number, position in enumerate(positions):
        marked[position] = {"role": "assistant", "content": SENTINEL.format(number)}
    return marked


@dataclass
class TokenTrace:
    """The episode's token stream as verl wants it (an accumulator, filled turn by turn)."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)  # 1: generated by the policy; 0: context
    logprobs: list[float] | None = field(default_factory=list)  # None once a turn came without them
    exhausted: bool = False  # the response budget ran out: the episode must end
    generations: int = 0
    generate_seconds: float = 0.0
    num_preempted: int = 0
    # weight versions (verl's global steps) that generated the stream: the first turn's earliest and the
    # last turn's latest, as verl's server reports them per call; verl's V1 trainer reads both
    min_weight_step: int | None = None
    max_weight_step: int | None = None

    def record_weights(self, extra: Mapping[str, Any] | None) -> None:
        """Note the weight versions a generate call reported (`TokenOutput.extra_fields`)."""
        extra = extra or {}
        low, high = extra.get("min_global_steps"), extra.get("max_global_steps")
        if low is not None and self.min_weight_step is None:
            self.min_weight_step = int(low)
        if high is not None:
            self.max_weight_step = int(high)

    def append(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] | None = None) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([1 if generated else 0] * len(ids))
        if self.logprobs is not None:
            if generated and logprobs is None:
                self.logprobs = None
            else:
                self.logprobs.extend(logprobs if generated else [0.0] * len(ids))


@dataclass(frozen=True)
class TokenLimits:
    prompt: int  # most tokens of the first prompt (verl rollout.prompt_length)
    response: int  # most tokens of the whole response stream (verl rollout.response_length)
    new_tokens: int | None = None  # most tokens per turn (None: whatever the response budget leaves)


class TokenAgent(Agent):
    """One episode's agent over a token-level `generate` (verl's server manager in training)."""

    def __init__(self, generate: GenerateFn, renderer: PromptRenderer, limits: TokenLimits, request_id: str,
                 sampling_params: dict[str, Any], stop_after_tool_call: bool = True):
        self.generate, self.renderer, self.limits = generate, renderer, limits
        self.request_id, self.sampling_params = request_id, dict(sampling_params)
        self.stop_after_tool_call = stop_after_tool_call
        self.trace = TokenTrace()
        self.fatal: ConfigError | None = None  # a setup error the same for every episode: re-raised by the loop
        self._rendered = ""  # the text the stream so far stands for
        special = getattr(renderer.tokenizer, "all_special_ids", None) or []
        self._special_ids = frozenset(int(i) for i in special)

    def _fail(self, problem: str, fix: str, field_name: str = "prompt_style") -> None:
        self.fatal = ConfigError("verl agent loop", field_name, problem, fix)
        raise self.fatal

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        if self.trace.exhausted:
            return AssistantTurn()
        text = self.renderer.text(messages, tools)
        if not self.trace.prompt_ids:
            ids = self.renderer.encode(text)
            if len(ids) > self.limits.prompt:
                self._fail(f"the first prompt has {len(ids)} tokens, more than data.max_prompt_length="
                           f"{self.limits.prompt}", f"raise grpo.max_prompt_tokens to at least {len(ids)}",
                           "max_prompt_tokens")
            self.trace.prompt_ids = ids
        elif not self._append_context(text, sum(message.role == "assistant" for message in messages)):
            self.trace.exhausted = True
            return AssistantTurn()
        self._rendered = text
        return await self._generate()

    def _append_context(self, text: str, own_turns: int) -> bool:
        """Append the tokens of everything since the last generation; False if they do not fit."""
        if not text.startswith(self._rendered):
            self._fail("the chat template renders earlier turns differently once turns are appended, so the "
                       "token stream cannot continue", "use prompt_style=tbx or a template that only appends")
        rest = text[len(self._rendered):]
        marker = SENTINEL.format(own_turns - 1)
        at = rest.find(marker)
        if at < 0:
            self._fail("the chat template dropped the agent's last turn", "use prompt_style=tbx")
        ids = self.renderer.encode(rest[at + len(marker):])
        trace = self.trace
        generated_end = bool(trace.response_mask) and trace.response_mask[-1] == 1 and \
            trace.response_ids[-1] in self._special_ids
        if ids and generated_end and ids[0] == trace.response_ids[-1]:
            ids = ids[1:]  # the model already generated the end-of-turn the template writes
        if len(trace.response_ids) + len(ids) >= self.limits.response:  # no room left to generate
            return False
        trace.append(ids, generated=False)
        return True

    async def _generate(self) -> AssistantTurn:
        trace = self.trace
        room = self.limits.response - len(trace.response_ids)
        params = dict(self.sampling_params, max_tokens=min(room, self.limits.new_tokens or room))
        if self.stop_after_tool_call:  # one call per turn, as the evaluation decoder does
            params |= {"stop": [CALL_CLOSE], "include_stop_str_in_output": True}
        stream = trace.prompt_ids + trace.response_ids
        start = time.perf_counter()
        output = await self.generate(self.request_id, prompt_ids=stream, sampling_params=params)
        trace.generate_seconds += time.perf_counter() - start
        if getattr(output, "stop_reason", None) == "aborted":
            raise InfraError("the rollout server aborted the generation")
        tokens = list(output.token_ids)[:room]
        logprobs = getattr(output, "log_probs", None)
        trace.append(tokens, generated=True, logprobs=None if logprobs is None else list(logprobs)[:len(tokens)])
        trace.generations += 1
        trace.record_weights(getattr(output, "extra_fields", None))
        trace.num_preempted += getattr(output, "num_preempted", None) or 0
        if len(trace.response_ids) >= self.limits.response:
            trace.exhausted = True
        parsed = parse_assistant_text(self.renderer.tokenizer.decode(tokens, skip_special_tokens=True))
        return AssistantTurn(content=parsed.content, tool_calls=parsed.tool_calls, malformed=parsed.malformed,
                             usage=Usage(prompt_tokens=len(stream), completion_tokens=len(tokens)))
