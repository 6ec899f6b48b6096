"""The LLM user (prompt, role view, per-turn audit) and the LLM judge (strict JSON verdict)."""

from __future__ import annotations

import asyncio

import pytest

from tbx.config import Config, EndpointConfig
from tbx.errors import InfraError, UserSimError, VerifierError
from tbx.grading.judge_llm import LLMJudge, parse_verdict, render_transcript
from tbx.llm.client import ChatClient
from tbx.messages import Message, ToolCall, Usage
from tbx.tasks.model import JudgeRule, PrivateFact, UserScenario
from tbx.users.base import STOP
from tbx.users.llm import LLMUser, audit_user_turn, build_user_prompt, to_user_view
from tests.fakes.openai_server import FakeOpenAIServer, status_reply, text_reply

SCENARIO = UserScenario(
    persona="Ada Byron, a frequent traveller.",
    instructions="Move your hotel stay to the 14th and pay the 1450 dollar difference.",
    private_facts={
        "booking_id": PrivateFact("BK-1042", ("booking", "reservation")),
        "card_last4": PrivateFact("4242", ("card", "payment")),
        "amount": PrivateFact(1450.0, ("amount", "price")),
    },
    opening_message="Hi, I need to change my hotel booking.",
)
OPENING = [Message("system", "You are a hotel agent."), Message("user", SCENARIO.opening_message)]
LOOKUP = [Message("assistant", "", (ToolCall("get_booking", {"booking_id": "BK-1042"}, "call_0"),)),
          Message("tool", '{"status": "confirmed"}', tool_call_id="call_0", name="get_booking")]


def agent(text: str) -> Message:
    return Message("assistant", text)


def conversation(*agent_lines: str, lookup: bool = False) -> list[Message]:
    return [*OPENING, *(LOOKUP if lookup else ()), *(agent(line) for line in agent_lines)]


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def endpoint(server: FakeOpenAIServer, **changes) -> EndpointConfig:
    return EndpointConfig(**({"base_url": server.base_url, "model": "fake-model", "timeout_s": 2.0,
                              "max_retries": 1} | changes))


def run(coro_factory, closable):
    async def main():
        try:
            return await coro_factory()
        finally:
            await closable.aclose()
    return asyncio.run(main())


# -- audit (pure) -------------------------------------------------------------------------------

def test_audit_accepts_an_answer_to_a_question():
    audit = audit_user_turn(SCENARIO, conversation("What is your booking number?"), "It's BK-1042.", False)
    assert audit.problems == () and audit.revealed == ("booking_id",)


def test_audit_flags_a_fact_leaked_before_the_agent_asked():
    audit = audit_user_turn(SCENARIO, conversation("Sure, what would you like to change?"),
                            "Move it to the 14th, booking BK-1042.", False)
    assert audit.revealed == ("booking_id",)
    assert len(audit.problems) == 1 and "leaked private fact 'booking_id'" in audit.problems[0]


def test_audit_allows_repeating_a_fact_already_in_the_conversation():
    history = conversation("What is your booking number?")
    history += [Message("user", "BK-1042."), agent("Shall I move it to the 14th?")]
    audit = audit_user_turn(SCENARIO, history, "Yes, please move BK-1042.", False)
    assert audit == audit.__class__((), ())


def test_audit_flags_an_invented_identifier():
    audit = audit_user_turn(SCENARIO, conversation("Which card should I charge?"), "My card ends in 9981.", False)
    assert audit.revealed == ()
    assert len(audit.problems) == 1 and "['9981']" in audit.problems[0] and "invented" in audit.problems[0]
    invented_code = audit_user_turn(SCENARIO, conversation("Anything else?"), "Also use voucher XK7.", False)
    assert "['xk7']" in invented_code.problems[0]


