"""Measure the scripted user on a corpus of agent asks: each ask played in a fresh session of a real
bundled task, and what the user revealed compared with what the ask wanted.

A corpus line is `"<what the agent says> => <facts it asks for>"`; a line with no `=>` is a decoy:
it asks for nothing the user holds and must reveal nothing. `tests/users/phrasings.yaml` and
`tests/users/asks_corpus.yaml` are the two corpora; `benchmarks/user_asks.py` prints the figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

from tbx.domains import get_domain
from tbx.tasks import Task, load_task
from tbx.users.scripted import ScriptedSession


@dataclass(frozen=True)
class Played:
    key: str  # domain/family
    ask: str
    wanted: tuple[str, ...]  # empty for a decoy
    revealed: tuple[str, ...]
    text: str
    done: bool

    @property
    def missed(self) -> tuple[str, ...]:
        return tuple(f for f in self.wanted if f not in self.revealed)

    @property
    def unasked(self) -> tuple[str, ...]:
        return tuple(f for f in self.revealed if f not in self.wanted)


@dataclass(frozen=True)
class Figures:
    asks: int  # asks for facts the user holds
    answered: int  # ... answered with every fact they want
    refused: int  # ... that revealed nothing
    decoys: int  # asks for nothing the user holds
    wrong: int  # asks (decoys included) that revealed a fact they did not ask for

    def line(self) -> str:
        return (f"{self.answered}/{self.asks} asks answered ({self.answered / max(self.asks, 1):.1%}), "
                f"{self.refused} refused, {self.asks - self.answered - self.refused} partly answered; "
                f"{self.wrong} revealed a fact not asked for ({self.decoys} decoys among the asks)")


@cache
def family_tasks(key: str) -> tuple[Task, ...]:
    """The bundled tasks of `domain/family` (seed 0)."""
    domain_name, family = key.split("/")
    domain = get_domain(domain_name)
    tasks = tuple(load_task(dict(t), f"{key}[{i}]", domain.policy)
                  for i, t in enumerate(domain.generate_tasks(0)) if t["family"] == family)
    if not tasks:
        raise KeyError(f"no bundled family {key}")
    return tasks


def scenario_for(key: str, wanted: tuple[str, ...] = ()) -> Task:
    """The family's task with the most private facts among those holding every wanted fact."""
    holding = [t for t in family_tasks(key) if set(wanted) <= set(t.user.private_facts)]
    if not holding:
        raise KeyError(f"no task of {key} holds {wanted}")
    return max(holding, key=lambda t: len(t.user.private_facts))


def parse(line: str) -> tuple[str, tuple[str, ...]]:
    """(ask, facts wanted) of one corpus line."""
    text, arrow, facts = line.rpartition("=>")
    return (text.strip(), tuple(facts.split())) if arrow else (line.strip(), ())


def play(lines: Iterable[tuple[str, str]]) -> Iterator[Played]:
    """Each (domain/family, corpus line) played in a fresh session."""
    for key, line in lines:
        ask, wanted = parse(line)
        turn = ScriptedSession(scenario_for(key, wanted).user).answer(ask)
        yield Played(key, ask, wanted, turn.revealed, turn.text, turn.done)


def measure(rows: Iterable[Played]) -> Figures:
    rows = list(rows)
    asks = [r for r in rows if r.wanted]
    return Figures(len(asks), sum(not r.missed for r in asks), sum(not r.revealed for r in asks),
                   len(rows) - len(asks), sum(bool(r.unasked) for r in rows))


def corpus_lines(corpus: dict) -> list[tuple[str, str]]:
    """(domain/family, line) of a corpus file: `asks`, `held_out`, `decoys` and `held_out_decoys` map a
    family to lines, or (the phrasing corpus) to styles of lines."""
    out = []
    for batch in ("asks", "held_out", "decoys", "held_out_decoys"):
        for key, lines in (corpus.get(batch) or {}).items():
            styled = lines.values() if isinstance(lines, dict) else [lines]
            out += [(key, line) for group in styled for line in group]
    return out
