"""The scripted user's contract, one behaviour at a time, and every bundled reference played
through it: each ask of a reference gets exactly the facts its keywords name, and each reference's
closing statement ends the talk as `completed` or `cannot_help`."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from tbx.domains import domain_names, get_domain
from tbx.messages import Message
from tbx.tasks import load_task
from tbx.tasks.model import PrivateFact, UserScenario
from tbx.users.base import STOP
from tbx.users.reading import ending_of, read_sentences
from tbx.users.scripted import PATIENCE, ScriptedSession, ScriptedUser

TRIP = UserScenario(
    persona="Marcus Rossi, an Acme employee.",
    instructions="You want your Boston stay moved from the Deluxe King to the Standard Queen room.",
    private_facts={"employee_id": PrivateFact(3577, ("employee id", "employee number")),
                   "confirmation_code": PrivateFact("PJUJGS", ("confirmation code", "booking reference")),
                   "last_name": PrivateFact("Rossi", ("last name", "surname"))},
    opening_message="Hi, please switch my Boston hotel room to the Standard Queen.",
)


def answer(text: str, scenario: UserScenario = TRIP):
    return ScriptedSession(scenario).answer(text)


def test_an_imperative_request_is_answered_and_does_not_end_the_talk():
    turn = answer("Please share your personnel number so I can look you up.")
    assert (turn.text, turn.revealed, turn.done, turn.reason) == ("My employee ID is 3577.", ("employee_id",),
                                                                  False, "")


def test_a_multi_fact_request_gets_every_fact_and_nothing_else():
    turn = answer("To find the reservation I'll need:\n- your staff number\n- the booking reference")
    assert turn.revealed == ("employee_id", "confirmation_code")
    assert "Rossi" not in turn.text and "3577" in turn.text and "PJUJGS" in turn.text


def test_a_request_that_fits_several_facts_names_them_without_values():
    turn = answer("Can you give me the number?")
    assert turn.revealed == () and not turn.done
    assert turn.text == "Which number do you need: my employee ID or my confirmation code?"


def test_a_request_for_something_the_user_does_not_hold_is_declined_not_invented():
    turn = answer("What's your phone number?")
    assert (turn.text, turn.revealed, turn.done) == ("Sorry, I don't have that information.", (), False)


def test_a_confirmation_is_yes_only_for_what_the_goal_asks():
    assert answer("Shall I switch you to the Standard Queen?").text == "Yes, please go ahead."
    assert answer("Should I proceed?").text == "Yes, please go ahead."
    cancel = answer("Shall I cancel the Boston room instead?")
    assert cancel.text == "I'm not sure about that. As I said: Please switch my Boston hotel room to the Standard Queen."


def test_a_clarifying_question_is_answered_with_the_users_own_words():
    turn = answer("Which room type would you like?")
    assert turn.text == "As I said: Please switch my Boston hotel room to the Standard Queen."


def test_completion_and_refusal_end_the_talk_with_their_reason():
    done = answer("Your room is changed to the Standard Queen. Is there anything else I can help you with?")
    assert (done.done, done.reason, done.text) == (True, "completed", "Thank you, that's all.")
    assert STOP not in done.text  # the control marker is tbx's, never the agent's to read
    refused = answer("I'm sorry, I can't change this booking because it is non-refundable.")
    assert (refused.done, refused.reason) == (True, "cannot_help")
    looking = answer("I can't find that booking yet, one moment.")  # a failed lookup is not a refusal
    assert not looking.done


def test_patience_ends_the_talk_after_replies_that_move_nothing():
    session = ScriptedSession(TRIP)
    turns = [session.answer("Let me check that for you.") for _ in range(PATIENCE - 1)]
    assert [t.text for t in turns] == ["Okay."] * (PATIENCE - 1) and not any(t.done for t in turns)
    session.answer("What is your surname?")  # a fact given: patience starts again
    turns = [session.answer("One moment please.") for _ in range(PATIENCE)]
    assert [t.done for t in turns] == [False] * (PATIENCE - 1) + [True] and turns[-1].reason == "patience"
    assert ScriptedUser(patience=2).session(TRIP, 0).patience == 2


def test_a_declared_kind_lets_plain_questions_reach_a_fact_whose_name_says_nothing():
    def scenario(kind):
        fact = PrivateFact("July 1st", ("cutoff",), kind)
        return UserScenario("Ada.", "Stop the plan.", {"stop_on": fact}, "Please stop my plan.")

    ask = "Which date should the plan stop on?"
    assert answer(ask, scenario(None)).revealed == ()
    assert answer(ask, scenario("date")).revealed == ("stop_on",)


def test_the_session_reads_the_last_agent_message():
    session = ScriptedUser().session(TRIP, seed=3)
    history = [Message("system", "policy"), Message("user", session.opening()),
               Message("assistant", "What's your family name?"), Message("tool", "{}", name="lookup")]
    turn = asyncio.run(session.reply(history))
    assert (turn.text, turn.revealed) == ("My last name is Rossi.", ("last_name",))


@pytest.mark.parametrize(("message", "ending"), [
    ("Done: your card is now frozen.", "completed"),
    ("All set! Let me know if you need anything else.", "completed"),
    ("I opened a case for the travel team; I cannot refund it.", "cannot_help"),
    ("Your card is frozen. Could you confirm your new address?", None),
    ("Please hold on while I verify a few things.", None),
    ("Thanks for your patience.", None),
])
def test_ending_of(message, ending):
    assert ending_of(read_sentences(message)) == ending


def test_every_bundled_reference_plays_through_the_scripted_user():
    ends, wrong = Counter(), []
    for name in domain_names():
        domain = get_domain(name)
        for i, raw in enumerate(domain.generate_tasks(0)):
            task = load_task(dict(raw), f"{name}[{i}]", domain.policy)
            says = [step.say for step in task.reference if step.say is not None]
            session = ScriptedSession(task.user)
            for say in says[:-1]:
                turn = session.answer(say)
                named = {n for n, f in task.user.private_facts.items() if any(k in say.lower() for k in f.keywords)}
                if turn.done or set(turn.revealed) != named:
                    wrong.append((task.id, say, turn.text))
            last = session.answer(says[-1])
            ends[last.reason] += 1
            if not last.done:
                wrong.append((task.id, says[-1], last.text))
    assert wrong == []
    assert set(ends) == {"completed", "cannot_help"} and sum(ends.values()) > 700


def test_a_turn_that_carries_the_stop_marker_ends_the_talk_without_it():
    from tbx.users.base import UserTurn

    turn = UserTurn(f"Great, thanks! {STOP} Bye.", False)  # any simulator's, bundled or not
    assert (turn.text, turn.done) == ("Great, thanks! Bye.", True)


@pytest.mark.parametrize(("task_id", "ask"), [
    ("travel/rebook_flight/s0-00", "When were you born?"),  # its only date is the new travel date
    ("travel/rebook_flight/s0-00", "Could you tell me your date of birth?"),
    ("neobank/transfer_within_limit/s0-00", "What is the payee's account number?"),  # it holds its own number
    ("auto_insurance/file_claim/s0-00", "What is the driver's birth date?"),  # it holds its own birth date
])
def test_an_ask_for_a_fact_the_user_does_not_hold_reveals_no_other_fact(task_id, ask):
    """A bare kind cue ("date", "number") next to words naming another fact or somebody else is not a
    request for the one fact of that kind the user holds: the user declines instead of revealing it."""
    domain = get_domain(task_id.split("/")[0])
    task = next(load_task(dict(t), task_id, domain.policy) for t in domain.generate_tasks(0) if t["id"] == task_id)
    turn = ScriptedSession(task.user).answer(ask)
    assert turn.revealed == (), (ask, turn.text)


def test_every_module_a_user_reads_with_is_part_of_the_run_identity():
    """A change to how the users read messages is a new run (tbx/runs/identity.py CODE_PARTS): every module of
    tbx/users that the users import counts (corpus.py only measures them)."""
    import sys

    import tbx.users.llm
    import tbx.users.scripted  # noqa: F401
    from tbx.runs.identity import CODE_PARTS, PACKAGE

    loaded = {Path(m.__file__).relative_to(PACKAGE).as_posix() for name, m in sys.modules.items()
              if name.startswith("tbx.users.") and name != "tbx.users.corpus"}
    assert loaded - set(CODE_PARTS["users"]) == set()
