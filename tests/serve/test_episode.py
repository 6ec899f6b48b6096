"""A served episode through the official MCP client, in process: the same turns, transcript and verdict
as the in-process oracle; the listing is the in-process one plus the user channel; the turn limit,
argument mistakes, leaving, and the campaign's order, release and retries.

Real episodes (SQLite clones, the scripted user, the grader); the MCP session is the SDK's in-memory
one. Over real HTTP in another process: tests/serve/test_serve_http.py.
"""

import asyncio

import mcp
import pytest

from tbx.backend import make_backend
from tbx.catalog import prepare_task
from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.policies.reference import DONE, OraclePolicy
from tbx.records import EpisodeResult
from tbx.serve.campaign import Campaign, Seat, View
from tbx.serve.episode import OVER, TURN_LIMIT, USER_ENDED, ServedEpisode
from tbx.tasks import load_task
from tbx.tools.mcp_server import InfraLog, build_server
from tests.helpers.episodes import world_of
from tests.serve.agents import play_reference, text
from tests.serve.sessions import serve_one

MOCK = get_domain("mock")


@pytest.fixture
def backend(tmp_path):
    backend = make_backend("sqlite", None, str(tmp_path / "db"))
    yield backend
    backend.close()


def mock_runtime(backend, index=0, **changes):
    task = load_task(dict(MOCK.generate_tasks(0)[index]) | changes, "mock-test", MOCK.policy)
    return prepare_task(task, backend)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_reference_through_mcp_is_the_in_process_oracle_turn_for_turn(backend, index):
    runtime = mock_runtime(backend, index)
    last, stored, _ = asyncio.run(serve_one(runtime, backend, lambda c: play_reference(c, runtime.task)))
    oracle = asyncio.run(run_episode(world_of(backend), runtime, OraclePolicy(), 0, 0))
    (served,) = stored
    assert served.outcome is Outcome.SUCCESS and oracle.outcome is Outcome.SUCCESS
    assert served.transcript == oracle.transcript  # same messages, call ids and tool answers
    assert (served.grade, served.final_delta, served.counts) == (oracle.grade, oracle.final_delta, oracle.counts)
    assert last.endswith(USER_ENDED) and "###STOP###" not in last  # the user's control marker never reaches it
    assert "###STOP###" not in str(served.transcript)


def test_the_listing_is_the_in_process_one_plus_the_user_channel(backend):
    runtime = mock_runtime(backend)

    async def listing(client):
        return (await client.list_tools()).tools

    served, _, _ = asyncio.run(serve_one(runtime, backend, listing))

    async def in_process():
        async with mcp.Client(build_server("mock", runtime.tools, None, InfraLog())) as client:
            return (await client.list_tools()).tools

    inside = asyncio.run(in_process())
    assert [t.model_dump() for t in served[:len(inside)]] == [t.model_dump() for t in inside]
    assert [t.name for t in served[len(inside):]] == ["get_user_message", "reply_to_user"]


def test_the_turn_limit_ends_the_episode_and_says_so(backend):
    runtime = mock_runtime(backend, turn_limit=2)

    async def two_reads_then_more(client):
        first = await client.call_tool("get_account", {"account_id": 1})
        second = await client.call_tool("get_account", {"account_id": 2})
        later = await client.call_tool("reply_to_user", {"text": "done"})
        return first, second, later

    (first, second, later), (result,), _ = asyncio.run(serve_one(runtime, backend, two_reads_then_more))
    assert TURN_LIMIT not in text(first) and text(second).endswith(TURN_LIMIT) and '"id": 2' in text(second)
    assert later.is_error and text(later) == OVER
    assert result.ended_by == "turn_limit" and result.outcome is Outcome.FAILURE and result.counts["turns"] == 2


