"""stage=serve as users run it: `launch.py` in its own process, agents in this one through the official
`mcp` client over real streamable HTTP (and stdio). The reference solution through the server gives
the in-process oracle's verdicts on every travel task, the null agent 0%; 16 sessions at once each
see only their own database; a killed client is recorded as abandoned while the server goes on.
"""

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time

import httpx2
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client

from tbx.launch import run_stage
from tbx.records import StoredTry
from tbx.store.results import read_records
from tests.helpers.stage import make_cfg
from tests.serve.agents import call, play_null, play_reference
from tests.serve.served import ROOT, Served, serve_args, tasks_of

PARITY_KEYS = ("outcome", "reward", "grade", "final_delta", "transcript", "counts", "ended_by")


def in_process(tmp_path, policy):
    summary = run_stage(make_cfg(tmp_path, "stage=eval", "tasks=travel", f"policy={policy}"))
    return {r.task_id: r for r in read_records(summary.run_dir)}


def parity(record: StoredTry) -> dict:
    """What a served episode and the same attempt played in process must share, as stored."""
    stored = record.to_dict()
    return {k: stored[k] for k in PARITY_KEYS}


@pytest.mark.slow
def test_the_reference_through_http_gets_the_oracle_verdicts_on_every_travel_task_and_null_gets_zero(tmp_path):
    travel = tasks_of("travel")
    with Served(tmp_path, "tasks=travel", "serve.agent_name=reference") as server:
        async def one_after_another():  # sessions get the tasks in the task set's order
            for task in travel:
                async with mcp.Client(server.url) as client:
                    await play_reference(client, task)

        start = time.perf_counter()
        asyncio.run(one_after_another())
        seconds = time.perf_counter() - start
        assert server.wait() == 0, server.output()[-2000:]
    oracle = in_process(tmp_path, "oracle")
    served = {task_id: r for (task_id, _), r in server.records.items()}
    assert len(served) == len(oracle) == 72
    for task_id, record in served.items():  # the whole episode: transcript, verdict and its checks, state
        assert parity(record) == parity(oracle[task_id]), task_id
    assert server.summary["pass_at_1"] == 1.0 and server.summary["policy"] == "reference"
    print(f"reference: 72 sessions one after another in {seconds:.1f} s")

    with Served(tmp_path, "tasks=travel", "serve.agent_name=null_agent") as server:
        async def eight_at_a_time():
            gate = asyncio.Semaphore(8)

            async def one():
                async with gate, mcp.Client(server.url) as client:
                    await play_null(client)

            await asyncio.gather(*(one() for _ in travel))

        start = time.perf_counter()
        asyncio.run(eight_at_a_time())
        print(f"null: 72 sessions, 8 at a time, in {time.perf_counter() - start:.1f} s")
        assert server.wait() == 0, server.output()[-2000:]
    null = in_process(tmp_path, "null_agent")
    served = {task_id: r for (task_id, _), r in server.records.items()}
    assert served.keys() == null.keys()
    for task_id, record in served.items():
        assert parity(record) == parity(null[task_id]), task_id
    assert server.summary["pass_at_1"] == 0.0 and server.summary["counts"]["failure"] == 72


