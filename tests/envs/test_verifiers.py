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

from tbx.policies.reference import DONE
from tbx.store.results import read_records
from tests.envs import eval_records, overrides
from tests.fakes.openai_server import FakeOpenAIServer, text_reply

pytest.importorskip("verifiers", reason="verifiers is not installed here: scripts/setup_envs.sh builds .venv-envs")
from tbx.envs.verifiers import parse_action

VF_EVAL = Path(sys.executable).parent / "vf-eval"
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
        task = openings[next(m["content"] for m in messages if m["role"] == "user")]
        done = sum(1 for m in messages if m["role"] == "assistant")
        steps = steps_of(task)
        return text_reply(steps[done] if done < len(steps) else DONE)

    return respond


def reference(task):
    return [json.dumps({"tool": s.tool, "arguments": dict(s.arguments)}) if s.tool else (s.say or "")
            for s in task.reference]


def vf_eval(tmp_path, task_overrides, respond, *flags):
    """`vf-eval tbx-tasks` against the scripted model; the tbx records it stored, and the chat requests."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with FakeOpenAIServer(answer=respond) as model:
        command = [str(VF_EVAL), "tbx-tasks", "-m", "fake-model", "--client.base-url", model.base_url,
                   "--client.api-key-var", "FAKE_KEY", "--no-push", "-o", str(tmp_path / "vf"),
                   "--env.player.runtime.type", "subprocess", "--env.taskset.overrides", json.dumps(task_overrides),
                   *flags]
        env = dict(os.environ, FAKE_KEY="unused", PATH=f"{VF_EVAL.parent}:{os.environ['PATH']}")
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