def test_argument_mistakes_are_errors_the_agent_reads_and_user_channel_ones_take_no_turn(backend):
    runtime = mock_runtime(backend)

    async def mistakes(client):
        answers = [await client.call_tool("reply_to_user", {}),
                   await client.call_tool("reply_to_user", {"text": 5}),
                   await client.call_tool("get_user_message", {"x": 1}),
                   await client.call_tool("transfer", {"from_account": 1}),  # a domain tool: a turn, as in process
                   await client.call_tool("no_such_tool", {})]
        await client.call_tool("reply_to_user", {"text": DONE})
        return answers

    answers, (result,), _ = asyncio.run(serve_one(runtime, backend, mistakes))
    assert all(a.is_error for a in answers)
    assert "needs the argument text" in text(answers[0]) and "unknown argument(s) x" in text(answers[2])
    assert text(answers[3]).startswith("Error: invalid arguments for transfer") and "to_account" in text(answers[3])
    assert "no_such_tool" in text(answers[4])
    assert result.counts["turns"] == 3 and result.counts["tool_errors"] == 2  # transfer, no_such_tool, the reply


def test_a_session_that_only_lists_claims_nothing_and_one_that_leaves_mid_task_is_abandoned(backend):
    runtime = mock_runtime(backend)

    async def only_lists(client):
        await client.list_tools()

    _, stored, episode = asyncio.run(serve_one(runtime, backend, only_lists))
    assert stored == [] and episode is None  # it claimed nothing

    async def reads_then_goes(client):
        await client.call_tool("get_user_message", {})
        await client.call_tool("get_account", {"account_id": 1})

    _, (result,), _ = asyncio.run(serve_one(runtime, backend, reads_then_goes))
    assert result.outcome is Outcome.ABANDONED and result.reward == 0.0 and result.ended_by == "agent_left"
    assert [m.role for m in result.transcript] == ["system", "user", "assistant", "tool"]


def fake_result(task_id, attempt, outcome):
    return EpisodeResult(task_id, "mock", "f", attempt, 0, outcome, "", (), {}, {}, None, None, {}, {})


