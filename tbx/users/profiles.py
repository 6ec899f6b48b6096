"""What a private fact is called: its kinds, the phrases that name its subject or name it alone, and
whether it is somebody else's, from the words of its name, the shape of its value, the task's own
keywords and the shared lexicon (`tbx.users.lexicon`). `tbx.users.facts` reads messages with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tbx.tasks.model import PrivateFact
from tbx.users import lexicon as lx
from tbx.users.reading import normalize

_TOKEN = re.compile(r"#|&|\+|/|,|;|:|\$|[a-z0-9]+(?:'[a-z]+)?")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_VALUE_KINDS = (  # the shape of a value says its kind: "a@b.example", "2026-04-04", "8 hours", ...
    (re.compile(r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$"), "email"), (_DATE, "date"),
    (re.compile(r"\b\d+(\.\d+)? hours?\b"), "hours"), (re.compile(r"^\+?\(?\d{1,4}\)?[ .-]\d[\d .()-]{6,}$"), "phone"),
    (re.compile(r"^\d+ [A-Za-z].*,"), "address"), (re.compile(r"^(yes|no)\b", re.I), "choice"))
EXCLUSIVE_KINDS = ("email", "phone", "postal", "choice")  # a fact of one of these is nothing else
GENERIC = (lx.STOPWORDS | {w for cues in (*lx.NOUN_CUES.values(), *lx.QUESTION_CUES.values()) for c in cues
                           for w in c.split()} | set(lx.FIRST_PRONOUNS) | set(lx.THIRD_PRONOUNS))


def tokenize(text: str) -> list[str]:
    """Words of already-normalised text; a possessive `'s` is dropped ("driver's" -> "driver")."""
    return [t[:-2] if t.endswith("'s") else t for t in _TOKEN.findall(text)]


@dataclass(frozen=True)
class FactProfile:
    name: str
    kinds: frozenset[str]
    subjects: frozenset[str]  # phrases naming its subject, third-party markers included
    related: frozenset[str]  # phrases naming a thing that goes with its subject (lexicon.RELATED)
    strong: frozenset[str]  # phrases that name it alone
    generic: frozenset[str]  # task keywords made only of cue and stop words ("which date")
    narrow: bool  # has a subject beyond weak words ("employee" in employee_id; not "new" in new_date)
    third_party: bool  # somebody else's (the driver's, the payee's)
    label: str  # how the user names it ("employee ID", "the driver's birth date")


def fact_kinds(name: str, value: Any, declared: str | None = None) -> frozenset[str]:
    """A fact's kinds: declared, else from the words of its name, and from the shape of its value."""
    kinds = {declared} if declared else {lx.NAME_KINDS[w] for w in name.lower().split("_") if w in lx.NAME_KINDS}
    text = str(value).strip()
    for pattern, kind in _VALUE_KINDS:
        if pattern.search(text) and (isinstance(value, str) or not kinds):
            kinds.add(kind)
    if not kinds and isinstance(value, int | float):
        kinds.add("amount" if isinstance(value, float) else "identifier")
    for exclusive in EXCLUSIVE_KINDS:
        if exclusive in kinds and not declared:
            return frozenset({exclusive})
    return frozenset(kinds)


def profile_fact(name: str, fact: PrivateFact) -> FactProfile:
    """The words by which agents ask for `fact` (its name's words, the lexicon's synonyms, the task's keywords)."""
    kinds = fact_kinds(name, fact.value, fact.kind)
    words = [w for w in name.lower().split("_") if w not in lx.STOPWORDS and w not in ("if", "choice")]
    cue_words = {w for k in kinds for c in lx.NOUN_CUES.get(k, ()) for w in c.split()}
    keyword_words = [w for k in fact.keywords for w in tokenize(normalize(k)) if w not in GENERIC]
    subject_words = [w for w in dict.fromkeys([*words, *keyword_words]) if w not in cue_words or w in lx.STRONG]
    subjects = {p for w in subject_words for p in (w, *lx.SUBJECTS.get(w, ()), *lx.THIRD_PARTY.get(w, ()))}
    related = {p for w in subject_words for p in lx.RELATED.get(w, ())} - subjects
    strong = {p for w in words for p in lx.STRONG.get(w, ())}
    generic = set()
    if kinds and len(words) == 1 and words[0] not in cue_words and words[0] not in lx.NAME_KINDS:
        strong.add(words[0])  # a one-word name says what it is: "corrections", "nickname"
    for keyword in (normalize(k) for k in fact.keywords):
        (generic if all(w in GENERIC for w in tokenize(keyword)) else strong).add(keyword)
    third = any(w in lx.THIRD_PARTY for w in words)
    narrow = any(w not in lx.WEAK_SUBJECTS and w not in lx.THIRD_PARTY for w in subject_words)
    return FactProfile(name, kinds, frozenset(subjects), frozenset(related), frozenset(strong), frozenset(generic), narrow, third,
                       _label(name.lower().split("_"), third))


def _label(words: list[str], third: bool) -> str:
    shown = [lx.LABELS.get(w, w) for w in words]
    if third and len(shown) > 1:
        return f"the {shown[0]}'s {' '.join(shown[1:])}"
    return " ".join(shown)
