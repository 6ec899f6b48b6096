"""tbx.envs.trl, driven as GRPOTrainer drives an environment: `reset(**row)`, the tool methods called with the
model's arguments as keywords, the schema rendered by transformers from the methods, and the reward
function over the completions and environments. Real episodes (SQLite clones, the scripted user, the grader).
The training run itself: test_trl_train.py."""

import asyncio
import threading

import pytest

from tbx.envs.episodes import TaskSet
from tbx.policies.reference import DONE
from tests.envs import SAMPLE, eval_records, overrides, play_reference, same_verdict

pytest.importorskip("trl", reason="trl is not installed here: scripts/setup_envs.sh builds .venv-envs with it")
pytestmark = pytest.mark.envs

from tbx.envs import trl as tbx_trl  # noqa: E402


def say(text):
    return [{"role": "assistant", "content": text}]


def score(environments, completions):
    return asyncio.run(tbx_trl.reward(completions=completions, environments=environments))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trl")
    tasks = tbx_trl.load(*overrides(tmp), *SAMPLE)
    yield tasks, tmp
    tasks.close()


def test_the_reference_scores_1_and_the_null_agent_0_with_stage_eval_s_verdicts(sample):
    tasks, tmp = sample
    oracle, null = eval_records(tmp, "oracle", *SAMPLE), eval_records(tmp, "null_agent", *SAMPLE)
    environment = tbx_trl.environment_factory(tasks)()
    for row in tbx_trl.rows(tasks):
        task = tasks.task(row["task_id"])
        assert environment.reset(**row) == task.user.opening_message
        final = play_reference(task, lambda name, args: getattr(environment, name)(**args), environment.reply_to_user)
        assert score([environment], [say(final) if final else [{"role": "tool", "content": "..."}]]) == [1.0]
        same_verdict(environment.episode.result, oracle[task.id])
    environment = tbx_trl.environment_factory(tasks)()
    for row in tbx_trl.rows(tasks):
        environment.reset(**row)
        assert score([environment], [say(DONE)]) == [0.0]
        same_verdict(environment.episode.result, null[row["task_id"]])


def test_rows_and_the_schema_transformers_renders_from_the_methods(sample):
    from transformers.utils import get_json_schema

    tasks, _ = sample
    environment = tbx_trl.environment_factory(tasks)()
    row = tbx_trl.rows(tasks)[0]
    assert row["prompt"][0] == {"role": "system", "content": tasks.task(row["task_id"]).policy}
    assert "environment" not in row  # one domain: one environment class
    schema = get_json_schema(environment.verify_identity)["function"]
    assert schema["name"] == "verify_identity"
    assert schema["parameters"]["properties"]["employee_id"] == {"type": "integer",
                                                                 "description": "The employee's numeric ID."}
    assert schema["parameters"]["required"] == ["employee_id"]
    assert "text" in get_json_schema(environment.reply_to_user)["function"]["parameters"]["properties"]


def test_few_shot_rows_hold_tbx_s_worked_calls_in_the_form_trl_parses(sample):
    """`few_shot` (the example's `model.few_shot`): tbx's demonstrations of the task's first tools go between the
    policy and the user's turn, each call written as TRL's parser reads a model's call back."""
    from trl.chat_template_utils import parse_response

    from examples.trl_grpo import tokenizer_with_tools
    from tbx.messages import ToolSchema
    from tbx.policies.hf_model import model_directory
    from tbx.policies.prompting import demonstrations_for
    from tbx.serve.server import domain_tools

    tasks, _ = sample
    tokenizer = tokenizer_with_tools(str(model_directory(tasks.cfg.model)[0]))
    plain, few = tbx_trl.dataset(tasks)[0], tbx_trl.dataset(tasks, few_shot=True)[0]
    task = tasks.task(few["task_id"])
    listed = tasks.loop.run(domain_tools(task.domain, tasks.tools(task.id)))
    demos = demonstrations_for([ToolSchema(t.name, t.description or "", t.input_schema) for t in listed])
    assert len(demos) == 2 and plain["prompt"] == [few["prompt"][0], few["prompt"][-1]]
    turns = few["prompt"][1:-1]
    assert [m["role"] for m in turns] == ["user", "assistant"] * len(demos)
    assert all(set(m) == {"role", "content"} for m in few["prompt"])  # no column null-filled into a message
    for demo, request, call in zip(demos, turns[::2], turns[1::2], strict=True):
        assert request["content"] == demo.request
        ids, prefix = tokenizer.encode(call["content"] + "<|im_end|>"), tokenizer.encode("<|im_start|>assistant\n")
        (parsed,) = parse_response(tokenizer, ids, prefix=prefix)["tool_calls"]
        assert parsed["function"] == {"name": demo.call.name, "arguments": demo.call.arguments}


