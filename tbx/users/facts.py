"""Which private facts an agent message asks for, read by meaning with the shared lexicon.

Each fact gets a profile (`tbx.users.profiles`): its kinds (identifier, date, name, amount, hours, time, email, phone,
address, postal, choice), the phrases that name its subject, the phrases that name it alone, and
whether it belongs to somebody else (the new driver, the leaver, the payee). The phrases come from
`tbx.users.lexicon` and from the task's own keywords. In every sentence that asks for something
(`tbx.users.reading`), a fact is asked for when
- a phrase names it alone ("When were you born?", "the VIN", a task keyword), or
- a kind cue stands with its subject: "staff number", "number of your policy", "how much is the
  repair estimate", "when did the accident happen", or
- a bare kind cue ("What's your email?") fits exactly one fact, or
- a yes/no question offers an alternative ("... a refund instead?") and the user holds one choice.
When two facts compete for the same words, the one whose owner fits ("your" / "their" / a named
person) and that matches more of them wins; a cue that fits several facts equally is *ambiguous*
and reveals nothing. An ask that is about something else reveals nothing either: a cue whose own
modifier names another thing ("PO number", "client account number"), a count ("number of hours"), a
question about a thing no fact names ("What time is your meeting?"), an owner right before the name
that is not the fact's ("your manager's employee ID"); see docs/users.md. Pure and deterministic:
same scenario and message, same answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tbx.tasks.model import UserScenario
from tbx.users import lexicon as lx
from tbx.users.phrases import (
    FILLERS,
    UNIQUE_KINDS,
    Term,
    about_other,
    clause_of,
    counts,
    of_other,
    phrase_table,
    qualified,
    stem,
    unknown,
)
from tbx.users.profiles import FactProfile, profile_fact, tokenize
from tbx.users.reading import Sentence, normalize

_NAME_OWNER = re.compile(r"\b([A-Z][a-z]+)['\u2019]s\b|\b(?:to|for) ([A-Z][a-z]+)\b")
_POSSESSOR = re.compile(r"\b([a-z]+)'s\b")
_NOT_POSSESSORS = frozenset({"let", "it", "that", "there", "here", "what", "who", "he", "she", "where", "how"})
PERSONAL_KINDS = frozenset({"name", "email", "phone", "address", "postal"})  # a person's own details
_REQUEST_YOU = frozenset({"could", "can", "would", "will", "do", "does", "did", "may", "might", "should", "if",
                          "thank", "thanks", "help", "assist", "let", "see", "that", "as", "are"})


@dataclass(frozen=True)
class _Candidate:
    fact: str
    score: float
    sentence: int
    anchor: frozenset[int]  # token positions that name the fact
    cue: int | None  # the kind cue's position, if one was used
    bare: bool = False  # a kind cue alone, with no subject
    kind: str = ""


@dataclass(frozen=True)
class Asked:
    facts: tuple[str, ...]  # facts asked for, in the order they are asked
    ambiguous: tuple[str, ...]  # kinds asked for that fit several facts equally
    unplaced: bool  # an ask named a kind or subject that fits no fact the user holds
    sentences: frozenset[int] = frozenset()  # the sentences that named a fact


class FactReader:
    """Reads agent messages for one scenario's facts."""

    def __init__(self, scenario: UserScenario):
        self.profiles = {name: profile_fact(name, fact) for name, fact in scenario.private_facts.items()}
        self.table = phrase_table(self.profiles.values())
        self.longest = max((len(p) for p in self.table), default=1)
        self.stems: dict[str, Term] = {}  # a word the table lacks reads as a known word of its stem
        for phrase, entry in self.table.items():
            if len(phrase) == 1 and entry.subject:
                self.stems.setdefault(stem(phrase[0]), Term()).subject.update(entry.subject)
        told = re.findall(r"\b[A-Z][a-z]+\b", f"{scenario.opening_message} {scenario.instructions}")
        self.others = {w.lower() for w in told} - set(tokenize(normalize(scenario.persona))) - lx.STOPWORDS
        self.foreign = foreign_phrases(self.profiles.values())
        self.somebody_else = frozenset(tuple(tokenize(normalize(p))) for g in lx.THIRD_PARTY.values() for p in g)

    def segment(self, words: list[str], names: set[str], possessors: Iterable[str] = ()) -> list[tuple[str, Term | None]]:
        """Words grouped into the longest known phrases, each with what it can mean."""
        out, i = [], 0
        while i < len(words):
            for size in range(min(self.longest, len(words) - i), 0, -1):
                term = self.table.get(tuple(words[i:i + size]))
                if term is not None:
                    out.append((" ".join(words[i:i + size]), term))
                    i += size
                    break
            else:
                known = (Term(owner="third") if words[i] in names else Term(owner="possessor")
                         if words[i] in possessors else self.stems.get(stem(words[i])))
                out.append((words[i], known))
                i += 1
        return out

    def asked(self, message: str, sentences: list[Sentence]) -> Asked:
        """The facts `message` asks for (its `sentences` as `read_sentences` gave them)."""
        names = {(a or b).lower() for a, b in _NAME_OWNER.findall(message)} & self.others
        terms = [self.segment(tokenize(s.text), names, self._possessors(s.text)) for s in sentences]
        candidates = [c for s, sentence in enumerate(sentences) if sentence.ask
                      for c in self._candidates(terms[s], s, sentence.question)]
        fitted = [self._fit(c, terms) for c in candidates]
        return self._resolve([c for c in fitted if c is not None], terms, sentences)

    def _possessors(self, text: str) -> set[str]:
        """Words the lexicon does not know that own something in `text` ("your manager's employee ID"):
        somebody else, like a person named."""
        return {w for w in _POSSESSOR.findall(text)
                if w not in lx.STOPWORDS and w not in _NOT_POSSESSORS and (w,) not in self.table}

    def _candidates(self, terms: list[tuple[str, Term | None]], s: int, question: bool) -> list[_Candidate]:
        """Every reading of sentence `s` that would name a fact, before owners and conflicts."""
        out: list[_Candidate] = []
        for i, (_, term) in enumerate(terms):
            if term is None:
                continue
            out += [_Candidate(f, 3, s, frozenset({i}), None) for f in term.strong]
            if not qualified(terms, i):  # a keyword of cue words only ("which date") reads like a cue
                out += [_Candidate(f, 2, s, frozenset({i}), i, True, min(self.profiles[f].kinds, default=""))
                        for f in term.keyword if self._alone(terms, i, f)]
            for kind in term.cue | term.bound:
                if kind == "identifier" and counts(terms, i):
                    continue
                attached, joint = self._attached(terms, i)
                if kind not in term.bound and qualified(terms, i) and (
                        kind in lx.OWN_KINDS or all(j > i for j in attached)):
                    continue  # "the PO number for this invoice", "your client account number": another's
                if attached or kind in term.bound:
                    out += self._compound(terms, s, i, kind, attached, joint)
                elif not qualified(terms, i) and not (kind in lx.OWN_KINDS and of_other(terms, i)):
                    out += self._cued(terms, s, i, kind, clause_of(terms, i))
            if term.selector and i + 1 < len(terms) and terms[i + 1][1] is not None:
                out += [_Candidate(f, 2, s, frozenset({i + 1}), i, kind="identifier")
                        for f in terms[i + 1][1].subject if "identifier" in self.profiles[f].kinds]
            for kind in term.question:
                out += self._cued(terms, s, i, kind, range(i + 1, len(terms)), about_other(terms, i, {kind}))
            choices = [p.name for p in self.profiles.values() if "choice" in p.kinds]
            if term.alternative and question and len(choices) == 1:
                out.append(_Candidate(choices[0], 2, s, frozenset({i}), None))
        elsewhere = {clause_of(terms, i).start for i, (_, t) in enumerate(terms)
                     if t is not None and t.question and about_other(terms, i, t.question)}
        return [c for c in out if c.score >= 3 or clause_of(terms, min(c.anchor)).start not in elsewhere]

    def _alone(self, terms: list[tuple[str, Term | None]], i: int, fact: str) -> bool:
        """A task keyword of cue words only ("how many hours") at `i` may stand for `fact` by itself: not
        in a question about another thing, nor (for a kind a person has several of) beside words that name
        another fact ("How many hours were billed on the invoice?")."""
        kinds = self.profiles[fact].kinds
        if about_other(terms, i, kinds):
            return False
        return kinds <= UNIQUE_KINDS or not any(
            terms[j][1] is not None and terms[j][1].subject and fact not in terms[j][1].subject
            for j in range(i + 1, len(terms)))

    def _attached(self, terms: list[tuple[str, Term | None]], i: int) -> tuple[list[int], bool]:
        """Positions of the subject words bound to the noun cue at `i`: the words right before it
        ("employee and confirmation numbers") or after a link ("number of your policy"); and whether
        a conjunction joins them."""
        def joins(j: int) -> bool:
            word, term = terms[j]
            return word in FILLERS or (term is not None and bool(term.subject or term.related or term.joint))

        run, j = [], i - 1
        while j >= 0 and (joins(j) or (j == i - 1 and j and unknown(terms[j]) and joins(j - 1))):
            run.append(j)  # one unknown word may stand between a subject and its cue ("new travel date")
            j -= 1
        k = i + 1
        while k < len(terms) and terms[k][0] in lx.LINKS and k - i <= 3:
            k += 1
        while k > i + 1 and k < len(terms) and joins(k):
            run.append(k)
            k += 1
        spots = sorted(j for j in run if terms[j][1] is not None and (terms[j][1].subject or terms[j][1].related))
        joint = bool(spots) and any(terms[j][1] is not None and terms[j][1].joint and min(spots) < j < max(spots)
                                    for j in run)
        return spots, joint

    def _compound(self, terms: list[tuple[str, Term | None]], s: int, i: int, kind: str,
                  attached: list[int], joint: bool) -> list[_Candidate]:
        """Facts of `kind` named by the cue at `i` with its bound subject words; the fact matching
        most of them wins unless they are joined ("policy and claim numbers": both)."""
        itself = terms[i][1].names() | {f for w in terms[i][0].split() for f in self.table.get((w,), Term()).subject}
        hits = {p.name: [j for j in attached if p.name in terms[j][1].about(kind)] + ([i] if p.name in itself else [])
                for p in self.profiles.values() if kind in p.kinds}
        hits = {fact: spots for fact, spots in hits.items() if spots}
        # an owner word ("payee" in "the payee's routing number") counts only where nothing else does
        heads = {fact: [j for j in spots if terms[j][1].owner != "third"] for fact, spots in hits.items()}
        weight = heads if any(heads.values()) else hits
        best = max((len(spots) for spots in weight.values()), default=0)
        return [_Candidate(fact, 2, s, frozenset(hits[fact]), i, kind=kind)
                for fact, spots in weight.items() if spots and (joint or len(spots) == best)]

    def _cued(self, terms: list[tuple[str, Term | None]], s: int, i: int, kind: str,
              scope: Iterable[int], elsewhere: bool = False) -> list[_Candidate]:
        """Facts of `kind` for a cue whose subject may stand anywhere in `scope`; none there: a bare cue."""
        facts = [p for p in self.profiles.values() if kind in p.kinds]
        found = [_Candidate(p.name, 2, s, frozenset({j}), i, kind=kind) for j in scope for p in facts
                 if terms[j][1] is not None and p.name in terms[j][1].about(kind)]
        if elsewhere:
            return []
        if found:
            return found
        others = {f for j in scope if terms[j][1] is not None for f in terms[j][1].subject}
        if kind not in UNIQUE_KINDS and others - {p.name for p in facts}:
            return []  # "How many hours were billed on the invoice?": about the invoice
        unit = kind == "hours" and "hour" in terms[i][0]  # "how many hours" names its unit, "how many" does not
        return [_Candidate(p.name, 1 if p.narrow else 2, s, frozenset({i}), i, True, kind)
                for p in facts if not p.narrow or kind in UNIQUE_KINDS or unit]

    def _names_foreign(self, row: list[tuple[str, Term | None]], clause: range,
                       phrases: frozenset[tuple[str, ...]] | None = None) -> bool:
        """Whether the clause names a fact this user does not hold (a phrase the lexicon gives to one fact
        alone, or somebody else where the user holds nobody else's facts)."""
        words = [w for j in clause for w in row[j][0].split()]
        return any(tuple(words[i:i + len(p)]) == p for p in (self.foreign if phrases is None else phrases)
                   for i in range(len(words)))

    def _owner(self, terms: list[list[tuple[str, Term | None]]], s: int, anchor: frozenset[int]) -> str:
        """Whose thing the words at `anchor` name: "third" (a marker, their/his/her, a named person),
        "first" (your/you) or "" — the nearest owner word before them, else after, else earlier."""
        row = terms[s]
        if any(row[j][1] is not None and row[j][1].owner == "third" for j in anchor):
            return "third"
        order = [*((s, j) for j in range(min(anchor) - 1, -1, -1)),
                 *((s, j) for j in range(max(anchor) + 1, len(row))),
                 *((e, j) for e in range(s - 1, -1, -1) for j in range(len(terms[e]) - 1, -1, -1))]
        for e, j in order:
            word, term = terms[e][j]
            if (term is not None and term.owner in ("first", "third")
                    and not (word == "you" and j and terms[e][j - 1][0] in _REQUEST_YOU)):
                return term.owner
        return ""

    @staticmethod
    def _adjacent_owner(row: list[tuple[str, Term | None]], anchor: frozenset[int]) -> str:
        """The owner word right before the words at `anchor` ("your own", "the driver's", "Vera's", "your
        manager's": "possessor"), if any, when they do not name an owner themselves."""
        if any(row[j][1] is not None and row[j][1].owner for j in anchor):
            return ""
        j = min(anchor) - 1
        while j >= 0 and (row[j][0] in FILLERS or unknown(row[j])):
            j -= 1  # "your savings account number": the modifiers of one noun phrase
        owner = row[j][1].owner if j >= 0 and row[j][1] is not None else ""
        if owner == "possessor" and j and row[j - 1][1] is not None and row[j - 1][1].owner == "third":
            return "third"  # "her bank's routing number": hers
        return owner

    def _owned_by_another(self, candidate: _Candidate, row: list[tuple[str, Term | None]]) -> bool:
        """The words right before the fact's name make it somebody else's than the fact's owner: "your own
        account number" is not the payee's; "the driver's phone" is not the user's phone (a personal detail
        belongs to its person); "your manager's employee ID" not the user's (unless a phrase names the
        fact alone: "the car's VIN")."""
        profile = self.profiles[candidate.fact]
        owner = self._adjacent_owner(row, candidate.anchor)
        end = max(candidate.anchor | ({candidate.cue} if candidate.cue is not None else set())) + 1
        if end < len(row) and row[end][0].startswith("you") and row[end][0] != "your":
            owner = owner or "first"  # "the account number you'd like it taken from": the user's own
        if owner == "first":
            return profile.third_party
        if owner == "third":
            return not profile.third_party and bool(profile.kinds & PERSONAL_KINDS)
        lexical = any(row[min(candidate.anchor)][0] in group for group in lx.STRONG.values())
        return owner == "possessor" and not profile.third_party and not lexical

    def _fit(self, candidate: _Candidate, terms: list[list[tuple[str, Term | None]]]) -> _Candidate | None:
        """Weaken a reading whose owner does not fit the fact; drop such a bare cue. Owners matter
        only where the user holds somebody else's facts too ("Grace's hours" may be the user's)."""
        if self._owned_by_another(candidate, terms[candidate.sentence]):
            return None
        if not any(p.third_party for p in self.profiles.values()):
            row = terms[candidate.sentence]
            if self._names_foreign(row, clause_of(row, min(candidate.anchor)), self.somebody_else):
                return None  # "the payee's account number": the user holds nobody else's facts
            return candidate
        third = self._owner(terms, candidate.sentence, candidate.anchor) == "third"
        if self.profiles[candidate.fact].third_party == third:
            return candidate
        if candidate.bare:
            return None
        return _Candidate(candidate.fact, candidate.score - 1.5, candidate.sentence, candidate.anchor,
                          candidate.cue, candidate.bare, candidate.kind)

    def _resolve(self, candidates: list[_Candidate], terms: list[list[tuple[str, Term | None]]],  # noqa: C901 (one branch per kind of ask)
                 sentences: list[Sentence]) -> Asked:
        """Give each word to the best reading; bare cues speak only where nothing else answered."""
        taken: dict[tuple[int, int], str] = {}
        found: dict[str, tuple[int, int]] = {}
        answered: set[tuple[int, int]] = set()  # (sentence, clause start)
        named: set[tuple[str, int]] = set()  # (fact, sentence) for every sentence that names the fact
        ordered = sorted(candidates, key=lambda c: (-c.score, c.bare, -len(c.anchor), c.sentence, min(c.anchor)))
        for c in (c for c in ordered if not c.bare):
            spots = {(c.sentence, j) for j in c.anchor}
            if any(taken.get(spot, c.fact) != c.fact for spot in spots):
                continue
            for spot in spots | ({(c.sentence, c.cue)} if c.cue is not None else set()):
                taken.setdefault(spot, c.fact)
            found[c.fact] = min(found.get(c.fact, (c.sentence, min(c.anchor))), (c.sentence, min(c.anchor)))
            named.add((c.fact, c.sentence))
            answered.add((c.sentence, clause_of(terms[c.sentence], min(c.anchor)).start))
        ambiguous: list[str] = []
        groups: dict[tuple[int, int, str], list[_Candidate]] = {}
        for c in (c for c in candidates if c.bare):
            groups.setdefault((c.sentence, c.cue, c.kind), []).append(c)
        for (s, cue, kind), group in sorted(groups.items()):
            named.update((c.fact, s) for c in group if c.fact in found)
            if (s, cue) in taken or (s, clause_of(terms[s], cue).start) in answered:
                continue
            if any(kind in self.profiles[f].kinds for f, (e, _) in found.items() if e == s):
                continue  # "Which client is it, by code?": the code of the one named

            if self._names_foreign(terms[s], clause_of(terms[s], cue)):
                continue  # "When were you born?" is not the only date the user holds; "the payee's number" not theirs
            group = [c for c in group if c.fact not in found]
            pick = list({c.fact: c for c in [c for c in group if c.score >= 2] or group}.values())
            if len(pick) == 1:
                found[pick[0].fact] = (s, cue)
                named.add((pick[0].fact, s))
                taken[(s, cue)] = pick[0].fact
                answered.add((s, clause_of(terms[s], cue).start))  # "what time of day": one ask
            elif pick and kind not in ambiguous:
                ambiguous.append(kind)
        for fact, s in sorted(named):  # "the new address with ZIP": the ZIP is the address's
            whole = {lx.PART_OF[k] for k in self.profiles[fact].kinds if k in lx.PART_OF}
            spoken = {k for _, t in terms[s] if t is not None for k in t.cue | t.bound | t.question}
            if (fact in found and whole & spoken and any(whole & self.profiles[g].kinds for g in found)
                    and not any(w in sentences[s].text for w in lx.STANDS_APART)):
                del found[fact]
        asked_sentences = {s for f, s in named if f in found}
        unplaced = any(sentence.ask and s not in asked_sentences and any(t is not None and t.cue for _, t in terms[s])
                       and any(t is not None and t.owner == "first" for _, t in terms[s])
                       for s, sentence in enumerate(sentences))
        facts = tuple(sorted(found, key=found.__getitem__))
        return Asked(facts, tuple(ambiguous), unplaced and not ambiguous, frozenset(asked_sentences))


