"""TRL: tbx tasks as environments of `GRPOTrainer(environment_factory=...)` (trl 1.16).

    from tbx.envs import trl as tbx_trl
    tasks = tbx_trl.load("tasks=train_sample")
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=tbx_trl.dataset(tasks),
                          environment_factory=tbx_trl.environment_factory(tasks), reward_funcs=tbx_trl.reward)

What maps to what:
- task -> dataset row `{"prompt": [system: the task's policy, user: ""], "task_id": ...}` (plus
  `"environment": <domain>` when the set spans several domains: TRL then takes a factory per domain, each
  exposing only its domain's tools). `reset(task_id=...)` opens a new episode (its own database clone)
  and returns the user's opening message, which TRL appends to the empty user message.
- tool -> a public method per domain tool, with the tool's name, parameters, type hints and docstring
  (TRL renders its schema from them). It forwards the arguments as the model wrote them, so a bad call
  gets tbx's own error text, the same as over MCP.
- user -> the method `reply_to_user(text)` mid-rollout; the rollout's last message (no tool call) is
  delivered to the user by `reward`, and a conversation the user has not ended by then ends there
  (`rollout_end`) with the state graded.
- verdict -> `reward` (async, one per rollout): 1.0 / 0.0; a harness error (database, tools, user
  simulator, judge) returns None, which TRL keeps out of the group baseline with advantage 0.

The trainer's environments are reused across batches (`reset` again): an episode a rollout left
unscored is ended (`rollout_end`) before the next one opens. Limits: a tool name the model invents is
answered by TRL ("Tool ... not found"), not by tbx; TRL has no user turn of its own.

Prompts: by default TRL renders the methods' JSON schemas with the tokenizer's chat template. With
`tool_format` ("json" | "compact", tbx's `model.tool_format`) the rows' system message is tbx's own (the
policy, tbx's call instruction, the tools as tbx renders them, `reply_to_user` last) and `chat_tokenizer`
gives the tokenizer a ChatML template that leaves TRL's tool list out: the model sees the prompt tbx's
`stage=eval` gives it (plus the `reply_to_user` line), and TRL still parses its calls and renders tool results.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from typing import Any

from tbx.envs.episodes import Episode, TaskSet
from tbx.llm.parsing import render_assistant_text
from tbx.messages import ToolSchema
from tbx.policies.prompting import ToolFormat, check_tool_format, demonstrations_for, system_text
from tbx.serve.server import REPLY_TO_USER, USER_TOOLS, domain_tools
from tbx.tools.declare import ToolSpec

CONSUMER = "trl"
_REPLY_DOC = next(t.description for t in USER_TOOLS if t.name == REPLY_TO_USER)


def load(*overrides: str, consumer: str = CONSUMER) -> TaskSet:
    """The task set of `overrides` (as on the command line, e.g. "tasks=travel", "store.url=..."), stored as
    runs of the agent `consumer`."""
    return TaskSet.load(consumer, *overrides)


class TbxEnvironment:
    """One rollout's environment: TRL calls `reset`, then the tool methods its model chooses."""

    tasks: TaskSet  # set on each domain's subclass

    def __init__(self) -> None:
        self.episode: Episode | None = None

    def reset(self, task_id: str, **row: Any) -> str:
        if self.episode is not None and not self.episode.over:
            self.episode.finish()  # a rollout TRL never scored: its conversation ends here
        self.episode = self.tasks.open(task_id)
        return self.episode.opening

    def reply_to_user(self, text: str) -> str:
        return self._episode().reply(text).text

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        return self._episode().call_tool(name, arguments).text

    def _episode(self) -> Episode:
        if self.episode is None:
            raise RuntimeError("reset() opens an episode before any tool is called")
        return self.episode


TbxEnvironment.reply_to_user.__doc__ = f"""{_REPLY_DOC}

Args:
    text: Your message to the user.
"""


