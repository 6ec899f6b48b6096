"""An LLM judge over an OpenAI-compatible endpoint, for the few rules a database cannot express.

The judge sees the rule and the transcript (user and agent text, tool calls and tool results;
not the agent's system prompt, which rules do not need) and must answer exactly
`{"verdict": "pass" | "fail", "reason": "..."}`. JSON mode (`response_format: json_object`) is
requested, and dropped for good when the server rejects it; either way the answer is parsed
strictly: any other shape is a `VerifierError`, never a pass (a judge that passes on any answer
containing "yes" is a hole in the reward). An endpoint failure is a
`VerifierError` too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tbx.config import EndpointConfig, JudgeConfig
from tbx.errors import VerifierError
from tbx.grading.judge import Judge, JudgeVerdict
from tbx.llm.client import ChatClient, ChatResult, EndpointError
from tbx.llm.parsing import parse_openai_message  # strips reasoning the same way as for agents
from tbx.messages import Message
from tbx.tasks.model import JudgeRule

JUDGE_SYSTEM = (
    "You are a strict judge of a conversation between a customer-service agent and a user. You decide whether "
    "one rule holds for the agent's behaviour in the transcript. Judge only from the transcript; when it does "
    "not show that the rule holds, the verdict is fail.\n"
    'Answer with one JSON object and nothing else: {"verdict": "pass" or "fail", "reason": "<one sentence>"}'
)


def render_transcript(transcript: Sequence[Message]) -> str:
    """The transcript as numbered plain-text lines, tool traffic included."""
    lines = []
    for message in transcript:
        if message.role == "system":
            continue
        if message.content.strip():
            label = f"tool {message.name}" if message.role == "tool" else message.role
            lines.append(f"[{label}] {message.content.strip()}")
        for call in message.tool_calls:
            lines.append(f"[assistant tool call] {call.name}({json.dumps(call.arguments, sort_keys=True)})")
    return "\n".join(f"{n}. {line}" for n, line in enumerate(lines, start=1))


def build_judge_messages(rule: JudgeRule, transcript: Sequence[Message]) -> list[dict[str, str]]:
    prompt = f"Rule ({rule.id}): {rule.rule}\n\nTranscript:\n{render_transcript(transcript)}\n\nDoes the rule hold?"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}]


def parse_verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) from the judge's answer; anything but the exact JSON shape raises."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise VerifierError(f"judge answer is not JSON: {text[:200]!r}") from None
    if not isinstance(data, dict) or set(data) != {"verdict", "reason"}:
        raise VerifierError(f'judge answer must be exactly {{"verdict", "reason"}}, got: {text[:200]!r}')
    if data["verdict"] not in ("pass", "fail") or not isinstance(data["reason"], str):
        raise VerifierError(f'judge verdict must be "pass" or "fail" with a string reason, got: {text[:200]!r}')
    return data["verdict"] == "pass", data["reason"]


class LLMJudge(Judge):
    name = "llm"

    def __init__(self, endpoint: EndpointConfig, client: ChatClient | None = None, json_mode: bool = True):
        self.endpoint = endpoint
        self.model_name = endpoint.model
        self.client = client or ChatClient(endpoint, role="judge")
        self.json_mode = json_mode

    @classmethod
    def from_config(cls, judge: JudgeConfig) -> LLMJudge:
        return cls(judge.endpoint)

    async def decide(self, rule: JudgeRule, transcript: Sequence[Message]) -> JudgeVerdict:
        messages = build_judge_messages(rule, transcript)
        try:
            result = await self._ask(messages)
        except EndpointError as error:
            raise VerifierError(f"judge endpoint failed on rule {rule.id}: {error}") from error
        passed, reason = parse_verdict((parse_openai_message(result.message).content or "").strip())
        return JudgeVerdict(rule_id=rule.id, passed=passed, reason=reason, usage=result.usage)

    async def _ask(self, messages: list[dict[str, str]]) -> ChatResult:
        if not self.json_mode:
            return await self.client.chat(messages, None)
        try:
            return await self.client.chat(messages, None, response_format={"type": "json_object"})
        except EndpointError as error:
            if error.status not in (400, 422):
                raise
        self.json_mode = False  # the server does not take response_format; the strict parse still holds
        return await self.client.chat(messages, None)

    async def aclose(self) -> None:
        await self.client.aclose()
