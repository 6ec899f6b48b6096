"""tbx.envs.verifiers through verifiers' own evaluation command (`vf-eval tbx-tasks`, the installed package
envs/verifiers), its chat harness in the subprocess runtime, and a scripted agent behind an OpenAI-compatible
endpoint (tests/fakes/openai_server.py, which reads each request and answers the next step): the reference
solution, the do-nothing agent, a hostile call, two rollouts of a task at once, an injected fault. Real
episodes; the verdicts are read back from the tbx results store the run wrote.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbx.llm.parsing import render_assistant_text
from tbx.messages import ToolCall
from tbx.policies.reference import DONE
from tbx.store.results import read_records
from tests.envs import eval_records, overrides
from tests.fakes.openai_server import FakeOpenAIServer, text_reply

pytest.importorskip("verifiers", reason="verifiers is not installed here: scripts/setup_envs.sh builds .venv-envs")
from tbx.envs.verifiers import parse_action

VF_EVAL = Path(sys.executable).parent / "vf-eval"
ROOT = Path(__file__).resolve().parents[2]
# vf-eval's process imports this checkout's tbx and tbx_tasks (the venv's editable installs may name another)
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "envs" / "verifiers"), os.environ.get("PYTHONPATH")]))
pytestmark = [pytest.mark.envs, pytest.mark.slow,
              pytest.mark.skipif(not VF_EVAL.exists() or shutil.which("uv", path=str(VF_EVAL.parent)) is None,
                                 reason="vf-eval or uv missing beside this python: scripts/setup_envs.sh")]


def test_parse_action_reads_a_tool_call_and_leaves_text_to_the_user():
    assert parse_action('{"tool": "get_account", "arguments": {"account_id": 1}}') == ("get_account", {"account_id": 1})
    assert parse_action('```json\n{"tool": "x"}\n```') == ("x", {})
    assert parse_action("Your transfer is done.") is None
    assert parse_action('{"name": "get_account"}') is None  # not an action: said to the user as it is


def agent(tasks, steps_of):
    """A scripted model: the task is the one whose opening the request carries; the reply, its next step."""
    openings = {tasks.task(t).user.opening_message: tasks.task(t) for t in tasks.task_ids}

    def respond(body):
        messages = body["messages"]
        start = next(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] in openings)
        task = openings[messages[start]["content"]]  # the turns before it are tbx's worked examples, if any
        done = sum(1 for m in messages[start:] if m["role"] == "assistant")
        steps = steps_of(task)
        return text_reply(steps[done] if done < len(steps) else DONE)

    return respond


def reference(task):
    return [json.dumps({"tool": s.tool, "arguments": dict(s.arguments)}) if s.tool else (s.say or "")
            for s in task.reference]


def reference_in_tbx_format(task):
    """The reference solution as a model speaking tbx's format writes it: a `<tool_call>` block a tool step."""
    return [render_assistant_text("", [ToolCall(s.tool, dict(s.arguments))]) if s.tool else (s.say or "")
            for s in task.reference]