def test_audit_matches_numbers_in_any_format_and_ignores_small_talk_numbers():
    # fact 1450.0 said as "$1,450.00"; the agent's "$350" may be repeated; "2 nights" and "3rd" are not ids
    history = conversation("The new price is $350 more; what amount did you expect?")
    audit = audit_user_turn(SCENARIO, history, "I expected $1,450.00, not $350, for 2 nights on the 3rd floor.",
                            False)
    assert audit.problems == () and audit.revealed == ("amount",)


def test_audit_flags_a_stop_while_the_agent_asks_a_question():
    early = audit_user_turn(SCENARIO, conversation("Which room type would you like?"), "Fine.", True)
    assert len(early.problems) == 1 and "premature stop" in early.problems[0]
    refused = audit_user_turn(SCENARIO, conversation("I can't help with that, sorry."), "Fine.", True)
    assert refused.problems == ()  # the agent ended it: stopping is the user's right
    after_lookup = audit_user_turn(SCENARIO, conversation("Done, it is moved.", lookup=True), "Thanks!", True)
    assert after_lookup.problems == ()


def test_audit_reads_asks_by_meaning_and_lets_the_user_stop_after_an_offer_of_more_help():
    # no keyword of card_last4 ("card", "payment") in the ask, but it asks for the card's last digits
    natural = audit_user_turn(SCENARIO, conversation("What are the last four digits, please?"), "4242.", False)
    assert natural == natural.__class__(("card_last4",), ())
    offer = audit_user_turn(SCENARIO, conversation("Done, it is moved. Anything else I can help with?"), "No.", True)
    assert offer.problems == ()
    request = audit_user_turn(SCENARIO, conversation("Please share the reservation code."), "Bye.", True)
    assert "premature stop" in request.problems[0]  # a request without "?" is still waiting for an answer


def test_prompt_and_view_hold_facts_and_flip_roles():
    prompt = build_user_prompt(SCENARIO)
    for piece in ("Ada Byron", "Move your hotel stay", "booking_id: BK-1042", "card, payment", "amount: 1450.0", STOP):
        assert piece in prompt
    view = to_user_view(prompt, conversation("Checking.", "What is your card?", lookup=True))
    assert view == [
        {"role": "system", "content": prompt},
        {"role": "assistant", "content": SCENARIO.opening_message},
        {"role": "user", "content": "Checking.\n\nWhat is your card?"},
    ]


# -- the LLM user over HTTP ---------------------------------------------------------------------

def reply(user: LLMUser, history: list[Message], seed: int = 7):
    session = user.session(SCENARIO, seed=seed)
    assert session.opening() == SCENARIO.opening_message
    return run(lambda: session.reply(history), user)


def test_llm_user_answers_and_stops(server):
    cfg = Config()
    cfg.user.endpoint = endpoint(server)
    user = LLMUser.from_config(cfg.user)
    server.script(text_reply("It is BK-1042.", usage=(300, 6)), text_reply(f"Great, thanks! {STOP}"))
    turn = reply(user, conversation("What is your booking number?"))
    assert (turn.text, turn.done, turn.usage, turn.revealed) == ("It is BK-1042.", False, Usage(300, 6), ("booking_id",))
    request = server.chat_requests[0].body
    assert request["seed"] == 7 and "tools" not in request
    assert [m["role"] for m in request["messages"]] == ["system", "assistant", "user"]
    done = reply(user, conversation("Your stay is moved to the 14th.", lookup=True))
    assert (done.text, done.done, done.reason) == ("Great, thanks!", True, "completed")


@pytest.mark.parametrize(("answer", "problem"), [
    ("Booking BK-1042, card 4242.", "leaked private fact"),
    ("My loyalty number is LY-55310.", "invented fact"),
    (f"Never mind. {STOP}", "premature stop"),
])
def test_llm_user_contract_breaches_are_user_sim_errors(server, answer, problem):
    server.script(text_reply(answer))
    with pytest.raises(UserSimError, match=problem):
        reply(LLMUser(endpoint(server)), conversation("How can I help?"))


