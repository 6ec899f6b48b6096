"""The LLM user: a model plays the customer from the scenario's persona, goal and private facts.

A simulated user is a measured error source (premature stops and invented facts move scores by many
points: docs/users.md). So every turn is audited by a pure function before the agent
sees it, and a turn that breaks the contract raises `UserSimError` (outcome `user_sim_error`,
never an agent failure):

- **leak**: the turn states a private fact's value for the first time although the agent's last
  message did not ask for it: neither in the scripted user's reading (`tbx.users.facts`, the
  same lexicon, so "When were you born?" asks for a date of birth) nor by one of its keywords;
- **invented fact**: the turn states an identifier-like value (a token with a letter and a digit,
  like `BK-1042`, or with two or more digits, like `1450` or `2026-03-14`) that appears in no
  private fact, not in the persona, goal or opening, and not earlier in the visible conversation;
- **premature stop**: the turn ends the conversation (`###STOP###`) while the agent's last message
  asks the user something (a question or a request, `tbx.users.reading`; an offer of further help
  such as "Anything else?" does not count): the agent is waiting for an answer, so the user walked
  away mid-task. (A stop after the agent reports done or refuses is the user's right, whatever the
  agent did.) A stop records why (`UserTurn.reason`): completed or cannot_help when the agent's last
  message reads so, else `user`.

Values shorter than two characters are too common to audit as leaks. An endpoint failure is a
`UserSimError` too: here the simulator is what failed, not the agent's model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tbx.config import EndpointConfig, UserConfig
from tbx.errors import InfraError, UserSimError
from tbx.grading.audit import fact_leaves
from tbx.llm.client import ChatClient
from tbx.llm.parsing import parse_openai_message  # strips reasoning the same way as for agents
from tbx.messages import Message
from tbx.tasks.model import Simulation, UserScenario
from tbx.users.base import STOP, Opening, UserSession, UserSimulator, UserTurn
from tbx.users.facts import reader_for
from tbx.users.reading import ending_of, read_sentences

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_\-./:]*[A-Za-z0-9])?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ORDINAL = re.compile(r"\d+(st|nd|rd|th)")
_DECIMAL = re.compile(r"\d+\.\d+")


def build_user_prompt(scenario: UserScenario) -> str:
    """The simulator's system prompt: persona, goal, structured private facts and the rules."""
    facts = "\n".join(
        f"- {name}: {_show(fact.value)} (share it only when the agent asks for it, in any words; "
        f"for example: {', '.join(fact.keywords)})"
        for name, fact in scenario.private_facts.items()
    ) or "- (none)"
    return (
        "You are playing a customer who is talking to a customer-service agent. Stay in character and write "
        "only your own next message, briefly, as the customer would.\n\n"
        f"Persona: {scenario.persona}\n"
        f"Your goal: {scenario.instructions}\n"
        f"You opened the conversation with: {scenario.opening_message}\n\n"
        f"Private facts (the agent does not know them):\n{facts}\n\n"
        "Rules:\n"
        "1. Reveal a private fact only when the agent asks for it; never volunteer it.\n"
        "2. Never invent facts: no identifiers, numbers, dates or details beyond those above. If asked for "
        "something you do not know, say you do not know.\n"
        "3. Do not do the agent's work and do not pretend actions happened.\n"
        f"4. When your goal is done, or the agent has made clear it cannot be done, end your message with {STOP}. "
        f"Never write {STOP} before that.\n"
    )


def to_user_view(system_prompt: str, conversation: Sequence[Message]) -> list[dict[str, str]]:
    """The conversation as the simulator sees it: roles flipped, tool traffic and agent system prompt hidden.

    The user's own lines become `assistant` turns and the agent's text becomes `user` turns;
    consecutive lines of one side are joined so the roles alternate.
    """
    view: list[dict[str, str]] = [{"role": "system", "content": system_prompt}]
    for message in conversation:
        if message.role not in ("user", "assistant") or not message.content.strip():
            continue
        role = "assistant" if message.role == "user" else "user"
        if view[-1]["role"] == role:
            view[-1]["content"] += "\n\n" + message.content
        else:
            view.append({"role": role, "content": message.content})
    return view


@dataclass(frozen=True)
class UserAudit:
    revealed: tuple[str, ...]  # private facts this turn states for the first time
    problems: tuple[str, ...]  # contract breaches; empty when the turn is fine


def audit_user_turn(scenario: UserScenario, conversation: Sequence[Message], text: str, done: bool) -> UserAudit:
    """Check one user turn (`text`, stop token removed) against the scenario; pure."""
    visible = [m.content for m in conversation if m.role in ("user", "assistant")]
    earlier = "\n".join(visible)
    message = _last_agent_text(conversation)
    asked, sentences = message.lower(), read_sentences(message)
    understood = set(reader_for(scenario).asked(message, sentences).facts)
    revealed, problems = [], []
    for name, fact in scenario.private_facts.items():
        values = [v for v in fact_leaves(fact.value) if len(v) >= 2]
        if not any(_mentions(text, v) for v in values) or any(_mentions(earlier, v) for v in values):
            continue
        revealed.append(name)
        if name not in understood and not any(keyword.lower() in asked for keyword in fact.keywords):
            problems.append(f"leaked private fact '{name}' before the agent asked for it "
                            f"(the agent's last message does not ask for it and mentions none of "
                            f"{list(fact.keywords)})")
    known = _known_tokens(scenario, visible)
    invented = [t for t in _identifier_tokens(text) if not any(t in k for k in known)]
    if invented:
        problems.append(f"stated value(s) {invented} found in no private fact, the scenario or the conversation "
                        "(invented fact)")
    if done and any(s.ask and not s.closing for s in sentences):
        problems.append(f"ended the conversation with {STOP} while the agent was asking something (premature stop)")
    return UserAudit(tuple(revealed), tuple(problems))


