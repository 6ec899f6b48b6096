"""Leak scans: what an agent sees never holds the task's checks, its reference solution, the user's
hidden scenario, or a private fact before the user or a tool gave it.

Real campaigns are run and every stored transcript is scanned with `tbx.grading.audit` (the scanner users
run over their own run folders): the oracle with the scripted user on the benchmark sample (one
task per family), and an LLM agent with the LLM user, both played over real HTTP by scripted
servers (`tests/fakes/openai_server.py`), where the requests the agent's server received (system
prompt, messages, tool schemas: the agent's whole context) are scanned too. Planted leaks of every
kind, in real runs and in hand-made transcripts, must be found, and only they.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tbx.config import UserConfig
from tbx.domains import get_domain
from tbx.episodes.seeds import episode_seed
from tbx.grading.audit import audit_records, audit_run, scan_context, task_secrets
from tbx.messages import Message
from tbx.users.base import STOP, UserSession, UserSimulator, UserTurn
from tests.fakes.responding import RespondingServer, agent_responder, llm_overrides, user_reply
from tests.helpers.stage import make_cfg, run
from tests.store.records import stored

SAMPLE_TASKS = 50  # tasks=sample: one benchmark task per family over the 5 domains
LLM_DOMAINS = ("travel", "neobank")  # over HTTP: tasks of one family that open alike; facts named like card_last4
LLM_TASKS = 19  # their families


def tasks_as_run(run_dir: str | Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "tasks.jsonl").read_text().splitlines() if line]


# --- real campaigns ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):  # one folder: the campaigns share their task templates
    return tmp_path_factory.mktemp("leaks")


def test_oracle_and_scripted_user_on_the_sample_leak_nothing(workdir):
    summary = run(make_cfg(workdir, "stage=eval", "tasks=sample", "policy=oracle", "user=scripted"))
    assert summary.n_tasks == SAMPLE_TASKS and summary.pass_at_1 == 1.0
    report = audit_run(summary.run_dir)
    print(report.summary())
    assert report.transcripts == SAMPLE_TASKS and report.schema_sets == SAMPLE_TASKS
    assert report.messages > 6 * SAMPLE_TASKS  # system, opening, tool results, user replies
    assert report.leaks == ()


def test_llm_agent_and_llm_user_over_http_leak_nothing(workdir):
    from tbx.catalog import resolve_tasks

    two_domains = ["tasks=sample", f"tasks.domains=[{','.join(LLM_DOMAINS)}]"]
    tasks = [t.raw for t in resolve_tasks(make_cfg(workdir, "stage=eval", *two_domains).tasks)]
    with RespondingServer(agent_responder(tasks)) as agent, RespondingServer(user_reply) as user:
        summary = run(make_cfg(workdir, "stage=eval", *two_domains, *llm_overrides(agent.base_url, user.base_url)))
    assert summary.n_tasks == len(tasks) == LLM_TASKS
    assert summary.pass_at_1 == 1.0 and summary.error_tries == 0, summary.counts
    report = audit_run(summary.run_dir)
    assert report.transcripts == LLM_TASKS and report.leaks == (), report.summary()
    # the agent's whole context as it went over the wire: system prompt, messages and tool schemas
    by_seed = {episode_seed(0, e["task"]["id"], 0, 0): e for e in tasks_as_run(summary.run_dir)}
    requests, messages, leaks = agent.chat_requests, 0, []
    for n, request in enumerate(requests):
        entry = by_seed[request.body["seed"]]
        secrets = task_secrets(entry["task"], entry["expected"], get_domain(entry["task"]["domain"]).policy)
        scanned, found = scan_context(secrets, request.body["messages"], json.dumps(request.body["tools"]),
                                      f"request[{n}].messages")
        messages += scanned
        leaks += found
    print(report.summary(), f"\nagent requests: {len(requests)} requests, {messages} messages scanned; "
          f"leaks = {len(leaks)}; user requests: {len(user.chat_requests)}")
    assert len(requests) > 4 * LLM_TASKS and all(r.body["tools"] for r in requests)
    assert len(user.chat_requests) >= LLM_TASKS  # every task's user answered at least once
    assert leaks == []


# --- planted leaks ----------------------------------------------------------------------------------------------

def mock_transfer(task_id: str, **changes) -> dict:
    task = json.loads(json.dumps(get_domain("mock").generate_tasks(0)[0]))
    task["id"] = task_id
    for key, value in changes.items():
        task[key] = value
    return task


POLICY = get_domain("mock").policy
ACCOUNT_UPDATES = {"checks.expected[0]", "checks.expected[1]"}  # both update accounts: the audit names each
PLANTED = {  # task id -> (the leak planted in its system prompt, the labels the audit must report)
    "mock/planted/expected_yaml": (POLICY + "\nGrader notes:\n" + yaml.safe_dump(
        {"expected": [{"op": "update", "table": "accounts", "key": {"id": 1}, "values": {"balance": 95}}]}),
        ACCOUNT_UPDATES),
    "mock/planted/expected_explained": (POLICY + "\nLast time: expected[2] insert transfers: missing: no new row",
                                        {"checks.expected[2]"}),
    "mock/planted/reference_say": (POLICY + "\nStart with: Can you confirm the owner name on the account?",
                                   {"reference[0].say"}),
    "mock/planted/reference_step": (POLICY + '\nPlan: {"tool": "transfer", "arguments": {"amount": 5}}',
                                    {"reference[2].tool"}),
    "mock/planted/private_fact": (POLICY + "\nThe caller is Zephyrine Quist.", {"user.private_facts.owner_name"}),
    "mock/planted/instructions": (POLICY + "\nThe user wants to: Send 5 dollars from account 1 to account 2.",
                                  {"user.instructions"}),
}


def planted_task(task_id: str) -> dict:
    task = mock_transfer(task_id, policy=PLANTED[task_id][0])
    task["user"]["private_facts"] = {"owner_name": {"value": "Zephyrine Quist", "keywords": ["name", "owner"]}}
    return task


def test_planted_leaks_in_a_real_run_are_found_and_nothing_else(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    clean = mock_transfer("mock/planted/clean")  # the control: no leak
    for task in [clean, *(planted_task(task_id) for task_id in PLANTED)]:
        (folder / f"{task['id'].rsplit('/', 1)[1]}.yaml").write_text(yaml.safe_dump(task))
    summary = run(make_cfg(tmp_path, "stage=eval", "tasks=files", f"tasks.path={folder}", "policy=oracle"))
    assert summary.pass_at_1 == 1.0 and summary.n_tasks == len(PLANTED) + 1
    report = audit_run(summary.run_dir)
    found: dict[str, set[str]] = {}
    for leak in report.leaks:
        found.setdefault(leak.task_id, set()).add(leak.label)
        assert leak.where == "transcript[0] system"
    assert found == {task_id: labels for task_id, (_, labels) in PLANTED.items()}, report.summary()


class LeakyUser(UserSimulator):
    """A user simulator that tells the agent its own instructions (the user's hidden goal)."""

    name = "leaky"

    @classmethod
    def from_config(cls, user: UserConfig) -> LeakyUser:
        return cls()

    def session(self, scenario, seed):
        class Session(UserSession):
            def opening(self) -> str:
                return scenario.opening_message

            async def reply(self, conversation) -> UserTurn:
                return UserTurn(f"My brief says: {scenario.instructions} {STOP}", True)

        return Session()


def test_a_user_that_repeats_its_instructions_is_caught(tmp_path):
    summary = run(make_cfg(tmp_path, "stage=eval", "tasks=mock", "policy=oracle",
                           "user._target_=tests.hardening.test_leaks.LeakyUser", "user.name=leaky"))
    report = audit_run(summary.run_dir)
    assert report.transcripts == 3
    assert {(leak.task_id, leak.kind, leak.label) for leak in report.leaks} == {
        (task_id, "user_scenario", "user.instructions")
        for task_id in ("mock/transfer/5", "mock/transfer/20", "mock/nickname/1")}
    assert all(leak.where.endswith(" user") for leak in report.leaks)


JUDGED = mock_transfer("mock/judged", checks={"judge": [
    {"id": "amount", "rule": "The agent told the user the new balance of account 1.", "evidence": ["95"]}]})
TRANSCRIPT = [
    {"role": "system", "content": POLICY},
    {"role": "user", "content": "Please send $5 from my account 1 to account 2."},
    {"role": "assistant", "content": "Can you confirm the owner name on the account?"},  # the agent's own words
    {"role": "user", "content": "My owner name is Ada."},  # the user says the fact: fine
    {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "name": "get_account", "arguments": {}}]},
    {"role": "tool", "content": '{"id": 1, "owner": "Ada", "balance": 100}'},  # a tool returns it: fine
]