def test_llm_user_endpoint_failure_is_a_user_sim_error(server):
    server.script(status_reply(503), status_reply(503))
    user = LLMUser(endpoint(server), client=ChatClient(endpoint(server), backoff_s=0.01))
    with pytest.raises(UserSimError, match="user simulator endpoint failed.*HTTP 503") as caught:
        reply(user, conversation("What is your booking number?"))
    assert not isinstance(caught.value, InfraError) and len(server.chat_requests) == 2


# -- the judge ----------------------------------------------------------------------------------

RULE = JudgeRule("told_amount", "The agent told the user the amount charged.")
TRANSCRIPT = [*conversation("What is your card?", lookup=True), Message("user", "4242."),
              agent("Charged $1,450 to card 4242.")]


@pytest.mark.parametrize(("text", "passed"), [('{"verdict": "pass", "reason": "said $1,450"}', True),
                                              (' {"reason": "no amount", "verdict": "fail"}\n', False)])
def test_parse_verdict_reads_strict_json(text, passed):
    assert parse_verdict(text.strip())[0] is passed


@pytest.mark.parametrize("text", [
    "yes", "PASS", '{"verdict": "PASS", "reason": "x"}', '{"verdict": "pass"}', '{"verdict": "pass", "reason": 3}',
    '{"verdict": "pass", "reason": "x", "score": 1}', '["pass"]', '```json\n{"verdict": "pass", "reason": "x"}\n```',
    'The verdict: {"verdict": "pass", "reason": "x"}',
])
def test_parse_verdict_rejects_anything_else(text):
    with pytest.raises(VerifierError):
        parse_verdict(text)


def test_judge_decides_with_json_mode_and_the_transcript(server):
    cfg = Config()
    cfg.judge.endpoint = endpoint(server)
    judge = LLMJudge.from_config(cfg.judge)
    server.script(text_reply('{"verdict": "pass", "reason": "it said $1,450"}', usage=(500, 12)),
                  text_reply('{"verdict": "fail", "reason": "no amount"}'))
    verdict = run(lambda: judge.decide(RULE, TRANSCRIPT), judge)
    assert (verdict.rule_id, verdict.passed, verdict.reason, verdict.usage) == (
        "told_amount", True, "it said $1,450", Usage(500, 12))
    body = server.chat_requests[0].body
    assert body["response_format"] == {"type": "json_object"}
    prompt = body["messages"][1]["content"]
    assert RULE.rule in prompt and render_transcript(TRANSCRIPT) in prompt
    assert '[assistant tool call] get_booking({"booking_id": "BK-1042"})' in prompt
    assert "You are a hotel agent" not in prompt
    assert run(lambda: judge.decide(RULE, TRANSCRIPT), judge).passed is False


def test_judge_garbage_and_endpoint_failure_are_verifier_errors(server):
    judge = LLMJudge(endpoint(server), client=ChatClient(endpoint(server), backoff_s=0.01))
    server.script(text_reply("Yes, the rule holds."))
    with pytest.raises(VerifierError, match="not JSON"):
        run(lambda: judge.decide(RULE, TRANSCRIPT), judge)
    server.script(status_reply(500), status_reply(500))
    with pytest.raises(VerifierError, match="judge endpoint failed on rule told_amount.*HTTP 500"):
        run(lambda: judge.decide(RULE, TRANSCRIPT), judge)


def test_judge_drops_json_mode_when_the_server_rejects_it(server):
    judge = LLMJudge(endpoint(server))
    server.script(status_reply(400, "response_format is not supported"),
                  text_reply('{"verdict": "fail", "reason": "no amount"}'),
                  text_reply('{"verdict": "pass", "reason": "ok"}'))
    assert run(lambda: judge.decide(RULE, TRANSCRIPT), judge).passed is False
    assert run(lambda: judge.decide(RULE, TRANSCRIPT), judge).passed is True
    sent = [("response_format" in r.body) for r in server.chat_requests]
    assert sent == [True, False, False]