def foreign_phrases(profiles: Iterable[FactProfile]) -> frozenset[tuple[str, ...]]:
    """Phrases that name a fact none of `profiles` is: the lexicon's phrases that name one fact alone
    (`lx.STRONG`: "born", "vin") where no held fact has that word, and the words for somebody else
    (`lx.THIRD_PARTY`: "payee", "driver") where no held fact is somebody else's. A bare kind cue next to
    one of them ("When were you born?", "the payee's account number") asks for that fact, not for the
    only fact of the kind the user holds."""
    held = [p for p in profiles]
    words = {w for p in held for w in p.name.lower().split("_")}
    strong = {phrase for p in held for phrase in p.strong}
    phrases = {phrase for word, group in lx.STRONG.items() if word not in words for phrase in group
               if phrase not in strong}
    if not any(p.third_party for p in held):
        phrases |= {phrase for group in lx.THIRD_PARTY.values() for phrase in group}
    return frozenset(tuple(tokenize(normalize(phrase))) for phrase in phrases)


READERS_KEPT = 4096  # fact readers kept per process (a campaign's tasks; more start the count over)
_READERS: dict[int, tuple[UserScenario, FactReader]] = {}


def reader_for(scenario: UserScenario) -> FactReader:
    """The scenario's fact reader, built once per process: it only reads after it is built, and building
    its phrase table is costly next to a short episode. Keyed by the scenario object, which the entry
    keeps alive (so its id is not reused); a campaign has one per task."""
    kept = _READERS.get(id(scenario))
    if kept is None or kept[0] is not scenario:
        if len(_READERS) >= READERS_KEPT:
            _READERS.clear()
        kept = _READERS[id(scenario)] = (scenario, FactReader(scenario))
    return kept[1]
