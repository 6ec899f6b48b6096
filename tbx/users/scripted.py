"""The scripted user: deterministic, so a verdict depends on the agent alone.

It opens with the scenario's message and then answers each agent message by what it means
(`tbx.users.reading` for what the message does, `tbx.users.facts` for which facts it asks for):

- a request for private facts, as a question, a polite or imperative request, a form or a list,
  in the agent's own words ("staff number", "When were you born?"), is answered with exactly those
  facts; a fact that was not asked for is never said;
- a request that fits several facts equally ("your number?") is answered with a question back
  naming them (never their values);
- a yes/no confirmation ("Shall I go ahead?") is answered "yes" when what it proposes is in the
  goal, else by restating the goal; a question about the goal is answered by restating the
  opening message (never by inventing);
- a message that reports the work done (`completed`) or says it cannot be done (`cannot_help`),
  asking nothing else, ends the conversation; so does the user's patience: `patience` replies in a
  row that moved nothing forward (no fact given, no "yes").

Every turn records what it revealed and, when it ends the conversation, why (`UserTurn.reason`).
The episode's turn limit is the episode's. Departure from the reference system (tau-bench): its
user is an LLM; this one is a fixed reader, so two runs of the same agent get the same user.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tbx.config import UserConfig
from tbx.messages import Message
from tbx.tasks.model import UserScenario
from tbx.users import lexicon as lx
from tbx.users.base import UserSession, UserSimulator, UserTurn
from tbx.users.facts import reader_for
from tbx.users.profiles import tokenize
from tbx.users.reading import Sentence, ending_of, normalize, read_sentences

PATIENCE = 4  # replies in a row that moved nothing forward before the user gives up
ENDINGS = {"completed": "Thank you, that's all.", "cannot_help": "I understand. Thank you anyway.",
           "patience": "I'm sorry, this isn't getting anywhere. I'll try again later."}
KIND_WORDS = {"identifier": "number", "date": "date", "name": "name", "amount": "amount", "hours": "hours",
              "time": "time", "email": "email address", "phone": "phone number", "address": "address",
              "postal": "postal code", "choice": "option"}
_GREETING = re.compile(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening))(?: there)?[,!.]?\s*", re.I)
_ACTION = {word: group for group, words in lx.ACTIONS.items() for word in words}


def _last_agent_text(conversation: Sequence[Message]) -> str:
    for message in reversed(conversation):
        if message.role == "assistant":
            return message.content
    return ""


def _concepts(text: str) -> set[str]:
    """Content words of `text`, actions folded into their group ("switching" -> change)."""
    found = set()
    for word in tokenize(normalize(text)):
        if word in lx.STOPWORDS or word in lx.CONFIRM_WORDS or len(word) < 3 or not word.isalpha():
            continue
        stem = re.sub(r"(?:ing|ed|es|s)$", "", word) if len(word) > 4 else word
        found.add(_ACTION.get(word) or _ACTION.get(stem) or _ACTION.get(stem + "e") or stem)
    return found


class ScriptedSession(UserSession):
    def __init__(self, scenario: UserScenario, patience: int = PATIENCE):
        self.scenario = scenario
        self.reader = reader_for(scenario)
        self.patience = patience
        self.idle = 0  # replies in a row that moved nothing forward
        self.goal = _concepts(f"{scenario.instructions} {scenario.opening_message}")

    def opening(self) -> str:
        return self.scenario.opening_message

    async def reply(self, conversation: Sequence[Message]) -> UserTurn:
        return self.answer(_last_agent_text(conversation))

    def answer(self, message: str) -> UserTurn:
        """The user's reply to one agent message (the session keeps only the patience count)."""
        sentences = read_sentences(message)
        ending = ending_of(sentences)
        if ending:
            return UserTurn(ENDINGS[ending], True, reason=ending)
        asked = self.reader.asked(message, sentences)
        parts = [self._state(name) for name in asked.facts]
        progress = bool(parts)
        if asked.ambiguous:
            parts.append(self._which(asked.ambiguous))
        confirmation = next((s for i, s in enumerate(sentences) if s.confirmation and i not in asked.sentences), None)
        if confirmation is not None:  # one not already answered by a fact (a choice)
            agreed, text = self._decide(confirmation)
            progress = progress or agreed
            parts.append(text)
        if not parts:
            parts.append(self._fallback(sentences, asked.unplaced))
        self.idle = 0 if progress else self.idle + 1
        if self.idle >= self.patience:
            return UserTurn(ENDINGS["patience"], True, reason="patience")
        return UserTurn(" ".join(parts), False, revealed=asked.facts)

    def _state(self, name: str) -> str:
        profile, value = self.reader.profiles[name], self.scenario.private_facts[name].value
        if "choice" in profile.kinds:
            return str(value)
        verb = "are" if profile.label.endswith("s") and not profile.label.endswith("ss") else "is"
        text = f"{'' if profile.label.startswith('the ') else 'my '}{profile.label} {verb} {value}."
        return text[:1].upper() + text[1:]

    def _which(self, kinds: Sequence[str]) -> str:
        labels = [("" if p.label.startswith("the ") else "my ") + p.label
                  for p in self.reader.profiles.values() if p.kinds & set(kinds)]
        listed = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " or " + labels[-1]
        return f"Which {KIND_WORDS.get(kinds[0], kinds[0])} do you need: {listed}?"

    def _decide(self, sentence: Sentence) -> tuple[bool, str]:
        """(agreed, text) for a yes/no confirmation: yes when an action it proposes is one the goal asks
        for ("switch", "cancel" are grouped in the lexicon), or, proposing none, when it is about
        something the goal mentions (or about nothing: "Shall I go ahead?")."""
        proposed = _concepts(sentence.text)
        actions = {c for c in proposed if c in lx.ACTIONS}
        if (actions & self.goal) if actions else (not proposed or proposed & self.goal):
            return True, "Yes, please go ahead."
        return False, f"I'm not sure about that. {self._goal()}"

    def _fallback(self, sentences: list[Sentence], unplaced: bool) -> str:
        if unplaced:
            return "Sorry, I don't have that information."
        if any(s.ask or s.closing for s in sentences):
            return self._goal()
        return "Okay."

    def _goal(self) -> str:
        """The goal, restated in the user's own opening words (nothing the user has not said)."""
        said = _GREETING.sub("", self.scenario.opening_message.strip())
        return f"As I said: {said[:1].upper()}{said[1:]}"


class ScriptedUser(UserSimulator):
    name = "scripted"

    def __init__(self, patience: int = PATIENCE):
        self.patience = patience

    @classmethod
    def from_config(cls, user: UserConfig) -> ScriptedUser:
        return cls()

    def session(self, scenario: UserScenario, seed: int) -> UserSession:
        return ScriptedSession(scenario, self.patience)