@pytest.mark.parametrize(("message", "kind", "labels"), [
    ({"role": "tool", "content": '{"op": "insert", "table": "transfers", "values": {"amount": 5}}'},
     "checks", {"checks.expected[2]"}),
    ({"role": "system", "content": "update accounts {'id': 2} {'balance': 55}"}, "checks", ACCOUNT_UPDATES),
    ({"role": "user", "content": "Rule: the agent told the user the new balance of account 1."},
     "checks", {"checks.judge[0].rule"}),
    ({"role": "tool", "content": "next: Done: the transfer is complete."}, "reference", {"reference[3].say"}),
    ({"role": "system", "content": "steps:\n- tool: get_account\n  arguments: {account_id: 1}"},
     "reference", {"reference[1].tool"}),
    ({"role": "system", "content": "Verify that the owner is ada."}, "private_fact", {"user.private_facts.owner_name"}),
    ({"role": "user", "content": "(persona: Ada, a customer.)"}, None, set()),  # shorter than MIN_TEXT: not audited
    ({"role": "system", "content": "You may update accounts of verified owners."}, None, set()),  # prose, no change
])
def test_a_planted_message_is_found_with_its_kind_and_label(message, kind, labels):
    secrets = task_secrets(JUDGED, get_domain("mock").generate_tasks(0)[0]["checks"]["expected"])
    planted = tuple(Message.from_dict(m) for m in [*TRANSCRIPT, message])
    record = stored("mock/judged", 0, try_index=1, transcript=planted)
    clean = audit_records([replace(record, transcript=planted[:-1])], {"mock/judged": secrets})
    assert clean.leaks == () and clean.messages == 4  # system, opening, user reply, tool result
    report = audit_records([record], {"mock/judged": secrets})
    assert {leak.label for leak in report.leaks} == labels and len(report.leaks) == len(labels)
    assert all(leak.kind == kind and leak.where == f"transcript[6] {message['role']}" and leak.try_index == 1
               for leak in report.leaks)


def test_a_fact_in_the_tool_schemas_is_a_leak_and_a_public_one_is_set_aside():
    secrets = task_secrets(JUDGED, public=POLICY)
    _, found = scan_context(secrets, [], json.dumps([{"name": "get_account", "description": "Owner Ada only."}]))
    assert [(where, kind) for where, kind, _, _ in found] == [("tool schemas", "private_fact")]
    public = task_secrets(JUDGED, public=POLICY + "\nOur test customer is Ada.")
    assert public.public_values == ("Ada",) and public.facts == ()


def test_an_episode_of_an_unknown_task_cannot_pass_the_audit():
    with pytest.raises(KeyError, match="mock/other"):
        audit_records([stored("mock/other", 0)], {"mock/judged": task_secrets(JUDGED)})
