"""Task sets and per-task runtimes.

`resolve_tasks` turns the `tasks` config into validated tasks (bundled domain generators and/or
the user's own task files). `prepare_task` builds the task's template database once, records
its initial state, and replays the reference solution into a twin database: that gives the
expected changes (when the task does not list them) or proves the listed ones are right.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sqlalchemy import Engine

from tbx.backend import Backend, EpisodeDatabase, State, dump_state
from tbx.backend.state import CHANGE_LOG, apply_delta, state_delta, state_hash
from tbx.config import TasksConfig
from tbx.domains import Domain, domain_names, get_domain, source_hash
from tbx.errors import ConfigError, InfraError, TaskFormatError
from tbx.grading import derive_expected, diff_states, grade_state, same_changes
from tbx.messages import Message
from tbx.records import EpisodeResult, Grade, JudgeVerdict, PoolManifest
from tbx.tasks.files import task_files
from tbx.tasks.loader import load_task, read_task_file
from tbx.tasks.model import ExpectedChange, Task
from tbx.tasks.mutations import Mutation, mutate
from tbx.tasks.schema import did_you_mean
from tbx.tasks.seed_values import check_seed_values
from tbx.tau2 import is_tau2
from tbx.tools.declare import ToolSpec
from tbx.tools.runtime import invoke


@cache
def tools_hash(domain: str) -> str:
    """The version of a domain's tool code: its tools.py and schema.py."""
    package = f"tbx.domains.{domain}"
    return source_hash(importlib.import_module(f"{package}.tools"), importlib.import_module(f"{package}.schema"))


@cache
def grader_hash() -> str:
    from tbx.backend import state
    from tbx.grading import diff, verdict

    return source_hash(diff, verdict, state)


@dataclass
class SqlEpisode:
    """One episode's clone of its task's template database (the episode state of tbx's own tasks)."""

    runtime: TaskRuntime
    backend: Backend
    db: EpisodeDatabase

    @property
    def target(self) -> Engine:
        return self.db.engine

    def terminal(self) -> State:
        """Dumped through the grader's own connection: the tables the database's change log names; the others
        are still the task's initial state."""
        reader = self.backend.open_reader(self.db)
        try:
            return dump_state(reader, self.runtime.domain.metadata, self.runtime.initial)
        finally:
            reader.dispose()

    def grade(self, final: State, transcript: Sequence[Message], verdicts: Sequence[JudgeVerdict] | None,
              ended_by: str) -> Grade:
        runtime = self.runtime
        return grade_state(runtime.initial, final, runtime.expected, runtime.volatile, runtime.task.checks.loose,
                           runtime.task.checks.judge, verdicts)

    def delta(self, final: State) -> State:
        return state_delta(self.runtime.initial, final)

    def close(self) -> None:
        self.backend.drop(self.db)


@dataclass(frozen=True)
class TaskRuntime:
    """Everything an episode of `task` needs, built once per task."""

    task: Task
    domain: Domain
    template: str  # backend handle of the seeded template database
    initial: State
    expected: tuple[ExpectedChange, ...]
    volatile: tuple[str, ...]

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        allowed = set(self.task.tools) or set(self.domain.tool_names)
        return tuple(spec for spec in self.domain.tools if spec.name in allowed)

    @property
    def initial_hash(self) -> str:
        return state_hash(self.initial)

    @property
    def versions(self) -> dict[str, str]:
        return {"tools": tools_hash(self.task.domain), "grader": grader_hash(), "initial_state": self.initial_hash}

    def gate_mutations(self) -> list[Mutation]:
        """The admission gate's single-fault mutations of the reference (stage=validate)."""
        return mutate(self.task.reference, {spec.name: spec for spec in self.domain.tools}, self.domain.distractors)

    def is_equivalent(self, mutation: EpisodeResult, oracle: EpisodeResult) -> bool:
        """Whether a passing mutation left exactly the reference's changes (`same_changes`)."""
        if mutation.final_delta is None or oracle.final_delta is None:
            return False
        initial = self.initial
        return same_changes(initial, apply_delta(initial, mutation.final_delta), apply_delta(initial, oracle.final_delta))

    def to_json(self) -> dict:
        """The task as run (content, initial state, expected changes): its line of a run's tasks.jsonl."""
        return {"task": self.task.raw, "source": self.task.source, "initial": self.initial,
                "expected": [vars(e) for e in self.expected], "volatile": list(self.volatile)}

    def open(self, backend: Backend) -> SqlEpisode:
        """A clone of the task's template, seen by nobody else."""
        return SqlEpisode(self, backend, backend.clone(self.template))