def test_the_campaign_hands_out_attempt_zero_of_every_task_first_and_takes_back_what_was_not_played():
    from tbx.stages.serve import pending_attempts

    pending = pending_attempts(["a", "b", "c"], 2, lambda t, a: (t, a) == ("b", 0))
    assert pending == [("a", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]  # attempt-major; ("b", 0) is final
    one, other = View("policy one", ()), View("policy two", ())
    views = {"a": one, "b": one, "c": other}
    outcomes = {("a", 0): [Outcome.INFRA_ERROR, Outcome.SUCCESS], ("a", 1): [Outcome.FAILURE],
                ("b", 1): [Outcome.ABANDONED], ("c", 0): [Outcome.SUCCESS], ("c", 1): [Outcome.SUCCESS]}
    stored = []

    def store(result):
        stored.append((result.task_id, result.attempt, result.outcome))
        return result.outcome is not Outcome.INFRA_ERROR  # one error try, then final

    def open_episode(task_id, attempt, record):
        async def play(agent):
            return fake_result(task_id, attempt, outcomes[(task_id, attempt)].pop(0))

        return ServedEpisode(task_id, attempt, play, record)

    async def main():
        campaign = Campaign(pending, views, open_episode, store)
        assert campaign.next_view() is one
        first = Seat(campaign, one).take()
        campaign.session_ended(first)  # never started: back to the front
        assert Seat(campaign, other).take().task_id == "c"  # the first pending attempt with the view shown
        assert Seat(campaign, View("policy three", ())).take() is None
        order = []
        while (view := campaign.next_view()) is not None:  # sessions one after another
            episode = Seat(campaign, view).take()
            order.append((episode.task_id, episode.attempt))
            await episode.user_message()
            await episode.task
        assert not campaign.done.is_set() and list(campaign.in_flight) == [("c", 0)]  # still being played
        return order

    order = asyncio.run(main())
    assert order == [("a", 0), ("a", 0), ("a", 1), ("b", 1), ("c", 1)]  # the error was served again at once
    assert stored == [("a", 0, Outcome.INFRA_ERROR), ("a", 0, Outcome.SUCCESS), ("a", 1, Outcome.FAILURE),
                      ("b", 1, Outcome.ABANDONED), ("c", 1, Outcome.SUCCESS)]


def test_an_attempt_another_process_holds_is_passed_over_and_dropped_once_that_process_made_it_final():
    """`take` stands for the store's claims (tests/serve/test_serve_http.py runs two real processes)."""
    view = View("policy", ())
    held_by_other = {("a", 0): False}  # another process plays ("a", 0); None once it stored its final try
    taken, given_back = [], []

    def take(task_id, attempt):
        taken.append((task_id, attempt))
        return held_by_other.get((task_id, attempt), True)

    def open_episode(task_id, attempt, record):
        async def play(agent):
            return fake_result(task_id, attempt, Outcome.SUCCESS)

        return ServedEpisode(task_id, attempt, play, record)

    async def main():
        campaign = Campaign([("a", 0), ("b", 0)], {"a": view, "b": view}, open_episode, lambda result: True,
                            take, lambda *key: given_back.append(key))
        first = Seat(campaign, view).take()
        assert (first.task_id, first.attempt) == ("b", 0) and campaign.elsewhere == {("a", 0)}
        assert Seat(campaign, view).take() is None  # nothing this process can claim now
        await first.user_message()
        await first.task
        assert given_back == [("b", 0)] and not campaign.done.is_set()  # ("a", 0) is still the other's
        campaign.recheck()
        assert not campaign.done.is_set() and campaign.elsewhere == {("a", 0)}
        held_by_other[("a", 0)] = None  # the other process stored it
        campaign.recheck()
        assert campaign.done.is_set() and campaign.pending == 0 and not campaign.elsewhere

    asyncio.run(main())
    assert taken == [("a", 0), ("b", 0), ("a", 0), ("a", 0), ("a", 0)]


def test_an_attempt_another_process_gave_back_is_handed_out_again():
    view = View("policy", ())
    holder = {"a": False}

    def open_episode(task_id, attempt, record):
        async def play(agent):
            return fake_result(task_id, attempt, Outcome.SUCCESS)

        return ServedEpisode(task_id, attempt, play, record)

    async def main():
        given_back = []
        campaign = Campaign([("a", 0)], {"a": view}, open_episode, lambda result: True,
                            lambda task_id, attempt: holder[task_id], lambda *key: given_back.append(key))
        assert Seat(campaign, view).take() is None and campaign.elsewhere == {("a", 0)}
        holder["a"] = True  # the other process left it without a result (or died)
        watching = asyncio.create_task(campaign.watch(0.01))
        while campaign.elsewhere:
            await asyncio.sleep(0.01)
        assert given_back == [("a", 0)]  # claimed only to look, and given back at once
        episode = Seat(campaign, view).take()
        await episode.user_message()
        await episode.task
        await asyncio.wait_for(watching, 1)  # ends with the campaign
        assert campaign.done.is_set()

    asyncio.run(main())


def test_sessions_beyond_the_pending_attempts_are_refused_once_claimed_and_told_to_close_before():
    """docs/serve.md, as it behaves: a session opened while every pending attempt is claimed is refused
    (HTTP 503: `next_view` None); sessions opened while one was still pending (more than there are
    attempts, before any first call) are opened, and the one that finds nothing left is told to close. A
    session that only lists the tools holds no place, so an inspector never blocks a player."""
    view = View("policy", ())

    def open_episode(task_id, attempt, record):
        async def play(agent):
            return fake_result(task_id, attempt, Outcome.SUCCESS)

        return ServedEpisode(task_id, attempt, play, record)

    campaign = Campaign([("a", 0)], {"a": view}, open_episode, lambda result: True)
    lister, first, second = (Seat(campaign, campaign.next_view()) for _ in range(3))  # all opened
    assert first.take().attempt == 0 and campaign.next_view() is None  # a fourth session now: 503
    assert second.take() is None  # its first call answers NO_ATTEMPT (close this session)
    lister.end()
