"""The scripted user against a corpus of how LLM agents really ask (`phrasings.yaml`, written apart
from the user's lexicon): every ask is played in a fresh session of a real bundled task.

Targets (issue 23): >= 95% of asks answered with every fact they ask for, 0 facts revealed that
were not asked for, no request or question ends the talk; completion and "cannot help" statements
do end it, with the reason recorded. The rates are printed (`pytest -s`) and quoted in docs/users.md.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import yaml

from tbx.domains import get_domain
from tbx.tasks import load_task
from tbx.users.corpus import family_tasks, parse, scenario_for
from tbx.users.scripted import ScriptedSession

CORPUS = yaml.safe_load((Path(__file__).parent / "phrasings.yaml").read_text())
ANSWERED_TARGET = 0.95


def play_asks() -> list[dict]:
    """Every corpus ask with what the user did: facts revealed, missed, revealed unasked, ended."""
    rows = []
    for batch, key, styles in [(b, k, v) for b in ("asks", "held_out") for k, v in CORPUS[b].items()]:
        for style, lines in styles.items():
            for line in lines:
                text, wanted = parse(line)
                task = scenario_for(key, wanted)
                turn = ScriptedSession(task.user).answer(text)
                rows.append({"batch": batch, "key": key, "style": style, "ask": text, "wanted": wanted, "turn": turn,
                             "missed": [f for f in wanted if f not in turn.revealed],
                             "unasked": [f for f in turn.revealed if f not in wanted]})
    return rows


@cache
def results() -> tuple[dict, ...]:
    return tuple(play_asks())


def test_corpus_covers_every_fact_of_every_domain_in_every_style():
    rows = results()
    assert len(rows) >= 300
    assert {r["style"] for r in rows} == {"terse", "chatty", "bulleted", "combined"}
    asked = {(r["key"].split("/")[0], f) for r in rows for f in r["wanted"]}
    bundled = set()
    for key in CORPUS["asks"]:
        for task in family_tasks(key):
            bundled |= {(task.domain, f) for f in task.user.private_facts}
    from tbx.domains import domain_names
    for name in domain_names():
        facts = {f for t in get_domain(name).generate_tasks(0) for f in t["user"]["private_facts"]}
        bundled |= {(name, f) for f in facts}
    assert bundled - asked == set(), "facts no corpus ask asks for"


def test_asks_are_answered_and_nothing_is_revealed_unasked():
    rows = results()
    answered = [r for r in rows if not r["missed"]]
    unasked = [(r["ask"], r["unasked"]) for r in rows if r["unasked"]]
    rate = len(answered) / len(rows)

    def share(key: str, value: str) -> str:
        part = [r for r in rows if r[key] == value]
        return f"{value} {sum(not r['missed'] for r in part)}/{len(part)}"

    print(f"\nphrasing corpus: {len(answered)}/{len(rows)} asks answered ({rate:.1%}); "
          f"by batch {', '.join(share('batch', b) for b in ('asks', 'held_out'))}; "
          f"by style {', '.join(share('style', s) for s in ('terse', 'chatty', 'bulleted', 'combined'))}; "
          f"{sum(len(u) for _, u in unasked)} facts revealed unasked")
    for r in rows:
        if r["missed"]:
            print(f"  missed {r['missed']} in {r['key']}: {r['ask']!r} -> {r['turn'].text!r}")
    assert unasked == []
    assert rate >= ANSWERED_TARGET


def test_no_ask_ends_the_talk():
    ended = [(r["ask"], r["turn"].text) for r in results() if r["turn"].done]
    assert ended == []


SCENARIOS = sorted(set(CORPUS["asks"]) | set(CORPUS["held_out"]) | set(CORPUS["confirmations"])
                   | set(CORPUS["clarifying"]))


@pytest.mark.parametrize("key", SCENARIOS)
def test_controls_reveal_nothing_and_never_end_the_talk(key):
    task = scenario_for(key)
    for text in CORPUS["controls"]:
        turn = ScriptedSession(task.user).answer(text)
        assert (turn.revealed, turn.done) == ((), False), (text, turn)
        assert not any(str(f.value) in turn.text for f in task.user.private_facts.values()), (text, turn.text)


@pytest.mark.parametrize("key", sorted(CORPUS["confirmations"]))
def test_confirmations_are_answered_yes_from_the_goal(key):
    task = scenario_for(key)
    for text in CORPUS["confirmations"][key]:
        turn = ScriptedSession(task.user).answer(text)
        assert (turn.text, turn.revealed, turn.done) == ("Yes, please go ahead.", (), False), text


@pytest.mark.parametrize("key", sorted(CORPUS["clarifying"]))
def test_clarifying_questions_are_answered_by_restating_the_goal(key):
    task = scenario_for(key)
    for text in CORPUS["clarifying"][key]:
        turn = ScriptedSession(task.user).answer(text)
        assert turn.text.startswith("As I said: ") and not turn.done and turn.revealed == (), (text, turn)
        assert turn.text.removeprefix("As I said: ").rstrip(".").lower() in task.user.opening_message.lower()


@pytest.mark.parametrize("reason", ["completed", "cannot_help"])
def test_completion_and_cannot_help_statements_end_the_talk(reason):
    task = scenario_for("travel/downgrade_needs_approval")
    for text in CORPUS["endings"][reason]:
        turn = ScriptedSession(task.user).answer(text)
        assert (turn.done, turn.reason, turn.revealed) == (True, reason, ()), text


SAME_FACT = {("email", "work_email")}  # asked by another name, the same thing: a consulting user's email


def test_asks_for_facts_the_user_does_not_hold_reveal_no_other_fact():
    """Every private fact any task of a domain holds, asked in three plain forms of each of the domain's
    task scenarios that lack it: the user reveals nothing (or, for SAME_FACT, the same thing by its name)."""
    from tbx.domains import domain_names

    asks, revealed = 0, []
    for name in domain_names():
        domain = get_domain(name)
        tasks = [load_task(dict(t), f"{name}[{i}]", domain.policy) for i, t in enumerate(domain.generate_tasks(0))]
        every = sorted({f for t in tasks for f in t.user.private_facts})
        seen = set()
        for task in tasks:
            held = tuple(sorted(task.user.private_facts))
            for fact in (f for f in every if f not in held and (task.family, held, f) not in seen):
                seen.add((task.family, held, fact))
                for form in ("What is your {}?", "Could you tell me the {}?", "Please provide your {}."):
                    asks += 1
                    turn = ScriptedSession(task.user).answer(form.format(fact.replace("_", " ")))
                    revealed += [(task.id, fact, other) for other in turn.revealed if (fact, other) not in SAME_FACT]
    print(f"\nasks for facts the user does not hold: {asks}, {len(revealed)} revealed another fact")
    assert asks > 1500 and revealed == []
