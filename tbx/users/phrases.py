"""The phrase table of one scenario: every phrase the lexicon and the scenario's facts know, with what
it can mean (a kind cue, a question word, a fact's subject or name, an owner, a conjunction).
`tbx.users.facts` segments messages with it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tbx.users import lexicon as lx
from tbx.users.profiles import FactProfile, tokenize


@dataclass
class Term:
    """What a phrase of a message can mean."""

    cue: set[str] = field(default_factory=set)  # kinds it names as a noun ("number")
    bound: set[str] = field(default_factory=set)  # kinds named by a cue inside a longer phrase ("employee number")
    question: set[str] = field(default_factory=set)  # kinds it asks as a question word ("when")
    strong: set[str] = field(default_factory=set)  # facts it names alone
    keyword: set[str] = field(default_factory=set)  # facts with a task keyword made of cue words only
    subject: set[str] = field(default_factory=set)  # facts whose subject it names
    related: set[str] = field(default_factory=set)  # facts whose subject it goes with (lexicon.RELATED)
    owner: str = ""  # "first" | "third" | ""
    alternative: bool = False
    selector: bool = False  # "which": with a subject right after it, asks for that thing's identifier
    joint: bool = False  # a conjunction or list comma

    def names(self) -> set[str]:
        """Facts this phrase names by itself (subject, strong phrase or keyword)."""
        return self.subject | self.strong | self.keyword

    def about(self, kind: str) -> set[str]:
        """Facts whose `kind` this phrase can place: its subjects, and the related ones where the kind
        is not one a thing owns alone (an account places a date, never the customer's number)."""
        return self.subject if kind in lx.OWN_KINDS else self.subject | self.related


def phrase_table(profiles: Iterable[FactProfile]) -> dict[tuple[str, ...], Term]:
    table: dict[tuple[str, ...], Term] = {}

    def term(phrase: str) -> Term:
        return table.setdefault(tuple(tokenize(phrase)), Term())

    for kind, cues in lx.NOUN_CUES.items():
        for cue in cues:
            term(cue).cue.add(kind)
    for kind, cues in lx.QUESTION_CUES.items():
        for cue in cues:
            term(cue).question.add(kind)
    for profile in profiles:
        for phrase in profile.strong:
            term(phrase).strong.add(profile.name)
        for phrase in profile.generic:
            term(phrase).keyword.add(profile.name)
        for phrase in profile.subjects:
            term(phrase).subject.add(profile.name)
        for phrase in profile.related:
            term(phrase).related.add(profile.name)
        if profile.third_party:
            for word in profile.name.split("_"):
                for marker in lx.THIRD_PARTY.get(word, ()):
                    term(marker).owner = "third"
    for pronoun in lx.THIRD_PRONOUNS:
        term(pronoun).owner = "third"
    for pronoun in lx.FIRST_PRONOUNS:
        term(pronoun).owner = "first"
    for word in lx.ALTERNATIVES:
        term(word).alternative = True
    for word in lx.CONJUNCTIONS:
        term(word).joint = True
    for word in lx.SELECTORS:
        term(word).selector = True
    single = {cue: kind for kind, cues in lx.NOUN_CUES.items() for cue in cues if " " not in cue}
    for phrase, entry in table.items():
        if len(phrase) > 1 and (entry.subject or entry.strong) and not entry.cue:
            entry.bound |= {single[w] for w in phrase if w in single}
        owners = {table[(w,)].owner for w in phrase if (w,) in table}
        if len(phrase) > 1 and not entry.owner:
            entry.owner = "third" if "third" in owners else "first" if "first" in owners else ""
    table.pop((), None)
    _share_stems(table)
    return table


def stem(word: str) -> str:
    """A word without its inflection: "disputing", "disputed", "dispute" -> "disput"."""
    return re.sub(r"(?:ing|ion|ed|es|s|e)$", "", word) if len(word) > 4 and word.isalpha() else word


def _share_stems(table: dict[tuple[str, ...], Term]) -> None:
    """Single words of one stem name the same subjects ("work" and "worked", "correct" and "correcting")."""
    by_stem: dict[str, set[str]] = {}
    for phrase, entry in table.items():
        if len(phrase) == 1 and entry.subject:
            by_stem.setdefault(stem(phrase[0]), set()).update(entry.subject)
    for phrase, entry in table.items():
        if len(phrase) == 1 and entry.subject:
            entry.subject |= by_stem[stem(phrase[0])]
