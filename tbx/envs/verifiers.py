"""verifiers (0.4, its `verifiers.v1` stack): tbx tasks as a verifiers taskset and environment.

The installable package `envs/verifiers` (distribution `tbx-tasks`, module `tbx_tasks`) exports these
classes, so verifiers loads them by name: `vf-eval tbx-tasks ...` evaluates, and verifiers-based
trainers take the same id. Its config: `--env.taskset.overrides` (a tbx task set as on the command line,
e.g. `'["tasks=travel", "tasks.per_family=1"]'`) and `--env.taskset.tool_format` (null: text actions, below;
"json" | "compact": tbx's own prompt and call format, as `tbx.envs.trl`'s `tool_format`).

What maps to what:
- task -> a verifiers task per tbx task (`id` = the tbx task id); its system prompt is the task's policy
  and the domain's tools as JSON schemas, with how to call them.
- the episode -> `TbxEnv.run`: a tbx episode (its own database clone); the user's opening is the first
  user turn, each agent reply is one tbx turn: a JSON object `{"tool": NAME, "arguments": {...}}` calls
  that tool (the answer comes back as the next user turn), any other reply is said to the simulated user
  (its answer is the next user turn), until the user ends the conversation or the agent's turns run out
  (`rollout_end`, the state graded). Tools travel as text actions, as in verifiers' own OpenEnv and
  TextArena tasksets: no toolset server is started (the chat harness's MCP tools are not used).
- `tool_format` "json" | "compact": the system prompt is the one tbx's `stage=eval` gives a local model (the
  policy, tbx's call instruction, the tools rendered in that format), its worked tool calls (`model.few_shot`
  of the task set's config) come before the user's opening, and each reply is read by tbx's own parser
  (`tbx.llm.parsing`) and played as the episode loop plays a tbx policy's turn: its `<tool_call>` blocks call
  the tools, an attempt the parser cannot read is answered with tbx's parse error (no user turn), a reply
  without calls is said to the user. The answer comes back as tbx renders it (`<tool_response>` blocks).
- verdict -> the reward `tbx_verdict` (1.0 / 0.0) on the agent's trace, the outcome in `trace.info`;
  a harness error (database, tools, user simulator, judge) or an excluded verdict raises, so verifiers
  marks the episode failed (retried under `--env.retries`, never scored), never a 0.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarness

from tbx.envs.episodes import Episode, TaskSet
from tbx.envs.trl import tool_schemas
from tbx.llm.parsing import parse_assistant_text
from tbx.messages import AssistantTurn
from tbx.policies.prompting import (
    ChatMessage,
    ToolFormat,
    conversation_turns,
    demonstration_turns,
    demonstrations_for,
    system_text,
)
from tbx.serve.episode import Reply

CONSUMER = "verifiers"
SAMPLE = ["tasks=travel", "tasks.per_family=1"]
ACTIONS = """