def _last_agent_text(conversation: Sequence[Message]) -> str:
    for message in reversed(conversation):
        if message.role == "assistant" and message.content.strip():
            return message.content
    return ""


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _mentions(text: str, value: str) -> bool:
    """`value` occurs in `text` as a whole word, ignoring case and thousands separators."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(_THOUSANDS.sub("", value)) + r"(?![A-Za-z0-9])"
    return re.search(pattern, _THOUSANDS.sub("", text), flags=re.IGNORECASE) is not None


def _normalize(token: str) -> str:
    token = token.lower().replace("-", "").replace("_", "")
    if _DECIMAL.fullmatch(token):
        token = token.rstrip("0").rstrip(".")
    return token


def _identifier_tokens(text: str) -> list[str]:
    """Normalized tokens that look like ids, codes or multi-digit numbers."""
    found = []
    for raw in _TOKEN.findall(_THOUSANDS.sub("", text)):
        digits = sum(c.isdigit() for c in raw)
        has_letter = any(c.isalpha() for c in raw)
        if digits and (digits >= 2 or has_letter) and not _ORDINAL.fullmatch(raw.lower()):
            token = _normalize(raw)
            if token not in found:
                found.append(token)
    return found


def _known_tokens(scenario: UserScenario, visible: Sequence[str]) -> set[str]:
    facts = [leaf for fact in scenario.private_facts.values() for leaf in fact_leaves(fact.value)]
    texts = [scenario.persona, scenario.instructions, scenario.opening_message, *facts, *visible]
    return {_normalize(raw) for text in texts for raw in _TOKEN.findall(_THOUSANDS.sub("", text))}


def _simulated_turn(simulation: Simulation, raw: str, usage) -> UserTurn:
    """A turn of another benchmark's simulator (τ²-bench): it ends the talk at any of its stop tokens, which are
    removed from the text the agent reads; it is not held to tbx's private-fact contract (no private facts)."""
    tokens = [token for token in simulation.stop_tokens if token in raw]
    text = raw
    for token in simulation.stop_tokens:
        text = text.replace(token, " ")
    text = " ".join(text.split())
    if not text and not tokens:
        raise UserSimError("user simulator returned an empty message")
    reason = tokens[0].strip("#").lower().replace("-", "_") if tokens else ""
    return UserTurn(text, bool(tokens), usage=usage, reason=reason)


class LLMUserSession(UserSession):
    def __init__(self, client: ChatClient, scenario: UserScenario, seed: int):
        self.client = client
        self.scenario = scenario
        self.seed = seed
        simulation = scenario.simulation
        self.system_prompt = simulation.system_prompt if simulation else build_user_prompt(scenario)

    def opening(self) -> str:
        return self.scenario.opening_message

    async def start(self) -> Opening:
        """tbx's scenarios open with their opening message; a simulated benchmark's user answers the agent's fixed
        greeting first, as τ²-bench's orchestrator has it."""
        simulation = self.scenario.simulation
        if simulation is None:
            return await super().start()
        greeting = Message("assistant", simulation.agent_greeting)
        turn = await self.reply([Message("system", ""), greeting])
        if turn.done:
            raise UserSimError(f"user simulator ended the conversation in its first message: {turn.text[:200]!r}")
        return Opening((greeting, Message("user", turn.text)), turn.usage)

    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        try:
            result = await self.client.chat(to_user_view(self.system_prompt, conversation), None, seed=self.seed)
        except InfraError as error:
            raise UserSimError(f"user simulator endpoint failed: {error}") from error
        raw = parse_openai_message(result.message).content or ""
        if self.scenario.simulation is not None:
            return _simulated_turn(self.scenario.simulation, raw, result.usage)
        done = STOP in raw
        text = raw.replace(STOP, "").strip()
        if not text and not done:
            raise UserSimError(f"user simulator returned an empty message (finish_reason={result.finish_reason})")
        audit = audit_user_turn(self.scenario, conversation, text, done)
        if audit.problems:
            raise UserSimError("user simulator broke its contract: " + "; ".join(audit.problems)
                               + f". Turn: {text[:200]!r}")
        reason = (ending_of(read_sentences(_last_agent_text(conversation))) or "user") if done else ""
        return UserTurn(text, done, usage=result.usage, revealed=audit.revealed, reason=reason)


class LLMUser(UserSimulator):
    name = "llm"

    def __init__(self, endpoint: EndpointConfig, client: ChatClient | None = None):
        self.endpoint = endpoint
        self.model_name = endpoint.model
        self.client = client or ChatClient(endpoint, role="user")

    @classmethod
    def from_config(cls, user: UserConfig) -> LLMUser:
        return cls(user.endpoint)

    def session(self, scenario: UserScenario, seed: int) -> UserSession:
        return LLMUserSession(self.client, scenario, seed)

    async def aclose(self) -> None:
        await self.client.aclose()