def _tool_method(spec: ToolSpec) -> Callable[..., str]:
    """A method named like the tool, with its parameters and docstring, that forwards any arguments."""
    hints = typing.get_type_hints(spec.fn)
    params = [p.replace(annotation=hints.get(p.name, p.annotation))
              for p in list(inspect.signature(spec.fn).parameters.values())[1:]]

    def method(self: TbxEnvironment, **arguments: Any) -> str:
        return self._call(spec.name, arguments)

    method.__name__ = method.__qualname__ = spec.name
    method.__doc__ = spec.fn.__doc__
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = inspect.Signature([self_param, *params], return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {p.name: p.annotation for p in params} | {"return": str}
    return method


def environment_class(tasks: TaskSet, domain: str) -> type[TbxEnvironment]:
    specs = next(tasks.tools(t) for t in tasks.task_ids if tasks.task(t).domain == domain)
    clash = {spec.name for spec in specs} & {"reset", "get_reward", REPLY_TO_USER}
    if clash:
        raise ValueError(f"domain {domain} has tools named like the environment's own methods: {sorted(clash)}")
    members = {spec.name: _tool_method(spec) for spec in specs}
    name = "".join(part.title() for part in domain.split("_")) + "Environment"
    return type(name, (TbxEnvironment,), {"tasks": tasks, **members})


def _domains(tasks: TaskSet) -> list[str]:
    return list(dict.fromkeys(tasks.task(t).domain for t in tasks.task_ids))


def environment_factory(tasks: TaskSet) -> Callable[[], TbxEnvironment] | dict[str, Callable[[], TbxEnvironment]]:
    """For `GRPOTrainer(environment_factory=...)`: a class for one domain, a class per domain for several."""
    classes = {domain: environment_class(tasks, domain) for domain in _domains(tasks)}
    return next(iter(classes.values())) if len(classes) == 1 else classes


def tool_schemas(tasks: TaskSet, task_id: str) -> list[ToolSchema]:
    """The task's domain tools as tbx lists them (the MCP listing, in the domain's order)."""
    listed = tasks.loop.run(domain_tools(tasks.task(task_id).domain, tasks.tools(task_id)))
    return [ToolSchema(t.name, t.description or "", t.input_schema) for t in listed]


_REPLY_SCHEMA = next(ToolSchema(t.name, t.description or "", t.input_schema) for t in USER_TOOLS
                     if t.name == REPLY_TO_USER)


def demonstration_turns(tasks: TaskSet, task_id: str) -> list[dict[str, Any]]:
    """tbx's worked examples of the task's first tools (`model.few_shot`, `demonstrations_for`: built from the
    tool schemas, never from the task) as TRL chat turns: a request, then the assistant's tool call."""
    turns: list[dict[str, Any]] = []
    for demo in demonstrations_for(tool_schemas(tasks, task_id)):  # as text: columns would null-fill `arguments`
        turns += [{"role": "user", "content": demo.request},
                  {"role": "assistant", "content": render_assistant_text("", [demo.call])}]
    return turns


def system_message(tasks: TaskSet, task_id: str, tool_format: ToolFormat | None = None) -> str:
    """The task's policy; with `tool_format`, tbx's whole system text: policy, call instruction and the tools the
    environment exposes (the domain's, then `reply_to_user`) rendered as tbx renders them for the model."""
    policy = tasks.task(task_id).policy
    if tool_format is None:
        return policy
    return system_text(policy, [*tool_schemas(tasks, task_id), _REPLY_SCHEMA], tool_format=check_tool_format(tool_format))


def rows(tasks: TaskSet, few_shot: bool = False, tool_format: ToolFormat | None = None) -> list[dict[str, Any]]:
    """One row per task, in the task set's order; `few_shot`: tbx's worked tool calls before the user's turn;
    `tool_format`: tbx's system text (for a tokenizer from `chat_tokenizer(..., tool_format)`)."""
    several = len(_domains(tasks)) > 1
    out = []
    for task_id in tasks.task_ids:
        demos = demonstration_turns(tasks, task_id) if few_shot else []
        system = {"role": "system", "content": system_message(tasks, task_id, tool_format)}
        row = {"prompt": [system, *demos, {"role": "user", "content": ""}], "task_id": task_id}
        out.append(row | ({"environment": tasks.task(task_id).domain} if several else {}))
    return out


def dataset(tasks: TaskSet, repeat: int = 1, few_shot: bool = False, tool_format: ToolFormat | None = None) -> Any:
    """The rows as a `datasets.Dataset` (each task `repeat` times), TRL's `train_dataset`."""
    from datasets import Dataset

    return Dataset.from_list(rows(tasks, few_shot, tool_format) * repeat)


# TRL's Qwen2.5 template (ChatML, hermes tool calls, tool results as a user turn of <tool_response> blocks)
# without its tool list: the system message already carries tbx's.
TOOLS_IN_SYSTEM_TEMPLATE = """\
{%- for message in messages %}
    {%- if message.role == "assistant" and message.tool_calls %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def chat_tokenizer(tokenizer: Any, tool_format: ToolFormat | None = None) -> Any:
    """`tokenizer` with TRL's Qwen2.5 template (ChatML with tool calls, for a model whose own template has none)
    and TRL's parser for its calls; with `tool_format`, the template that leaves the tools to the system message
    (rows of the same `tool_format`). The calls the model writes are the same hermes blocks either way."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    tokenizer.chat_template = qwen2_5_chat_template
    add_response_schema(tokenizer)  # TRL recognises the template it ships, and sets the parser of its calls
    if tool_format is not None:
        tokenizer.chat_template = TOOLS_IN_SYSTEM_TEMPLATE
    return tokenizer


def _final_text(completion: Any) -> str | None:
    """The rollout's last message when it is the model's text (not a tool call): its reply to the user."""
    if not isinstance(completion, list) or not completion:
        return None
    last = completion[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    return content if isinstance(content, str) and content.strip() else None


async def tbx_verdict(completions: list[Any], environments: list[TbxEnvironment], **_: Any) -> list[float | None]:
    """tbx's verdict of each rollout: 1.0 / 0.0, or None after a harness error (TRL: not trained on)."""
    async def one(completion: Any, environment: TbxEnvironment) -> float | None:
        result = await environment._episode().afinish(_final_text(completion))
        return result.reward

    return list(await asyncio.gather(*(one(c, e) for c, e in zip(completions, environments, strict=True))))


reward = tbx_verdict  # for `GRPOTrainer(reward_funcs=...)`; TRL logs it under this function's name
