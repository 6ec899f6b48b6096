"""The phrase table of one scenario: every phrase the lexicon and the scenario's facts know, with what
it can mean (a kind cue, a question word, a fact's subject or name, an owner, a conjunction).
`tbx.users.facts` segments messages with it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tbx.users import lexicon as lx
from tbx.users.profiles import FactProfile, tokenize

QUANTITY = frozenset({"number", "numbers", "no", "#"})  # "number of hours": a count, not an identifier
AUXILIARIES = frozenset({"is", "are", "was", "were", "does", "do", "did", "will", "would", "should", "can"})
DETERMINERS = frozenset({"your", "the", "their", "his", "her", "a", "an", "this", "that", "our", "my"})
# a bare cue of these kinds ("your email?") may pick the only fact of the kind; a bare "when" or "how
# much" may not (it is as often about the goal as about a fact)
UNIQUE_KINDS = frozenset({"identifier", "email", "phone", "postal", "name", "address"})
FILLERS = frozenset({"new", "current", "old", "full", "preferred", "updated", "own", "valid", "best", "exact",
                     "complete", "primary", "registered", "17", "character", "digit", "correct", "right",
                     "personal", "main", "usual", "contact", "good", "latest"})


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


def phrase_table(profiles: Iterable[FactProfile]) -> dict[tuple[str, ...], Term]:  # noqa: C901 (one branch per kind of fact)
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
    return table


def stem(word: str) -> str:
    """A word without its inflection: "disputing", "disputed", "dispute" -> "disput"."""
    return re.sub(r"(?:ing|ion|ed|es|s|e)$", "", word) if len(word) > 4 and word.isalpha() else word


def counts(terms: list[tuple[str, Term | None]], i: int) -> bool:
    """The identifier cue at `i` is a count: "the number of hours", "number of days"."""
    k = i + 1
    while k < len(terms) and terms[k][0] in ("of", "the", "your"):
        k += 1
    if not (terms[i][0] in QUANTITY and k > i + 1 and terms[i + 1][0] == "of" and k < len(terms)):
        return False
    word, term = terms[k]
    plural = word.endswith("s") and not word.endswith("ss")  # "the number of consultants"
    return plural or (term is not None and bool(term.cue) and not term.names())

def of_other(terms: list[tuple[str, Term | None]], i: int) -> bool:
    """The cue at `i` is followed by a link and a word the lexicon does not know: "the code on the
    gift receipt" is the receipt's code."""
    k = i + 1
    while k < len(terms) and terms[k][0] in lx.LINKS:
        k += 1
    return k > i + 1 and k < len(terms) and unknown(terms[k])

def about_other(terms: list[tuple[str, Term | None]], i: int, kinds: Iterable[str]) -> bool:
    """The question cue at `i` asks about a thing the user's facts do not name: "What time is your
    meeting?", "How many hours does your team work?" (an auxiliary, a determiner, an unknown noun).
    Not for the kinds a person has one of ("Whose name is the account in?", "What email is the
    account under?"): those stay the user's."""
    if set(kinds) <= UNIQUE_KINDS:
        return False
    k = i + 1
    if k < len(terms) and terms[k][0] in AUXILIARIES:
        k += 1
    if k == i + 1 or k >= len(terms) or terms[k][0] not in DETERMINERS:
        return False
    while k + 1 < len(terms) and terms[k + 1][0] in FILLERS:
        k += 1
    return k + 1 < len(terms) and unknown(terms[k + 1])

def unknown(entry: tuple[str, Term | None]) -> bool:
    """A content word the lexicon and the task do not know."""
    word, term = entry
    return term is None and word.isalpha() and word not in lx.STOPWORDS and word not in FILLERS

def qualified(terms: list[tuple[str, Term | None]], i: int) -> bool:
    """The cue at `i` names something other than a fact's subject: a word the lexicon does not know
    ("confirmation email", "PO number"), a thing of another kind ("time entry ID") or one that only
    goes with a subject ("account number" beside a customer number)."""
    j = i - 1
    while j >= 0 and terms[j][0] in FILLERS:
        j -= 1
    if j < 0:
        return False
    before, cue = terms[j][1], terms[i][1]
    if before is None:
        return unknown(terms[j])
    other_kind = bool(before.cue) and not before.names() and cue is not None and not before.cue & cue.cue
    return other_kind or bool(before.related and not before.names())


def clause_of(terms: list[tuple[str, Term | None]], i: int) -> range:
    """The positions of the clause around `i` (between conjunctions and commas)."""
    start, end = i, i + 1
    while start > 0 and not (terms[start - 1][1] and terms[start - 1][1].joint):
        start -= 1
    while end < len(terms) and not (terms[end][1] and terms[end][1].joint):
        end += 1
    return range(start, end)