def test_sixteen_concurrent_sessions_each_see_only_their_own_database(tmp_path):
    """16 attempts of one task at once: each session moves its own amount; every session has written
    before any reads back. A shared database would show the others' transfers (ids, balances)."""
    with Served(tmp_path, "tasks=mock", "tasks.limit=1", "eval.attempts=16", "serve.agent_name=crowd") as server:
        async def crowd():
            written = asyncio.Barrier(16)

            async def one(amount):
                async with mcp.Client(server.url) as client:
                    await call(client, "get_user_message")
                    receipt = json.loads(await call(client, "transfer", {"from_account": 1, "to_account": 2,
                                                                         "amount": amount, "memo": f"s{amount}"}))
                    await written.wait()  # 16 episodes are open at once
                    account = json.loads(await call(client, "get_account", {"account_id": 1}))
                    await call(client, "reply_to_user", {"text": "Done."})
                    return receipt["transfer_id"], account["balance"]

            return await asyncio.gather(*(one(amount) for amount in range(1, 17)))

        seen = asyncio.run(crowd())
        assert server.wait() == 0, server.output()[-2000:]
    assert len({transfer_id for transfer_id, _ in seen}) == 1  # every clone gave out the same next id
    assert [balance for _, balance in seen] == [100 - amount for amount in range(1, 17)]  # 100: the seed
    records = server.records
    assert sorted(attempt for _, attempt in records) == list(range(16))
    for record in records.values():
        (call_made,) = [c for m in record.transcript for c in m.tool_calls if c.name == "transfer"]
        mine = [row for row in record.final_delta["transfers"]["rows"] if str(row["memo"]).startswith("s")]
        assert len(mine) == 1 and mine[0]["memo"] == call_made.arguments["memo"]  # its own transfer only
        amount = call_made.arguments["amount"]
        assert record.outcome == ("success" if amount == 5 else "failure")  # the user asked for $5


def test_a_killed_client_is_abandoned_and_the_server_goes_on(tmp_path):
    mock = tasks_of("mock")
    overrides = ("tasks=mock", "serve.agent_name=fragile", "serve.idle_timeout_s=1")
    with Served(tmp_path, *overrides) as server:
        held = subprocess.Popen([sys.executable, "-m", "tests.serve.agents", "hold", server.url], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)
        assert held.stdout.readline().strip() == "READY"  # its episode is under way (mock[0])
        held.kill()
        held.wait()

        async def the_others():
            async with mcp.Client(server.url) as client:
                await client.list_tools()  # never starts its episode: the attempt goes to the next session
            async with mcp.Client(server.url) as client:
                await call(client, "get_user_message")  # leaves mid-task, closing the session (DELETE)
            async with mcp.Client(server.url) as client:
                return await play_reference(client, mock[2])

        last = asyncio.run(the_others())
        assert server.wait() == 0, server.output()[-2000:]  # after the last attempt, on its own
    assert "ended the conversation" in last
    records = {task_id: r for (task_id, _), r in server.records.items()}
    killed, polite, played = (records[task.id] for task in mock)
    for record in (killed, polite):
        assert (record.outcome, record.reward, record.ended_by) == ("abandoned", 0.0, "agent_left")
        assert "left before the user ended" in record.cause
    assert [c.name for m in killed.transcript for c in m.tool_calls] == ["get_account"]
    assert played.outcome == "success" and len(records) == 3
    summary = server.summary
    assert summary["counts"]["abandoned"] == 2 and summary["pass_at_1"] == 1 / 3
    again = subprocess.run(serve_args(tmp_path, *overrides), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0 and "nothing to serve" in again.stderr  # resumes: every attempt is final
    assert len(read_records(server.run_dir)) == 3


def test_beyond_loopback_the_bearer_token_is_required_and_never_stored(tmp_path):
    token = f"tbx-test-{secrets.token_hex(12)}"
    env = {**os.environ, "TBX_TEST_SERVE_TOKEN": token}
    overrides = ("tasks=mock", "tasks.limit=1", "serve.agent_name=remote", "serve.host=0.0.0.0",
                 "serve.token_env=TBX_TEST_SERVE_TOKEN")
    with Served(tmp_path, *overrides, env=env) as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "0"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        for refused in ({}, {"Authorization": "Bearer wrong"}):
            answer = httpx2.post(url, json=opening, headers=headers | refused)
            assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer")

        async def with_token():
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with http, mcp.Client(streamable_http_client(url, http_client=http)) as client:
                await play_reference(client, tasks_of("mock")[0])

        asyncio.run(with_token())
        assert server.wait() == 0, server.output()[-2000:]
        output = server.output()
    assert server.summary["pass_at_1"] == 1.0
    stored = [path for path in tmp_path.rglob("*") if path.is_file() and token.encode() in path.read_bytes()]
    assert stored == [] and token not in output


def test_stdio_serves_one_episode_per_process(tmp_path):
    mock = tasks_of("mock")
    command = serve_args(tmp_path, "tasks=mock", "serve.agent_name=piped", "serve.transport=stdio")
    server = mcp.StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))

    async def two_processes():
        answers = []
        for task in mock[:2]:
            async with mcp.Client(server) as client:
                answers.append(await play_reference(client, task))
        return answers

    answers = asyncio.run(two_processes())
    assert all("ended the conversation" in answer for answer in answers)
    (run_dir,) = (tmp_path / "outputs").glob("serve-mock-piped-*")
    records = read_records(run_dir)
    assert sorted((r.task_id, r.outcome) for r in records) == sorted((t.id, "success") for t in mock[:2])
    assert json.loads((run_dir / "summary.json").read_text())["episodes"] == 2


