"""Leak audit: did anything the agent saw give the task's answer away?

The agent's context in an episode is the system prompt, every user and tool message it received
and the tool schemas it was given (its own assistant turns are what it produced, not what it was
shown). None of it may hold:

- **checks**: an expected change written out (`insert approvals {...}`, `{"op": "insert", "table":
  "approvals", ...}`, a grade's `expected[0] insert approvals: missing`) or a judge rule's text;
- **reference**: a `say` line of the reference solution, or one of its tool steps written out
  (`tool: request_approval`, `{"tool": "request_approval", "arguments": ...}`);
- **user scenario**: the user's persona or instructions (the user's side, never the agent's);
- **private facts before the agent could know them**: a fact's value in the system prompt or the
  tool schemas. In a user message the user said it, in a tool result a tool returned it: both are
  how an agent is meant to learn a fact (whether the user said it too early is the LLM user's own
  per-turn audit, `tbx.users.llm.audit_user_turn`).

Texts are compared case- and whitespace-insensitively. A text that the opening message contains
is not a secret (the user said it), and texts shorter than `MIN_TEXT` characters or values shorter
than `MIN_VALUE` are too common to audit (`Done.` is a reference line of the mock domain). Fact
values are matched as whole words, so `3577` does not match `13577`.

Everything here is a pure function over task mappings (the task format, as `tasks.jsonl` stores
them) and stored tries (`tbx.records.StoredTry`), except `audit_run`, the edge that
reads a run folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbx.records import StoredTry

MIN_TEXT = 20  # characters: shorter persona/instruction/say/rule texts are not audited
MIN_VALUE = 2  # characters: shorter fact values are not audited
RECEIVED = ("system", "user", "tool")  # roles of the messages an agent is shown
_SPACE = re.compile(r"\s+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclass(frozen=True)
class Secret:
    """One thing the agent must never be shown, and how to recognise it in a text."""

    kind: str  # checks | reference | user_scenario
    label: str  # where it lives in the task, e.g. "checks.expected[0]", "reference[3].say"
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Fact:
    """A private fact: it may reach the agent only through the user or a tool."""

    name: str
    values: tuple[str, ...]  # the scalar parts of its value, as text


@dataclass(frozen=True)
class TaskSecrets:
    task_id: str
    secrets: tuple[Secret, ...]
    facts: tuple[Fact, ...]
    public_values: tuple[str, ...] = ()  # fact values the domain's own texts hold: not audited


@dataclass(frozen=True)
class Leak:
    task_id: str
    attempt: int
    try_index: int
    where: str  # "transcript[0] system", "tool schemas", "request[3].messages[0] system"
    kind: str  # checks | reference | user_scenario | private_fact
    label: str
    excerpt: str  # the text around the match

    def describe(self) -> str:
        return f"{self.task_id} attempt {self.attempt} try {self.try_index}: {self.kind} {self.label} in " \
               f"{self.where}: ...{self.excerpt}..."


@dataclass(frozen=True)
class AuditReport:
    transcripts: int  # episodes scanned
    messages: int  # received messages scanned (system, user, tool)
    schema_sets: int  # tool-schema sets scanned
    leaks: tuple[Leak, ...]
    secrets: int = 0  # secrets (expected changes, rules, reference steps, scenario texts) and fact values audited
    public_values: int = 0  # fact values set aside because the domain's own texts hold them

    def summary(self) -> str:
        head = (f"audit: {self.transcripts} transcripts, {self.messages} messages, {self.schema_sets} tool-schema "
                f"sets scanned for {self.secrets} secrets ({self.public_values} fact values public in the domain's "
                f"texts, not audited); leaks = {len(self.leaks)}")
        return "\n".join([head, *(f"  {leak.describe()}" for leak in self.leaks)])


def _normal(text: str) -> str:
    return _SPACE.sub(" ", _THOUSANDS.sub("", text)).strip().lower()


def _verbatim(text: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(word) for word in _normal(text).split(" ")))


def fact_leaves(value: Any) -> Iterator[str]:
    """Scalar parts of a fact value as text; booleans and nulls cannot be told apart in prose (the audit and
    the LLM user's own check of its turns read facts the same way)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from fact_leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from fact_leaves(item)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, float) and value.is_integer():
        yield str(int(value))
    else:
        yield str(value).strip()


def _change_patterns(index: int, change: Mapping[str, Any]) -> list[Secret]:
    """An expected change written out: `insert approvals {`/`:` or an `op: insert` field beside its table."""
    op, table = re.escape(str(change.get("op", ""))), re.escape(str(change.get("table", "")).lower())
    label = f"checks.expected[{index}]"
    return [Secret("checks", label, re.compile(rf"\b{op}\s+{table}\s*[{{(\[:]")),
            Secret("checks", label, re.compile(rf"[\"']?\bop[\"']?\s*[:=]\s*[\"']?{op}\b(?=.*\b{table}\b)|"
                                               rf"\b{table}\b(?=.*[\"']?\bop[\"']?\s*[:=]\s*[\"']?{op}\b)", re.S))]


def task_secrets(task: Mapping[str, Any], expected: Sequence[Mapping[str, Any]] | None = None,
                 public: str = "") -> TaskSecrets:
    """What an agent must not see of `task` (a mapping in the task format). `expected`: the changes
    as run (derived from the reference when the task lists none); default: the task's own list.
    `public`: the domain's texts every task of it shows (its policy, all its tool schemas): a fact
    value found there cannot tell this task's fact (e.g. the policy's "today's date is 2026-06-15"
    and a user who cancels today), so it is set aside, not audited."""
    user = task.get("user") or {}
    opening = _normal(str(user.get("opening_message") or ""))
    secrets: list[Secret] = []

    def text(kind: str, label: str, value: Any) -> None:
        normal = _normal(str(value or ""))
        if len(normal) >= MIN_TEXT and normal not in opening:
            secrets.append(Secret(kind, label, _verbatim(normal)))

    checks = task.get("checks") or {}
    for i, change in enumerate(expected if expected is not None else checks.get("expected") or ()):
        secrets.extend(_change_patterns(i, change))
    for i, rule in enumerate(checks.get("judge") or ()):
        text("checks", f"checks.judge[{i}].rule", rule.get("rule"))
    for i, step in enumerate(task.get("reference") or ()):
        if step.get("say") is not None:
            text("reference", f"reference[{i}].say", step["say"])
        elif step.get("tool"):
            name = re.escape(str(step["tool"]).lower())
            secrets.append(Secret("reference", f"reference[{i}].tool",
                                  re.compile(rf"[\"']?\btool[\"']?\s*[:=]\s*[\"']?{name}\b")))
    for key in ("persona", "instructions"):
        text("user_scenario", f"user.{key}", user.get(key))
    facts, shared, known = [], [], _normal(public)
    for name, fact in (user.get("private_facts") or {}).items():
        value = fact.get("value") if isinstance(fact, Mapping) else fact
        values = [v for v in dict.fromkeys(fact_leaves(value)) if len(v) >= MIN_VALUE]
        shared += [v for v in values if _mentions(known, v)]
        values = [v for v in values if v not in shared]
        if values:
            facts.append(Fact(str(name), tuple(values)))
    return TaskSecrets(str(task.get("id", "")), tuple(secrets), tuple(facts), tuple(shared))


def _mentions(text: str, value: str) -> re.Match[str] | None:
    """`value` as a whole word of `text` (already normalised)."""
    pattern = r"(?<![a-z0-9])" + r"\s+".join(re.escape(w) for w in _normal(value).split(" ")) + r"(?![a-z0-9])"
    return re.search(pattern, text)


def _excerpt(text: str, match: re.Match[str]) -> str:
    return text[max(0, match.start() - 40): match.end() + 40]


def scan_text(secrets: TaskSecrets, text: str, role: str) -> list[tuple[str, str, str]]:
    """(kind, label, excerpt) of every secret in `text`, shown to the agent as `role` (system, user,
    tool, or "schemas" for the tool schemas)."""
    normal = _normal(text)
    found = []
    for secret in secrets.secrets:
        match = None if any(label == secret.label for _, label, _ in found) else secret.pattern.search(normal)
        if match:  # one finding per secret and text, whichever of its patterns matched
            found.append((secret.kind, secret.label, _excerpt(normal, match)))
    if role in ("system", "schemas"):  # before the user or a tool could have told it
        for fact in secrets.facts:
            for value in fact.values:
                match = _mentions(normal, value)
                if match:
                    found.append(("private_fact", f"user.private_facts.{fact.name}", _excerpt(normal, match)))
                    break
    return found


def scan_context(secrets: TaskSecrets, messages: Sequence[Mapping[str, Any]], schemas: str | None = None,
                 where: str = "transcript") -> tuple[int, list[tuple[str, str, str, str]]]:
    """Scan one agent context: its received messages (dicts with role and content; assistant turns
    are skipped) and its tool schemas as text. Returns (messages scanned, [(where, kind, label, excerpt)])."""
    found, scanned = [], 0
    for i, message in enumerate(messages):
        role = str(message.get("role", ""))
        if role not in RECEIVED:
            continue
        scanned += 1
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        found += [(f"{where}[{i}] {role}", *hit) for hit in scan_text(secrets, text, role)]
    if schemas:
        found += [("tool schemas", *hit) for hit in scan_text(secrets, schemas, "schemas")]
    return scanned, found


def audit_records(records: Sequence[StoredTry], secrets: Mapping[str, TaskSecrets],
                  schemas: Mapping[str, str] | None = None) -> AuditReport:
    """Scan stored episodes. `secrets`: per task id; `schemas`: the tool schemas each task's agent
    was given, as text. An episode of a task without secrets is an error: nothing could be checked."""
    leaks, messages, schema_sets = [], 0, 0
    for record in records:
        task_id = record.task_id
        if task_id not in secrets:
            raise KeyError(f"no task content for {task_id!r}: cannot audit its episodes")
        schema_text = (schemas or {}).get(task_id)
        scanned, found = scan_context(secrets[task_id], [m.to_dict() for m in record.transcript], schema_text)
        messages += scanned
        schema_sets += schema_text is not None
        leaks += [Leak(task_id, record.attempt, record.try_index, where, kind, label, text)
                  for where, kind, label, text in found]
    audited = sum(len({x.label for x in s.secrets}) + sum(len(f.values) for f in s.facts) for s in secrets.values())
    public = sum(len(s.public_values) for s in secrets.values())
    return AuditReport(len(records), messages, schema_sets, tuple(leaks), audited, public)


def audit_run(run_dir: str | Path, store_url: str | None = None) -> AuditReport:
    """Audit every stored episode of a run folder (eval or probe): the tasks as run from
    `tasks*.jsonl`, the episodes from its results store (or `store_url`), and the tool schemas
    each task's agent was listed, rebuilt from the domain's tools over MCP."""
    from tbx.store.results import read_records

    folder = Path(run_dir)
    run_id = json.loads((folder / "run.json").read_text())["identity"]
    entries = [json.loads(line) for path in sorted(folder.glob("tasks*.jsonl"))
               for line in path.read_text().splitlines() if line.strip()]
    listed: dict[tuple[str, tuple[str, ...]], str] = {}

    def schemas_of(domain: str, allowed: tuple[str, ...]) -> str:
        if (domain, allowed) not in listed:
            listed[(domain, allowed)] = _tool_schemas(domain, allowed)
        return listed[(domain, allowed)]

    secrets: dict[str, TaskSecrets] = {}
    schemas: dict[str, str] = {}
    for entry in entries:
        task = entry["task"]
        public = _domain_policy(task["domain"]) + "\n" + schemas_of(task["domain"], ())
        secrets[task["id"]] = task_secrets(task, entry.get("expected"), public)
        schemas[task["id"]] = schemas_of(task["domain"], tuple(task.get("tools") or ()))
    return audit_records(read_records(store_url or folder, run_id), secrets, schemas)


def _domain_policy(domain: str) -> str:
    from tbx.domains import get_domain

    return get_domain(domain).policy


def _tool_schemas(domain: str, allowed: tuple[str, ...]) -> str:
    """The tool schemas an agent of `domain` is listed over MCP, as JSON text (no database needed)."""
    from tbx.domains import get_domain
    from tbx.process.preemption import run_loop
    from tbx.tools.mcp_server import InfraLog, build_server, open_tool_session

    specs = [spec for spec in get_domain(domain).tools if not allowed or spec.name in allowed]

    async def listed() -> str:
        infra = InfraLog()
        async with open_tool_session(build_server(domain, specs, None, infra), infra) as session:  # type: ignore[arg-type]
            return json.dumps([schema.to_openai() for schema in session.schemas])

    return run_loop(listed())  # inside a job, a preemption waits for this loop to unwind
