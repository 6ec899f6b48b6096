"""τ²'s verdict on an episode, computed as τ²'s evaluator computes it, and τ²'s evaluator itself.

τ² (airline, retail: `reward_basis` DB and COMMUNICATE) gives 1 when the terminal database hashes like
the database its gold actions leave (sha256 of the sorted JSON dump) and every `communicate_info`
string is in some assistant message (lowercased, commas removed), and 0 when the conversation did not
end with a stop (τ²'s step limit, an agent that broke off).

`grade` gets the same verdict without building and hashing three databases: the gold actions are
played once per task (`gold_state`) and what they reached is kept as record texts; the terminal
database equals the gold one exactly when every record the agent's writes or the gold's reached has
the same text (every other record is `db.json`'s in both). The communicate check is τ²'s own function.
A failing database check carries the records that differ as pseudo-rows (a record's fields flattened
to `path: value` columns), so a 0 explains itself in the viewer. `evaluate_transcript` runs τ²'s
full evaluator (transcript replay on new environments) for `stage=regrade` and the parity tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tbx.backend.state import State, canonical
from tbx.messages import Message
from tbx.records import CheckResult, Grade
from tbx.tau2.environment import Tau2Domain, call_tool, collections, entry_json

STOPPED = ("user_stop",)  # tbx's endings τ² grades; every other ending scores 0, as τ²'s max_steps does
DB_CHECK, COMMUNICATE_CHECK, ENDING_CHECK = "tau2 database", "tau2 communicate_info", "tau2 ending"


@dataclass(frozen=True)
class GoldState:
    """What τ²'s gold actions leave, as record texts: collection -> record key -> text (None: absent)."""

    records: dict[str, dict[Any, str | None]]
    whole: frozenset[str]  # collections a gold write walked whole (all their records are in `records`)


def gold_state(domain: Tau2Domain, record: Any) -> GoldState:
    """Play the gold actions (errors ignored, as τ²'s evaluator does) on an environment and keep what they reached."""
    environment = domain.acquire()
    try:
        for index, action in enumerate(record.evaluation_criteria.actions or ()):
            call_tool(environment, action.name, dict(action.arguments), f"gold_{index}")
        kept: dict[str, dict[Any, str | None]] = {}
        whole = set()
        for name, records in collections(environment).items():
            keys = list(dict.keys(records)) if records.whole else records.keys_reached
            if records.whole:
                whole.add(name)
            kept[name] = {key: entry_json(dict.get(records, key)) for key in keys}
        return GoldState(kept, frozenset(whole))
    finally:
        domain.release(environment)


def differing_records(domain: Tau2Domain, environment: Any, gold: GoldState) -> list[tuple[str, Any, str | None, str | None]]:
    """(collection, key, terminal text, gold text) of every record whose terminal text is not the gold's."""
    differ = []
    for name, records in collections(environment).items():
        expected = gold.records.get(name, {})
        if records.whole or name in gold.whole:
            keys = set(domain.document[name]) | set(dict.keys(records)) | set(expected)
        else:
            keys = set(records.keys_reached) | set(expected)
        for key in sorted(keys, key=str):
            terminal = entry_json(dict.get(records, key))
            wanted = expected[key] if key in expected else domain.initial_json(name, key)
            if terminal != wanted:
                differ.append((name, key, terminal, wanted))
    return differ


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{index}]"))
        return out or {prefix: "[]"}
    return {prefix: canonical(value)}


def pseudo_rows(records: Sequence[tuple[str, Any, str | None]]) -> State:
    """Records as the rows of a state: a table per collection, a row per record (`id` its key, a column per
    flattened field path), so the diff and the viewer show a τ² record like a database row."""
    state: State = {}
    for name, key, text in records:
        table = state.setdefault(name, {"pk": ["id"], "rows": []})
        if text is not None:
            table["rows"].append({"id": str(key)} | _flatten(json.loads(text)))
    return state


def _pseudo_row(key: Any, text: str | None) -> dict[str, Any] | None:
    return None if text is None else {"id": str(key)} | _flatten(json.loads(text))


def _explained(domain: Tau2Domain, name: str, key: Any, terminal: str | None, wanted: str | None) -> dict[str, Any]:
    """A record that differs from the gold, as the viewer shows a row: before (db.json's), after (terminal) and
    expected (the gold actions') per flattened field; `columns`: the fields the episode changed."""
    before, after = _pseudo_row(key, domain.initial_json(name, key)), _pseudo_row(key, terminal)
    op = ("insert" if before is None else "delete" if after is None
          else "update" if before != after else "unchanged (terminal = before)")
    fields = set(before or {}) | set(after or {})
    changed = [c for c in sorted(fields) if (before or {}).get(c) != (after or {}).get(c)]
    return {"op": op, "table": name, "key": {"id": str(key)}, "before": before, "after": after, "columns": changed,
            "expected": _pseudo_row(key, wanted) or {}}