@pytest.mark.parametrize("tool_format", ["json", "compact"])
def test_tool_format_rows_give_trl_the_prompt_tbx_s_eval_renders(sample, tool_format):
    """`tool_format` (the example's `--tool-format`): the prompt TRL renders, with the environment's methods as its
    tools, is the text tbx's `stage=eval` renders for the model (its tools plus `reply_to_user`, the same worked
    calls); TRL still parses the model's call and writes tool results as tbx does, prefix-preserving."""
    import inspect

    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response

    from examples.trl_grpo import tokenizer_with_tools
    from tbx.messages import Message, ToolCall
    from tbx.policies.hf_model import load_tokenizer, model_directory
    from tbx.policies.prompting import build_chat, demonstrations_for, render_prompt

    tasks, _ = sample
    directory = str(model_directory(tasks.cfg.model)[0])
    tokenizer = tokenizer_with_tools(directory, tool_format)
    environment_class = tbx_trl.environment_factory(tasks)
    environment = environment_class()
    methods = [getattr(environment, name) for name, _ in inspect.getmembers(environment_class, inspect.isfunction)
               if not name.startswith("_") and name != "reset"]  # the tools TRL gives the template
    row = tbx_trl.rows(tasks, few_shot=True, tool_format=tool_format)[0]
    opening = environment.reset(**row)
    call = ToolCall("verify_identity", {"employee_id": 7})
    rollout = [{"role": "user", "content": opening},
               {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                   "name": call.name, "arguments": call.arguments}}]},
               {"role": "tool", "name": call.name, "content": "Error: no employee 7"}]
    trl_text = tokenizer.apply_chat_template(row["prompt"][:-1] + rollout, tools=methods, tokenize=False,
                                             add_generation_prompt=True)
    task, schemas = tasks.task(row["task_id"]), tbx_trl.tool_schemas(tasks, row["task_id"])
    messages = [Message("system", task.policy), Message("user", opening), Message("assistant", "", (call,)),
                Message("tool", "Error: no employee 7", is_error=True)]
    chat = build_chat(messages, [*schemas, tbx_trl._REPLY_SCHEMA], demonstrations_for(schemas), tool_format=tool_format)
    assert trl_text == render_prompt(load_tokenizer(directory), chat)
    assert "reply_to_user" in row["prompt"][0]["content"] and "# Tools" not in trl_text  # TRL's own list left out
    assert is_chat_template_prefix_preserving(tokenizer)
    written = '<tool_call>\n{"name": "verify_identity", "arguments": {"employee_id": 7}}\n</tool_call><|im_end|>'
    prefix = tokenizer.encode("<|im_start|>assistant\n")
    (parsed,) = parse_response(tokenizer, tokenizer.encode(written), prefix=prefix)["tool_calls"]
    assert parsed["function"] == {"name": "verify_identity", "arguments": {"employee_id": 7}}


def test_several_domains_give_a_factory_per_domain_and_rows_that_name_it(tmp_path):
    with tbx_trl.load(*overrides(tmp_path), "tasks=sample") as tasks:
        factories = tbx_trl.environment_factory(tasks)
        assert set(factories) == {tasks.task(t).domain for t in tasks.task_ids}
        assert all(row["environment"] == tasks.task(row["task_id"]).domain for row in tbx_trl.rows(tasks))
        travel = factories["travel"]()
        assert hasattr(travel, "verify_identity") and not hasattr(travel, "find_order")