def load_domain_task(data: object, source: str) -> Task:
    if not isinstance(data, dict):
        raise TaskFormatError(source, "(task)", f"expected a mapping of fields, got {type(data).__name__} "
                              f"{data!r:.60}", "write each task as a mapping (id:, domain:, split:, user:, ...)")
    if not isinstance(data.get("domain"), str):
        raise TaskFormatError(source, "domain", "missing", f"add 'domain:' with one of {domain_names()}")
    if data["domain"] not in domain_names():
        raise TaskFormatError(source, "domain", f"unknown domain {data['domain']!r}",
                              f"use one of {domain_names()} or add a folder tbx/domains/{data['domain']}/")
    domain = get_domain(data["domain"])
    task = load_task(data, source, domain.policy)
    validate_against_domain(task, domain)
    return task


def task_items(cfg: TasksConfig) -> list[tuple[object, str]]:
    """Raw task mappings with their sources: bundled generators, then the user's files."""
    if not cfg.domains and not cfg.path:
        raise TaskFormatError("conf/tasks", "tasks.domains", "no domain and no path given",
                              "pick a task set (tasks=travel) or give tasks.path=FILE_OR_DIR")
    items: list[tuple[object, str]] = []
    for name in (name for name in cfg.domains if not is_tau2(name)):  # τ² sources: `tau2_task_list`
        for i, data in enumerate(get_domain(name).generate_tasks(cfg.seed)):
            items.append((data, f"tbx/domains/{name}/tasks.py#{i}"))
    if cfg.path:
        for file in task_files(Path(cfg.path).expanduser()):
            items.extend(read_task_file(file))
    return items


def _first_per(tasks: list[Task], count: int, key: Callable[[Task], object]) -> list[Task]:
    """The first `count` tasks of each `key`, in order."""
    taken: dict[object, int] = {}
    kept = []
    for task in tasks:
        if taken.get(key(task), 0) < count:
            taken[key(task)] = taken.get(key(task), 0) + 1
            kept.append(task)
    return kept


def select_tasks(tasks: list[Task], cfg: TasksConfig) -> list[Task]:
    """Refuse duplicate ids, then apply the split, family, per-family and limit filters."""
    seen: dict[str, str] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskFormatError(task.source, "id", f"{task.id!r} is also used by {seen[task.id]}",
                                  "give every task a unique id")
        seen[task.id] = task.source
    if cfg.split and cfg.split != "base":  # base: τ²-bench's train and test together
        tasks = [t for t in tasks if t.split == cfg.split]
    if cfg.families:
        tasks = [t for t in tasks if t.family in cfg.families]
    if cfg.per_family is not None:
        tasks = _first_per(tasks, cfg.per_family, lambda task: (task.domain, task.family))
    if cfg.per_domain is not None:
        tasks = _first_per(tasks, cfg.per_domain, lambda task: task.domain)
    if cfg.limit is not None:
        tasks = tasks[: cfg.limit]
    return tasks


def tau2_task_list(cfg: TasksConfig) -> list[Task]:
    """The τ²-bench tasks of the sources `cfg.domains` names, in `cfg.split` (base: all)."""
    from tbx.tau2.tasks import tau2_tasks

    return [task for name in cfg.domains if is_tau2(name) for task in tau2_tasks(name, cfg.split)]


def resolve_tasks(cfg: TasksConfig) -> list[Task]:
    """The validated, filtered task list of a `tasks` config."""
    tasks = select_tasks([load_domain_task(data, source) for data, source in task_items(cfg)] + tau2_task_list(cfg),
                         cfg)
    return keep_pool(tasks, cfg.pool) if cfg.pool else tasks


def load_manifest(path: str | None, field: str) -> PoolManifest:
    """A pool manifest (pool.json from stage=select), refused unless its content matches its hash: the
    pool is frozen once selected, so a hand-edited manifest would silently train or measure other tasks."""
    if not path:
        raise ConfigError("conf/config.yaml", field, "is empty", f"give {field}=<select run>/pool.json")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise ConfigError(path, field, f"is not a readable pool manifest ({exc})",
                          "give the pool.json that stage=select wrote") from None
    return PoolManifest.parse(text, path, field)


