"""A τ² task's side of the episode interface (tbx/episodes/state.py): an environment per episode, τ²'s tools
served through tbx's MCP layer, τ²'s verdict.

The tools are `ToolSpec`s whose runner is τ²'s `Environment.get_response` (`tbx.tau2.environment.call_tool`)
and whose argument schema is τ²'s own tool declaration (`Tool.openai_schema`), so the agent sees τ²'s
schemas and reads τ²'s texts, errors included ("Error: <message>"). tbx's argument checks do not run:
τ² passes arguments to its tools as sent, and its verdicts (and its transcript replay) depend on that.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from tbx.backend.state import State, state_delta
from tbx.messages import Message
from tbx.records import EpisodeResult, Grade, JudgeVerdict
from tbx.tasks.model import Step, Task
from tbx.tasks.mutations import Mutation
from tbx.tau2 import SOURCES, VERSION
from tbx.tau2.environment import Tau2Domain, call_tool, collections, entry_json, tau2_domain
from tbx.tau2.grading import GoldState, gold_state, grade, pseudo_rows
from tbx.tau2.mutations import argument_values, mutants
from tbx.tau2.tasks import tau2_record
from tbx.tools.declare import ToolSpec
from tbx.tools.runtime import ToolResult

_KINDS = {"read": "read", "write": "write"}  # τ²'s generic and think tools change nothing in the database


def _runner(name: str):
    def run(environment: Any, arguments: dict[str, Any]) -> ToolResult:
        text, is_error = call_tool(environment, name, arguments)
        return ToolResult(text, is_error)

    return run


@cache
def tool_specs(domain_name: str) -> tuple[ToolSpec, ...]:
    """τ²'s agent tools of `domain_name` as tbx tool specs (τ²'s order: by name)."""
    domain = tau2_domain(domain_name)
    environment = domain.acquire()
    try:
        specs = []
        for tool in sorted(environment.get_tools(), key=lambda t: t.name):
            method = getattr(environment.tools, tool.name)
            signature = inspect.signature(method)
            db = inspect.Parameter("db", inspect.Parameter.POSITIONAL_OR_KEYWORD)

            def declared(db: Any, **arguments: Any) -> Any:  # the schema's carrier; τ²'s runner does the work
                raise NotImplementedError

            declared.__name__ = tool.name
            declared.__doc__ = tool.openai_schema["function"]["description"]
            declared.__signature__ = signature.replace(parameters=[db, *signature.parameters.values()])  # type: ignore[attr-defined]
            kind = _KINDS.get(str(environment.tools.tool_type(tool.name).value).lower(), "read")
            specs.append(ToolSpec(tool.name, kind, declared, (), runner=_runner(tool.name),
                                  schema=tool.openai_schema["function"]["parameters"]))
        return tuple(specs)
    finally:
        domain.release(environment)


@cache
def _versions(domain_name: str) -> dict[str, str]:
    from tbx.domains import source_hash
    from tbx.tau2 import environment, grading

    digest = tau2_domain(domain_name).digest  # first: the package is checked and quiet before τ² is imported
    tools = __import__(f"tau2.domains.{domain_name}.tools", fromlist=["x"])
    return {"tools": f"tau2-{VERSION}-{source_hash(tools)}", "grader": source_hash(grading, environment),
            "initial_state": f"tau2-{VERSION}-{domain_name}-{digest}"}


@cache
def _argument_values(source: str) -> dict[tuple[str, str], list[Any]]:
    from tbx.tau2.tasks import tau2_tasks

    return argument_values(tau2_record(task.id) for task in tau2_tasks(source, "base"))


@dataclass
class Tau2Episode:
    """One episode's τ² environment (taken from the domain's idle ones, put back by `close`)."""

    runtime: Tau2Runtime
    target: Any  # the τ² Environment the tools act on

    def terminal(self) -> State:
        """The records the episode's writes reached, as pseudo-rows (their terminal texts)."""
        reached = [(name, key, entry_json(dict.get(records, key))) for name, records in collections(self.target).items()
                   for key in sorted(records.keys_reached, key=str)]
        return pseudo_rows(reached)

    def grade(self, final: State, transcript: Sequence[Message], verdicts: Sequence[JudgeVerdict] | None,
              ended_by: str) -> Grade:
        runtime = self.runtime
        return grade(runtime.domain, runtime.record, runtime.gold, self.target, transcript, ended_by)

    def delta(self, final: State) -> State:
        """The reached records whose text is not `db.json`'s, before (`initial`) is read by the viewer."""
        return state_delta(self.runtime.initial_of(final), final)

    def close(self) -> None:
        self.runtime.domain.release(self.target)


@dataclass(frozen=True)
class Tau2Runtime:
    """Everything an episode of a τ² task needs: the domain's environments, τ²'s record, the gold state."""

    task: Task
    domain: Tau2Domain
    record: Any
    gold: GoldState

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return tool_specs(self.domain.name)

    @property
    def versions(self) -> dict[str, str]:
        return _versions(self.domain.name)

    @property
    def initial_hash(self) -> str:
        return self.versions["initial_state"]

    def gate_mutations(self) -> list[Mutation]:
        """τ²'s single-fault mutations of the gold writes (tbx.tau2.mutations), each then the gold's message."""
        writes = {spec.name for spec in self.tools if spec.kind == "write"}
        said = tuple(step for step in self.task.reference if step.tool is None)
        return [Mutation("tau2", mutant.label, tuple(Step(tool=name, arguments=arguments) for name, arguments
                                                     in mutant.calls) + said)
                for mutant in mutants(self.record, writes, _argument_values(self.task.domain))]

    def is_equivalent(self, mutation: EpisodeResult, oracle: EpisodeResult) -> bool:
        """A mutation τ² passes left the gold actions' database: equivalent by τ²'s own verdict."""
        return mutation.outcome is oracle.outcome

    def to_json(self) -> dict:
        """Its line of a run's tasks.jsonl: the task as run (τ²'s record is in `task.tau2`); the initial state is
        `db.json`'s, read from the pinned package, so it is not repeated here."""
        return {"task": self.task.raw, "source": self.task.source, "kind": "tau2", "initial": {}, "expected": [],
                "volatile": []}

    def open(self, backend: Any = None) -> Tau2Episode:
        return Tau2Episode(self, self.domain.acquire())

    def initial_of(self, final: State) -> State:
        """The `db.json` texts of the records `final` holds (pseudo-rows)."""
        keys = [(name, row["id"]) for name, table in final.items() for row in table["rows"]]
        return pseudo_rows([(name, key, self.domain.initial_json(name, key)) for name, key in keys])


def prepare_tau2(task: Task) -> Tau2Runtime:
    """A τ² task's runtime: its gold state played once."""
    domain = tau2_domain(SOURCES[task.domain])
    record = tau2_record(task.id)
    return Tau2Runtime(task, domain, record, gold_state(domain, record))
