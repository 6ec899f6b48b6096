"""The scripted user: deterministic, so a verdict depends on the agent alone.

It opens with the scenario's message. To an agent message that mentions a private fact's
keyword it answers with that fact; to any other question it says it has nothing to add (twice
in a row ends the conversation); a message with no question is taken as the agent reporting
the work done, and the user ends the conversation. The turn limit is the episode's.
"""

from __future__ import annotations

from collections.abc import Sequence

from tbx.config import Config
from tbx.messages import Message
from tbx.tasks.model import UserScenario
from tbx.users.base import STOP, UserSession, UserSimulator, UserTurn

MAX_UNHELPFUL = 2


def _last_agent_text(conversation: Sequence[Message]) -> str:
    for message in reversed(conversation):
        if message.role == "assistant":
            return message.content
    return ""


class ScriptedSession(UserSession):
    def __init__(self, scenario: UserScenario):
        self.scenario = scenario
        self.unhelpful = 0

    def opening(self) -> str:
        return self.scenario.opening_message

    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        text = _last_agent_text(conversation).lower()
        asked = [name for name, fact in self.scenario.private_facts.items()
                 if any(keyword in text for keyword in fact.keywords)]
        if asked:
            self.unhelpful = 0
            answer = " ".join(f"My {name.replace('_', ' ')} is {self.scenario.private_facts[name].value}."
                              for name in asked)
            return UserTurn(answer, False, revealed=tuple(asked))
        if "?" in text:
            self.unhelpful += 1
            if self.unhelpful >= MAX_UNHELPFUL:
                return UserTurn(f"I have nothing more to add. {STOP}", True)
            return UserTurn("I don't know; I've told you what I need.", False)
        return UserTurn(f"Thank you, that's all. {STOP}", True)


class ScriptedUser(UserSimulator):
    name = "scripted"

    @classmethod
    def from_config(cls, cfg: Config) -> ScriptedUser:
        return cls()

    def session(self, scenario: UserScenario, seed: int) -> UserSession:
        return ScriptedSession(scenario)