def test_two_stdio_servers_on_one_run_at_once_play_different_attempts(tmp_path):
    """Clients that start one server process per episode, two at a time: each process claims its attempt
    in the results store, so the second passes over the attempt the first holds."""
    command = serve_args(tmp_path, "tasks=mock", "tasks.limit=2", "serve.agent_name=pair", "serve.transport=stdio")
    server = mcp.StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))

    async def both_at_once():
        async with mcp.Client(server) as first, mcp.Client(server) as second:  # both listening before either plays
            return await asyncio.gather(play_null(first), play_null(second))

    answers = asyncio.run(both_at_once())
    assert all("ended the conversation" in answer for answer in answers), answers
    (run_dir,) = (tmp_path / "outputs").glob("serve-mock-pair-*")
    records = read_records(run_dir)
    assert sorted(r.task_id for r in records) == sorted(t.id for t in tasks_of("mock")[:2])  # one each
    assert [r.try_index for r in records] == [0, 0]


def test_the_llm_user_and_its_audit_play_against_a_served_agent(tmp_path):
    """user=llm: a turn that breaks the user's contract (a private fact said unasked) is a user_sim_error,
    which the agent is told is not counted against it, and the attempt is served again (same seed)."""
    from tests.fakes.openai_server import FakeOpenAIServer, text_reply

    with FakeOpenAIServer() as llm:
        llm.script(text_reply("Sure. By the way, my name is Ada."),  # unasked: a leak
                   text_reply("Thank you, that's all. ###STOP###"))
        overrides = ("tasks=mock", "tasks.limit=1", "serve.agent_name=talker", "user=llm",
                     f"user.endpoint.base_url={llm.base_url}", "user.endpoint.model=fake-model",
                     "user.endpoint.api_key_env=null", "user.endpoint.max_retries=0")
        with Served(tmp_path, *overrides) as server:
            async def two_sessions():
                answers = []
                for text in ("Hello, how can I help?", "Done: I have sent the money."):
                    async with mcp.Client(server.url) as client:
                        await call(client, "get_user_message")
                        answers.append(await call(client, "reply_to_user", {"text": text}))
                return answers

            leaked, ended = asyncio.run(two_sessions())
            assert server.wait() == 0, server.output()[-2000:]
    assert "harness fault (user_sim_error), not counted against you" in leaked
    assert ended.startswith("Thank you, that's all.") and "ended the conversation" in ended
    tries = read_records(server.run_dir)
    assert [(r.attempt, r.try_index, r.outcome) for r in tries] == [(0, 0, "user_sim_error"), (0, 1, "failure")]
    assert "Ada" in tries[0].cause and tries[1].usage["user"].completion_tokens == 7
    assert server.summary["error_tries"] == 1 and server.summary["pass_at_1"] == 0.0