def communicate_checks(record: Any, transcript: Sequence[Message]) -> list[Any]:
    """τ²'s own communicate_info check over the transcript's assistant text."""
    from tau2.data_model.message import AssistantMessage
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    info = record.evaluation_criteria.communicate_info or []
    said = [AssistantMessage(role="assistant", content=m.content) for m in transcript
            if m.role == "assistant" and m.content.strip()]
    return CommunicateEvaluator.evaluate_communicate_info(said, info)


def grade(domain: Tau2Domain, record: Any, gold: GoldState, environment: Any, transcript: Sequence[Message],
          ended_by: str) -> Grade:
    """τ²'s verdict on the episode that left `environment`, with a check per part of τ²'s reward."""
    checks = []
    if ended_by not in STOPPED:
        checks.append(CheckResult(ENDING_CHECK, False, f"the conversation ended by {ended_by}, not by a stop "
                                  "(τ² scores such an episode 0)"))
    differ = differing_records(domain, environment, gold)
    rows = tuple(_explained(domain, name, key, terminal, wanted) for name, key, terminal, wanted in differ)
    detail = "the terminal database equals the gold actions' database" if not differ else (
        f"{len(differ)} record(s) differ from the gold actions' database: "
        + ", ".join(f"{name}[{key}]" for name, key, _, _ in differ[:5]))
    checks.append(CheckResult(DB_CHECK, not differ, detail, rows))
    said = communicate_checks(record, transcript)
    missing = [check.info for check in said if not check.met]
    checks.append(CheckResult(COMMUNICATE_CHECK, not missing, "every communicate_info string was said" if not missing
                              else f"not said to the user: {missing}"))
    return Grade(passed=all(check.passed for check in checks), checks=tuple(checks))


def to_tau2_messages(transcript: Sequence[Message]) -> list[Any]:
    """tbx's transcript as τ²'s message records (the system prompt and unparsed calls' notes left out)."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    out: list[Any] = []
    open_calls: set[str] = set()
    for message in transcript:
        if message.role == "assistant":
            calls = [ToolCall(id=c.id, name=c.name, arguments=dict(c.arguments)) for c in message.tool_calls]
            open_calls = {c.id for c in calls}
            out.append(AssistantMessage(role="assistant", content=message.content or None, tool_calls=calls or None))
        elif message.role == "tool" and message.tool_call_id in open_calls:
            out.append(ToolMessage(id=message.tool_call_id, role="tool", content=message.content,
                                   requestor="assistant", error=message.is_error))
        elif message.role == "user":
            out.append(UserMessage(role="user", content=message.content))
    return out


def evaluate_transcript(record: Any, domain_name: str, transcript: Sequence[Message], ended_by: str) -> float:
    """τ²'s own reward for the transcript: its environment evaluator (the transcript's tool calls replayed on a
    new environment, the gold actions on another, their hashes compared) times its communicate evaluator,
    over the task's reward basis; 0 when the conversation did not end with a stop."""
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    from tbx.tau2.package import tau2_domain_module

    if ended_by not in STOPPED:
        return 0.0
    messages = to_tau2_messages(transcript)
    module = tau2_domain_module(domain_name)
    environment = EnvironmentEvaluator.calculate_reward(module.get_environment, record, messages)
    communicate = CommunicateEvaluator.calculate_reward(record, messages)
    reward = 1.0
    for basis in record.evaluation_criteria.reward_basis:
        if basis in (RewardType.DB, RewardType.ENV_ASSERTION):
            reward *= environment.reward_breakdown.get(basis, 1.0)
        elif basis == RewardType.COMMUNICATE:
            reward *= communicate.reward
        else:
            raise ValueError(f"τ² reward basis {basis} is not graded by tbx (airline and retail use DB, COMMUNICATE)")
    return reward


def regrade_transcript(task_json: dict[str, Any], stored: Any) -> float:
    """τ²'s reward for a stored episode (`stage=regrade`), from the τ² record the run played (tasks.jsonl)."""
    from tau2.data_model.tasks import Task as Tau2Task

    from tbx.tau2 import SOURCES

    record = Tau2Task.model_validate(task_json["tau2"])
    return evaluate_transcript(record, SOURCES[stored.domain], stored.transcript, stored.ended_by)