def test_a_hostile_call_gets_the_tool_error_mcp_gives(tmp_path):
    import mcp

    from tbx.serve.server import episode_server
    from tests.serve.sessions import serve_one

    calls = [("get_account", {"account_id": "1; DROP TABLE accounts"}), ("get_account", {"account_id": 1, "sql": "x"}),
             ("transfer", {"from_account": 1}), ("transfer", {"from_account": 1, "to_account": 2, "amount": -5}),
             ("set_nickname", {"account_id": 999, "nickname": "'); DELETE FROM accounts; --"})]
    with tbx_trl.load(*overrides(tmp_path), "tasks=mock") as tasks:
        environment = tbx_trl.environment_factory(tasks)()
        environment.reset(task_id=tasks.task_ids[0])
        through_trl = [getattr(environment, name)(**args) for name, args in calls]
        runtime = tasks.run.runtimes[tasks.task_ids[0]]

        async def client_script(client: mcp.Client):
            await client.call_tool("get_user_message", {})
            return [(await client.call_tool(name, args)).content[0].text for name, args in calls]

        over_mcp, _, _ = asyncio.run(serve_one(runtime, tasks.run.backend, client_script))
        assert episode_server  # the same server stage=serve runs
    assert through_trl == over_mcp
    assert all(text.startswith("Error:") for text in through_trl), through_trl


def test_two_episodes_at_once_each_see_only_their_own_database(tmp_path):
    with tbx_trl.load(*overrides(tmp_path), "tasks=mock") as tasks:
        task_id = tasks.task_ids[0]  # send $5 from account 1 to account 2
        first, second = tbx_trl.environment_factory(tasks)(), tbx_trl.environment_factory(tasks)()
        first.reset(task_id=task_id)
        second.reset(task_id=task_id)
        balances = []
        barrier = threading.Barrier(2)

        def play(environment, transfer):
            barrier.wait()
            if transfer:
                environment.transfer(from_account=1, to_account=2, amount=5)
            balances.append((transfer, environment.get_account(account_id=1)))

        threads = [threading.Thread(target=play, args=(env, move)) for env, move in ((first, True), (second, False))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert dict(balances)[True].count('"balance": 95') == 1 and dict(balances)[False].count('"balance": 100') == 1
        assert first.episode.attempt != second.episode.attempt
        rewards = score([first, second], [say(DONE), say(DONE)])
    assert rewards[1] == 0.0 and first.episode.result.final_delta != second.episode.result.final_delta


def test_an_injected_harness_fault_is_none_never_a_0_and_stored_as_an_error(tmp_path):
    with tbx_trl.load(*overrides(tmp_path), "tasks=mock", "faults=chaos", "faults.tool=1.0",
                      "faults.db=0", "faults.user=0", "faults.judge=0", "faults.hang=0") as tasks:
        environment = tbx_trl.environment_factory(tasks)()
        environment.reset(task_id=tasks.task_ids[0])
        answer = environment.get_account(account_id=1)
        assert "harness fault (infra_error)" in answer
        assert score([environment], [say(DONE)]) == [None]
        run_dir = tasks.run_dir
    from tbx.store.results import read_records

    (record,) = read_records(run_dir)
    assert (record.outcome, record.reward, record.extra["policy"]) == ("infra_error", None, "trl")


def test_a_rollout_that_ends_before_the_user_did_is_graded_as_it_stands(tmp_path):
    with tbx_trl.load(*overrides(tmp_path), "tasks=mock") as tasks:
        task = tasks.task(tasks.task_ids[0])
        environment = tbx_trl.environment_factory(tasks)()
        environment.reset(task_id=task.id)
        for step in task.reference:
            if step.tool is not None:
                getattr(environment, step.tool)(**step.arguments)
        # the work is done, but the last message is a tool result: nothing to deliver to the user
        assert score([environment], [[{"role": "tool", "content": "{}"}]]) == [1.0]
        result = environment.episode.result
    assert result.ended_by == "rollout_end" and "trl rollout ended" in result.cause


def test_stored_like_any_run_with_the_consumer_as_the_agent(tmp_path):
    with tbx_trl.load(*overrides(tmp_path), "tasks=mock") as tasks:
        environment = tbx_trl.environment_factory(tasks)()
        for row in tbx_trl.rows(tasks):
            environment.reset(**row)
            score([environment], [say(DONE)])
        run_dir = tasks.run_dir
    assert run_dir.name.startswith("serve-mock-trl-")
    again = TaskSet.load("trl", *overrides(tmp_path), "tasks=mock")  # the same run, its attempts numbered on
    try:
        assert again.run_dir == run_dir and again.open(again.task_ids[0]).attempt == 1
    finally:
        again.close()