def vf_eval(tmp_path, task_overrides, respond, *flags):
    """`vf-eval tbx-tasks` against the scripted model; the tbx records it stored, and the chat requests."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with FakeOpenAIServer(answer=respond) as model:
        command = [str(VF_EVAL), "tbx-tasks", "-m", "fake-model", "--client.base-url", model.base_url,
                   "--client.api-key-var", "FAKE_KEY", "--no-push", "-o", str(tmp_path / "vf"),
                   "--env.player.runtime.type", "subprocess", "--env.taskset.overrides", json.dumps(task_overrides),
                   *flags]
        env = dict(os.environ, FAKE_KEY="unused", PATH=f"{VF_EVAL.parent}:{os.environ['PATH']}", PYTHONPATH=PYTHONPATH)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        requests = [r.body for r in model.chat_requests]
    (run_dir,) = Path(tmp_path / "outputs").glob("serve-*-verifiers-*")
    return read_records(run_dir), requests


SAMPLE = ("tasks=travel", "tasks.per_family=1", "tasks.limit=4")  # 4 travel families: each vf-eval turn starts a program


def test_the_reference_scores_1_and_the_null_agent_0_with_stage_eval_s_verdicts(tmp_path):
    from tbx.envs.episodes import TaskSet

    with TaskSet.load("verifiers", *overrides(tmp_path / "probe"), *SAMPLE) as tasks:
        solved, _ = vf_eval(tmp_path / "reference", overrides(tmp_path / "reference", *SAMPLE),
                            agent(tasks, reference), "-c", "4")
        idle, _ = vf_eval(tmp_path / "null", overrides(tmp_path / "null", *SAMPLE), agent(tasks, lambda t: []),
                          "-c", "4")
    oracle, null = eval_records(tmp_path, "oracle", *SAMPLE), eval_records(tmp_path, "null_agent", *SAMPLE)
    keys = ("outcome", "reward", "grade", "transcript")
    assert len(solved) == len(idle) == len(oracle) == 4
    for record in solved:
        assert [record.to_dict()[k] for k in keys] == [oracle[record.task_id].to_dict()[k] for k in keys]
        assert record.reward == 1.0 and record.extra["policy"] == "verifiers"
    for record in idle:
        assert (record.outcome, record.reward, record.grade) == (
            null[record.task_id].outcome, 0.0, null[record.task_id].grade)


def test_a_hostile_call_gets_the_mcp_error_and_two_rollouts_at_once_stay_isolated(tmp_path):
    from tbx.envs.episodes import TaskSet

    hostile = json.dumps({"tool": "get_account", "arguments": {"account_id": "1; DROP TABLE accounts"}})
    with TaskSet.load("verifiers", *overrides(tmp_path / "probe"), "tasks=mock") as tasks:
        records, requests = vf_eval(tmp_path, overrides(tmp_path, "tasks=mock"),
                                    agent(tasks, lambda t: [hostile, *reference(t)]), "-r", "2", "-c", "6")
    answers = {m["content"] for body in requests for m in body["messages"] if m["role"] == "user"}
    assert ("Error: invalid arguments for get_account: account_id: input should be a valid integer, unable to parse "
            "string as an integer (given '1; DROP TABLE accounts')") in answers
    assert len(records) == 6 and all(r.outcome == "success" for r in records)  # each on its own clone


def test_an_injected_harness_fault_fails_the_episode_never_a_0(tmp_path):
    from tbx.envs.episodes import TaskSet

    faults = ["faults=chaos", "faults.tool=1.0", "faults.db=0", "faults.user=0", "faults.judge=0", "faults.hang=0"]
    with TaskSet.load("verifiers", *overrides(tmp_path / "probe"), "tasks=mock", "tasks.limit=1") as tasks:
        records, _ = vf_eval(tmp_path, overrides(tmp_path, "tasks=mock", "tasks.limit=1", *faults),
                             agent(tasks, reference))
    assert [(r.outcome, r.reward) for r in records] == [("infra_error", None)]
    (traces,) = Path(tmp_path / "vf").glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
    assert "tbx_verdict" not in json.dumps(episode.get("traces", []))  # no reward recorded, the episode failed
    assert "no verdict (infra_error)" in json.dumps(episode)


MALFORMED = '<tool_call>\n{"name": "transfer", "arguments": {"from_account": 1,\n</tool_call>'  # cut-off JSON


def test_tbx_s_tool_format_the_reference_scores_1_the_null_agent_0_and_a_malformed_call_gets_tbx_s_parse_error(tmp_path):
    from tbx.envs.episodes import TaskSet
    from tbx.envs.trl import tool_schemas
    from tbx.envs.verifiers import system_prompt
    from tbx.policies.prompting import demonstration_turns, demonstrations_for, system_text

    mock = ("tasks=mock", "tasks.families=[transfer]")  # mock/transfer/5 and mock/transfer/20
    flags = ("--env.taskset.tool_format", "json", "-c", "2")

    def steps(task):  # mock/transfer/5 first writes a call the parser cannot read
        return [MALFORMED, *reference_in_tbx_format(task)] if task.id == "mock/transfer/5" else reference_in_tbx_format(task)

    with TaskSet.load("verifiers", *overrides(tmp_path / "probe"), *mock) as tasks:
        solved, requests = vf_eval(tmp_path / "reference", overrides(tmp_path / "reference", *mock),
                                   agent(tasks, steps), *flags)
        idle, _ = vf_eval(tmp_path / "null", overrides(tmp_path / "null", *mock), agent(tasks, lambda t: []), *flags)
        task = tasks.task("mock/transfer/5")
        tools = tool_schemas(tasks, task.id)
        assert system_prompt(tasks, task.id, "json") == system_text(task.policy, tools, tool_format="json")
        expected_start = [{"role": "system", "content": system_text(task.policy, tools, tool_format="json")},
                          *demonstration_turns(demonstrations_for(tools)),  # model.few_shot: SmolLM2's default
                          {"role": "user", "content": task.user.opening_message}]
    oracle = eval_records(tmp_path, "oracle", *mock)
    by_task = {r.task_id: r for r in solved}
    assert sorted(by_task) == ["mock/transfer/20", "mock/transfer/5"] and len(idle) == 2
    assert all(r.reward == 1.0 and r.outcome == "success" for r in solved)
    assert all(r.reward == 0.0 and r.outcome == "failure" for r in idle)
    keys = ("outcome", "reward", "grade")  # the same verdict as stage=eval's reference on the same task
    assert [by_task["mock/transfer/20"].to_dict()[k] for k in keys] == [oracle["mock/transfer/20"].to_dict()[k] for k in keys]
    assert expected_start in [r["messages"] for r in requests]  # tbx's system text, worked calls, then the opening
    # the malformed call, as the episode loop handles a tbx policy's: a parse error in the transcript, counted,
    # shown to the agent as its next turn's tool response, no user turn in between; its next call is played
    record = by_task["mock/transfer/5"]
    assert record.counts["malformed_calls"] == 1 and record.counts["tool_calls"] == 2
    roles = [(m.role, m.name) for m in record.transcript]
    error = record.transcript[roles.index(("tool", "parse_error"))]
    assert error.is_error and error.content == f"Error: could not parse this tool call: {MALFORMED}"
    assert roles[roles.index(("tool", "parse_error")) - 1][0] == "assistant"
    assert roles[roles.index(("tool", "parse_error")) + 1][0] == "assistant"
    answered = [r["messages"][-1]["content"] for r in requests
                if any(m["content"] == MALFORMED for m in r["messages"] if m["role"] == "assistant")]
    assert answered[0] == f"<tool_response>\nError: could not parse this tool call: {MALFORMED}\n</tool_response>"