## How to act
Each of your replies is one action. To call a tool, reply with one JSON object and nothing else:
{"tool": "<tool name>", "arguments": {<the tool's arguments>}}
The tool's answer comes back as the next message. Any other reply is a message to the user, whose answer
comes back as the next message.

## Tools (JSON schemas)
"""

_loaded: dict[tuple[str, ...], TaskSet] = {}
_lock = threading.Lock()


def task_set(overrides: list[str] | tuple[str, ...]) -> TaskSet:
    """The tbx task set of `overrides`, loaded once per process (closed by `TbxEnv.stop`)."""
    key = tuple(overrides)
    with _lock:
        if key not in _loaded:
            _loaded[key] = TaskSet.load(CONSUMER, *key)
        return _loaded[key]


class TbxTasksetConfig(vf.TasksetConfig):
    overrides: list[str] = list(SAMPLE)
    """The tbx task set, as on tbx's command line (`store.url=...` and the rest go here too)."""
    tool_format: ToolFormat | None = None
    """null: the tools as JSON schemas and text actions; "json" | "compact": tbx's own prompt and call format."""


class TbxData(vf.TaskData):
    task_id: str
    overrides: list[str]
    tool_format: ToolFormat | None = None


class TbxTask(vf.Task[TbxData]):
    pass


class TbxTaskset(vf.Taskset[TbxTask, TbxTasksetConfig]):
    def load(self) -> Iterator[TbxTask]:
        tasks = task_set(self.config.overrides)
        tool_format = self.config.tool_format
        for task_id in tasks.task_ids:
            data = TbxData(id=task_id, name=task_id, prompt=None, system_prompt=system_prompt(tasks, task_id, tool_format),
                           task_id=task_id, overrides=list(self.config.overrides), tool_format=tool_format)
            yield TbxTask(data, self.config.task)


def system_prompt(tasks: TaskSet, task_id: str, tool_format: ToolFormat | None = None) -> str:
    """The task's policy and its tools: as JSON schemas with the text actions, or tbx's own system text."""
    policy, tools = tasks.task(task_id).policy, tool_schemas(tasks, task_id)
    if tool_format is not None:
        return system_text(policy, tools, tool_format=tool_format)
    return policy + ACTIONS + "\n".join(json.dumps({"name": t.name, "description": t.description,
                                                     "parameters": t.parameters}) for t in tools)


def opening_turn(tasks: TaskSet, task_id: str, opening: str, tool_format: ToolFormat | None) -> str | list[ChatMessage]:
    """The first user turn: the user's opening, after tbx's worked tool calls under tbx's format with `model.few_shot`."""
    if tool_format is None or not tasks.cfg.model.few_shot:
        return opening
    return [*demonstration_turns(demonstrations_for(tool_schemas(tasks, task_id))), {"role": "user", "content": opening}]


def parse_action(text: str) -> tuple[str, dict] | None:
    """`(tool, arguments)` when the reply is a tool call, else None (a message to the user)."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```"):
        body = "\n".join(body.splitlines()[1:-1]).strip()
    try:
        action = json.loads(body)
    except ValueError:
        return None
    if not (isinstance(action, dict) and isinstance(action.get("tool"), str)):
        return None
    arguments = action.get("arguments", {})
    return action["tool"], arguments if isinstance(arguments, dict) else {"arguments": arguments}


async def act(episode: Episode, text: str, tool_format: ToolFormat | None = None) -> str:
    """Play one reply of the agent; what answers it (the next user turn)."""
    if tool_format is not None:
        parsed = parse_assistant_text(text)  # tbx's reader of a model's output, as its policies read theirs
        answer = await episode.aturn(AssistantTurn(parsed.content, parsed.tool_calls, malformed=parsed.malformed))
        return "\n\n".join(turn["content"] for turn in conversation_turns(answer))
    call = parse_action(text)
    reply: Reply = await (episode.areply(text) if call is None else episode.acall_tool(*call))
    return reply.text


class TbxEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class TbxEnv(vf.Env[TbxEnvConfig]):
    async def run(self, task: TbxTask, agents: vf.Agents) -> None:
        tasks = task_set(task.data.overrides)
        episode = await tasks.aopen(task.data.task_id)
        tool_format = task.data.tool_format
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn(opening_turn(tasks, task.data.task_id, episode.opening, tool_format))
            while not segment.terminated and not episode.over:
                answer = await act(episode, segment.last_reply, tool_format)
                if episode.over:
                    break
                segment = await interaction.turn(answer)
        result = await episode.afinish()
        trace = interaction.trace
        trace.info |= {"tbx_outcome": result.outcome.value, "tbx_attempt": episode.attempt,
                       "tbx_ended_by": result.ended_by}
        if result.reward is None:  # a harness error or an excluded verdict: the episode failed, not the agent
            raise RuntimeError(f"tbx episode {result.task_id}#{result.attempt} has no verdict "
                               f"({result.outcome.value}): {result.cause}")
        trace.record_reward("tbx_verdict", result.reward)
        trace.record_metric("tbx_turns", float(result.counts.get("turns", 0)))

    async def stop(self) -> None:
        with _lock:
            for tasks in _loaded.values():
                tasks.close()
            _loaded.clear()


class TbxHarness(NullHarness):
    """The harness of `tbx-tasks` by default: verifiers' tool-less chat loop (no code execution)."""
