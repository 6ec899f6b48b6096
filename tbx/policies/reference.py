"""Reference policies: `oracle` plays the task's reference solution, `null` does nothing and
says it is done, `replay` plays recorded assistant turns from a file.

They exist to validate tasks (the oracle must pass, the null agent must fail) and to re-run
transcripts; they are not agents under test, which is why they may read the task.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tbx.errors import ConfigError, InfraError
from tbx.messages import AssistantTurn, Message, ToolCall, ToolSchema
from tbx.policies.base import Agent, EpisodeContext, Policy, PolicySetup
from tbx.tasks.model import Step

DONE = "I have taken care of your request. Everything is done."


class ScriptAgent(Agent):
    """Plays a fixed list of assistant turns, then reports done."""

    def __init__(self, turns: Sequence[AssistantTurn]):
        self.turns = list(turns)
        self.position = 0

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        if self.position >= len(self.turns):
            return AssistantTurn(content=DONE)
        turn = self.turns[self.position]
        self.position += 1
        return turn


def turns_from_steps(steps: Sequence[Step]) -> list[AssistantTurn]:
    turns = []
    for i, step in enumerate(steps):
        if step.tool is not None:
            turns.append(AssistantTurn(tool_calls=(ToolCall(step.tool, dict(step.arguments), f"call_{i}"),)))
        else:
            turns.append(AssistantTurn(content=step.say or ""))
    return turns


class OraclePolicy(Policy):
    name = "oracle"
    is_reference = True

    @classmethod
    def from_config(cls, setup: PolicySetup) -> OraclePolicy:
        return cls()

    def agent(self, context: EpisodeContext) -> Agent:
        return ScriptAgent(turns_from_steps(context.task.reference))


class NullPolicy(Policy):
    name = "null"
    is_reference = True

    @classmethod
    def from_config(cls, setup: PolicySetup) -> NullPolicy:
        return cls()

    def agent(self, context: EpisodeContext) -> Agent:
        return ScriptAgent([AssistantTurn(content=DONE)])


def _turns_from_record(record: dict, source: str) -> list[AssistantTurn]:
    """The agent's turns of a JSONL record: its `steps`, or the assistant messages of its `transcript`."""
    if "steps" in record:
        return turns_from_steps([Step(tool=s.get("tool"), arguments=s.get("arguments") or {}, say=s.get("say"))
                                 for s in record["steps"]])
    if "transcript" in record:
        return _assistant_turns(Message.from_dict(m) for m in record["transcript"] if m.get("role") == "assistant")
    raise ConfigError(source, "policy.path", "a record has neither 'steps' nor 'transcript'",
                      "give a run folder of an earlier run or JSONL records {task_id:, steps: [...]}")


def _assistant_turns(messages: Iterable[Message]) -> list[AssistantTurn]:
    return [AssistantTurn(content=m.content, tool_calls=m.tool_calls) for m in messages if m.role == "assistant"]


def _replayed(path: str) -> list[tuple[str, int | None, list[AssistantTurn]]]:
    """(task id, attempt or None, the agent's turns) of every record: each stored try of a run folder or
    results.sqlite, or each line of a JSONL file."""
    file = Path(path)
    if file.is_dir() or file.suffix == ".sqlite":
        from tbx.store.results import read_records

        try:
            tries = read_records(file)
        except InfraError as exc:
            raise ConfigError(path, "policy.path", str(exc), "give a run folder with results.sqlite") from exc
        return [(t.task_id, t.attempt, _assistant_turns(t.transcript)) for t in tries]
    if not file.is_file():
        raise ConfigError(path, "policy.path", "no such file", "give a run folder, results.sqlite or a JSONL file")
    replayed = []
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}", "policy.path", f"not JSON ({exc.msg})",
                              "one JSON object per line") from exc
        if "task_id" not in record:
            raise ConfigError(f"{path}:{number}", "task_id", "missing", "each record names its task_id")
        replayed.append((record["task_id"], record.get("attempt"), _turns_from_record(record, f"{path}:{number}")))
    return replayed


class ReplayPolicy(Policy):
    """Plays turns recorded per task id (attempt-specific when the file has several attempts)."""

    name = "replay"
    is_reference = True

    def __init__(self, path: str):
        self.source = path
        self.turns: dict[tuple[str, int | None], list[AssistantTurn]] = {}
        for task_id, attempt, turns in _replayed(path):
            self.turns[(task_id, attempt)] = turns
            self.turns.setdefault((task_id, None), turns)

    @classmethod
    def from_config(cls, setup: PolicySetup) -> ReplayPolicy:
        if not setup.policy.path:
            raise ConfigError("conf/policy/replay.yaml", "policy.path", "is empty", "give policy.path=FILE")
        return cls(setup.policy.path)

    def agent(self, context: EpisodeContext) -> Agent:
        turns = self.turns.get((context.task.id, context.attempt)) or self.turns.get((context.task.id, None))
        return ScriptAgent(turns or [AssistantTurn(content=DONE)])