def manifest_tasks(manifest: PoolManifest) -> list[Task]:
    """The tasks a pool manifest kept, resolved from the task set its probe ran on."""
    settings = manifest.probe_settings.get("tasks")
    if not isinstance(settings, dict):
        raise ConfigError("train.pool", "probe_settings.tasks", "is missing: the manifest names no task set",
                          "use the pool.json that stage=select wrote")
    tasks_cfg = TasksConfig(**{**settings, "limit": None, "families": [], "per_family": None})
    kept = set(manifest.kept)
    tasks = [t for t in resolve_tasks(tasks_cfg) if t.id in kept]
    missing = kept - {t.id for t in tasks}
    if missing:
        raise ConfigError("train.pool", "kept", f"{len(missing)} pool tasks no longer exist, e.g. {sorted(missing)[:3]}",
                          "re-run probe and select on the current task set")
    return tasks


def keep_pool(tasks: list[Task], pool_path: str) -> list[Task]:
    """The tasks a pool manifest kept, in manifest order; every kept id must be in `tasks`."""
    kept = load_manifest(pool_path, "tasks.pool").kept
    by_id = {task.id: task for task in tasks}
    missing = [task_id for task_id in kept if task_id not in by_id]
    if missing:
        raise ConfigError(pool_path, "tasks.pool", f"keeps {len(missing)} task(s) not in this task set, e.g. "
                          f"{missing[0]}", "use the task set the pool was probed on (its probe run's tasks)")
    return [by_id[task_id] for task_id in kept]


def validate_against_domain(task: Task, domain: Domain) -> None:  # noqa: C901 (one check per part of a task, in file order)
    """Tools, tables and columns a task names must exist in its domain."""
    tools = set(domain.tool_names)
    for name in task.tools:
        if name not in tools:
            raise TaskFormatError(task.source, "tools", f"unknown tool {name!r}", f"{did_you_mean(name, sorted(tools))}"
                                  f"use tools of {domain.name}: {sorted(tools)}")
    allowed = set(task.tools) or tools
    for i, step in enumerate(task.reference):
        if step.tool is not None and step.tool not in allowed:
            raise TaskFormatError(task.source, f"reference[{i}].tool", f"{step.tool!r} is not a tool the agent "
                                  "may call", f"{did_you_mean(step.tool, sorted(tools))}add it to 'tools' or use one "
                                  f"of {sorted(allowed)}")
    tables = domain.metadata.tables
    for table, rows in task.seed_rows.items():
        if table not in tables:
            raise TaskFormatError(task.source, f"seed.rows.{table}", "unknown table", f"use one of {sorted(tables)}")
        columns = set(tables[table].columns.keys())
        for i, row in enumerate(rows):
            bad = set(row) - columns
            if bad:
                raise TaskFormatError(task.source, f"seed.rows.{table}[{i}].{sorted(bad)[0]}", "unknown column",
                                      f"use columns of {table}: {sorted(columns)}")
        check_seed_values(task.source, tables[table], rows)
    for i, spec in enumerate(task.checks.expected or ()):
        field = f"checks.expected[{i}]"
        if spec.table not in tables:
            raise TaskFormatError(task.source, f"{field}.table", f"unknown table {spec.table!r}",
                                  f"use one of {sorted(tables)}")
        columns = set(tables[spec.table].columns.keys())
        for part in ("key", "values"):
            bad = set(getattr(spec, part)) - columns
            if bad:
                raise TaskFormatError(task.source, f"{field}.{part}.{sorted(bad)[0]}", "unknown column",
                                      f"use columns of {spec.table}: {sorted(columns)}")
    for kind in ("volatile", "loose"):
        for i, item in enumerate(getattr(task.checks, kind)):
            table, _, column = item.partition(".")
            if table not in tables or (column and column not in tables[table].columns):
                raise TaskFormatError(task.source, f"checks.{kind}[{i}]", f"{item!r} names no table/column",
                                      "write 'table' or 'table.column' of this domain")


@cache
def _base_rows(domain_name: str) -> dict:
    return get_domain(domain_name).base_rows()


def template_rows(task: Task) -> dict[str, list[dict]]:
    rows = {table: list(r) for table, r in _base_rows(task.domain).items()}
    for table, extra in task.seed_rows.items():
        rows.setdefault(table, []).extend(extra)
    return rows


