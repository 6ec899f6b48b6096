"""tbx.envs.openenv through OpenEnv's own server (`create_app` under uvicorn, on a free port) and its own
client (`GenericEnvClient`, WebSocket sessions). Real episodes (SQLite clones, the scripted user, the grader)."""

import asyncio
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from tbx.policies.reference import DONE
from tests.envs import SAMPLE, eval_records, overrides

pytest.importorskip("openenv", reason="openenv-core is not installed here: scripts/setup_envs.sh builds .venv-envs")
pytestmark = pytest.mark.envs

from tbx.envs import openenv as tbx_openenv  # noqa: E402


@contextmanager
def served(tasks):
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(tbx_openenv.app(tasks), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def call(name, **arguments):
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


async def play(url, task_id, steps):
    """reset to `task_id`, then each (tool, arguments) until done; every step's result."""
    from openenv import GenericEnvClient

    async with GenericEnvClient(base_url=url) as env:
        results = [await env.reset(task_id=task_id)]
        for name, arguments in steps:
            results.append(await env.step(call(name, **arguments)))
            if results[-1].done:
                break
        return results


def reference_steps(task):
    steps = [(s.tool, dict(s.arguments)) if s.tool else ("reply_to_user", {"text": s.say or ""}) for s in task.reference]
    return [*steps, *NULL_STEPS]


NULL_STEPS = [("reply_to_user", {"text": DONE})] * 40  # as the in-process agents: "done" until the episode ends


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openenv")
    tasks = tbx_openenv.load(*overrides(tmp), *SAMPLE)
    with served(tasks) as url:
        yield tasks, url, tmp
    tasks.close()


def stored(tasks, task_id):
    from tbx.store.results import read_records

    tasks.run.log.refresh()
    return [r for r in read_records(tasks.run_dir) if r.task_id == task_id][-1]


def test_the_reference_scores_1_and_the_null_agent_0_with_stage_eval_s_verdicts(sample):
    tasks, url, tmp = sample
    oracle, null = eval_records(tmp, "oracle", *SAMPLE), eval_records(tmp, "null_agent", *SAMPLE)
    keys = ("outcome", "reward", "grade", "transcript", "ended_by")
    for task_id in tasks.task_ids:
        task = tasks.task(task_id)
        steps = asyncio.run(play(url, task_id, reference_steps(task)))
        assert steps[0].observation["result"] == task.user.opening_message
        assert steps[-1].done and steps[-1].reward == 1.0, steps[-1]
        assert [stored(tasks, task_id).to_dict()[k] for k in keys] == [oracle[task_id].to_dict()[k] for k in keys]
        last = asyncio.run(play(url, task_id, NULL_STEPS))[-1]
        assert last.done and last.reward == 0.0
        assert [stored(tasks, task_id).to_dict()[k] for k in keys] == [null[task_id].to_dict()[k] for k in keys]


def test_list_tools_is_the_serve_listing_and_a_hostile_call_gets_the_mcp_error(sample):
    from openenv import GenericEnvClient

    tasks, url, _ = sample
    task_id = tasks.task_ids[0]

    async def listing_and_calls():
        async with GenericEnvClient(base_url=url) as env:
            await env.reset(task_id=task_id)
            tools = (await env.step({"type": "list_tools"})).observation["tools"]
            answers = [(await env.step(call("verify_identity", employee_id="1 OR 1=1"))).observation["result"],
                       (await env.step(call("find_bookings", employee_id=1, sql="DROP TABLE bookings")))
                       .observation["result"]]
            return tools, answers

    tools, answers = asyncio.run(listing_and_calls())
    names = [t["name"] for t in tools]
    assert names[-2:] == ["get_user_message", "reply_to_user"] and "verify_identity" in names
    assert answers[0].startswith("Error: invalid arguments for verify_identity: employee_id: input should be")
    assert answers[1] == "Error: invalid arguments for find_bookings: 'sql': unknown argument (takes employee_id)"


def test_two_sessions_at_once_are_two_isolated_episodes(tmp_path):
    with tbx_openenv.load(*overrides(tmp_path), "tasks=mock") as tasks, served(tasks) as url:
        task_id = tasks.task_ids[0]  # send $5 from account 1 to account 2
        moved = [("transfer", {"from_account": 1, "to_account": 2, "amount": 5}), ("get_account", {"account_id": 1})]
        looked = [("get_account", {"account_id": 1})]

        async def both():
            return await asyncio.gather(play(url, task_id, moved), play(url, task_id, looked))

        first, second = asyncio.run(both())
    assert '"balance": 95' in first[-1].observation["result"]
    assert '"balance": 100' in second[-1].observation["result"]


def test_an_injected_harness_fault_ends_with_no_reward_and_train_false(tmp_path):
    faults = ["faults=chaos", "faults.tool=1.0", "faults.db=0", "faults.user=0", "faults.judge=0", "faults.hang=0"]
    with tbx_openenv.load(*overrides(tmp_path), "tasks=mock", *faults) as tasks, served(tasks) as url:
        last = asyncio.run(play(url, tasks.task_ids[0], [("get_account", {"account_id": 1})]))[-1]
    assert last.done and last.reward is None
    assert "harness fault (infra_error)" in last.observation["result"]