@cache
def _domain_digest(domain_name: str) -> str:
    """A hash of the domain's schema and base rows (once per process: the rows' text is long)."""
    metadata = get_domain(domain_name).metadata
    schema = "".join(str(t.c.keys()) + str([str(c.type) for c in t.c]) for t in metadata.sorted_tables)
    return hashlib.sha256(f"{schema}|{sorted(_base_rows(domain_name).items())!r}".encode()).hexdigest()


def template_key(task: Task, domain: Domain) -> str:
    """The template's name: its domain, schema, base rows, the task's seed rows and the change log."""
    blob = f"{domain.name}|{_domain_digest(domain.name)}|{task.seed_hash}|{CHANGE_LOG}"
    return f"{domain.name}_{hashlib.sha256(blob.encode()).hexdigest()[:20]}"


def replay_reference(task: Task, domain: Domain, backend: Backend, template: str) -> State:
    """Play the reference tool calls straight into a twin database; return its terminal state."""
    twin = backend.clone(template)
    try:
        for i, step in enumerate(task.reference):
            if step.tool is None:
                continue
            result = invoke(domain.tool(step.tool), twin.engine, step.arguments)
            if result.is_error:
                raise TaskFormatError(task.source, f"reference[{i}]", f"tool {step.tool} failed on the seeded "
                                      f"database: {result.text}", "fix the reference step or the seed rows")
        reader = backend.open_reader(twin)
        try:
            return dump_state(reader, domain.metadata)
        finally:
            reader.dispose()
    finally:
        backend.drop(twin)


def unchecked_records(domain: Domain, expected: tuple[ExpectedChange, ...]) -> tuple[str, ...]:
    """The domain's record tables no expected change names: a task that expects no identity record
    (its reference verifies nobody, or its file predates the records) ignores rows written there."""
    named = {change.table for change in expected}
    return tuple(table for table in domain.records if table not in named)


def ignored(task: Task, domain: Domain, expected: tuple[ExpectedChange, ...]) -> tuple[str, ...]:
    """What the task's checks ignore: the domain's volatile tables and columns, the task's own, and the
    record tables its expected changes do not name."""
    return tuple(domain.volatile) + task.checks.volatile + unchecked_records(domain, expected)


def prepare_task(task: Task, backend: Backend) -> TaskRuntime:
    """The runtime of `task`: its template database built (once per content) and its expected changes
    derived from the reference; a τ²-bench task's runtime is its own kind (tbx/tau2/runtime.py)."""
    if is_tau2(task.domain):
        from tbx.tau2.runtime import prepare_tau2

        return prepare_tau2(task)  # type: ignore[return-value] - the same episode interface
    domain = get_domain(task.domain)
    try:
        template = backend.ensure_template(template_key(task, domain), domain.metadata, template_rows(task))
    except Exception as exc:  # a seed row the database refuses is the task's fault; report it as such
        if "IntegrityError" in type(exc).__name__ or "constraint" in str(exc).lower():
            raise TaskFormatError(task.source, "seed.rows", f"the database refused the seed rows: "
                                  f"{str(exc).splitlines()[0]}", "fix duplicate keys or missing references") from exc
        raise InfraError(f"building the template of {task.id} failed: {exc}") from exc
    clone = backend.clone(template)
    try:
        initial = dump_state(clone.engine, domain.metadata)
    finally:
        backend.drop(clone)
    volatile = tuple(domain.volatile) + task.checks.volatile  # the record tables join once expected is known
    final = replay_reference(task, domain, backend, template)
    changes = diff_states(initial, final, volatile)
    if not changes:
        raise TaskFormatError(task.source, "reference", "the reference solution changes nothing, so a do-nothing "
                              "agent would pass", "make the task require at least one write (e.g. a filed request)")
    expected = task.checks.expected
    if expected is None:
        expected = derive_expected(changes, task.checks.loose)
    volatile = ignored(task, domain, tuple(expected))
    if task.checks.expected is not None:
        grade = grade_state(initial, final, expected, volatile, task.checks.loose)
        if not grade.passed:
            raise TaskFormatError(task.source, "checks.expected", f"the reference solution fails its own checks: "
                                  f"{grade.explain()}", "fix the expected changes or the reference")
    return TaskRuntime(task, domain, template, initial, tuple(expected), volatile)
