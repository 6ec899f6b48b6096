"""Stored runs as the viewer reads them, never writing: a run folder's files and its results store.

The attempts list reads the store's columns only (task, attempt, try, outcome, tokens, cost), the final
try of each attempt, so a 10,240-attempt run lists in a fraction of a second; an episode's whole record
(transcript, grade, state delta) is read when a page shows it. The judge's decisions, kept inside the
records, are read once, the first time a filter asks for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, create_engine, func, select, tuple_

from tbx.errors import ConfigError
from tbx.records import StoredTry
from tbx.runs.identity import read_run_meta
from tbx.stats.cost import run_pricing
from tbx.store.results import attempts, check_store_file

OUTCOMES = ("success", "failure", "abandoned", "infra_error", "user_sim_error", "verifier_error", "excluded")
JUDGE_DECISIONS = ("passed", "failed", "none")  # every judge rule passed / one failed / no judge rule


@dataclass(frozen=True)
class AttemptRow:
    """The final try of one attempt, from the store's columns."""

    task_id: str
    attempt: int
    tries: int
    domain: str
    family: str
    outcome: str
    reward: float | None
    tokens: int
    cost_usd: float
    seconds: float


@dataclass(frozen=True)
class AttemptFilter:
    """What the attempts page keeps: each field empty means any."""

    domain: str = ""
    family: str = ""
    outcome: str = ""
    judge: str = ""  # one of JUDGE_DECISIONS
    search: str = ""  # a part of the task id

    def keeps(self, row: AttemptRow, judge: dict[tuple[str, int], str] | None = None) -> bool:
        return ((not self.domain or row.domain == self.domain) and (not self.family or row.family == self.family)
                and (not self.outcome or row.outcome == self.outcome)
                and (not self.search or self.search.lower() in row.task_id.lower())
                and (not self.judge or judge is None or judge.get((row.task_id, row.attempt)) == self.judge))


@dataclass
class StoredRun:
    """One run: `source` is its store (a folder's results.sqlite or a database URL), `run_id` its rows."""

    index: int
    name: str
    run_id: str
    source: str
    k: int
    agent: str
    stage: str
    run_dir: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # run.json
    unseen: tuple[str, ...] = ()  # roles whose tokens tbx never sees (a served agent's): tokens and cost n/a
    unpriced: tuple[str, ...] = ()  # roles played by a model with no price (config.yaml): cost n/a
    _engine: Engine | None = None
    _rows: list[AttemptRow] | None = None
    _tasks: dict[str, int] | None = None  # task id -> line of tasks.jsonl
    _judge: dict[tuple[str, int], str] | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = create_engine(self.source)
        return self._engine

    def rows(self) -> list[AttemptRow]:
        """The final try of every attempt, by task and attempt."""
        if self._rows is None:
            c = attempts.c
            query = (select(c.task_id, c.attempt, c.try_index, c.domain, c.family, c.outcome, c.reward,
                            c.prompt_tokens + c.completion_tokens, c.cost_usd, c.seconds)
                     .where(c.run_id == self.run_id).order_by(c.task_id, c.attempt, c.try_index))
            last: dict[tuple[str, int], AttemptRow] = {}
            with self.engine.connect() as conn:
                for task, attempt, tried, *rest in conn.execute(query):
                    last[(task, attempt)] = AttemptRow(task, attempt, tried + 1, *rest)
            self._rows = list(last.values())
        return self._rows

    def records(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], StoredTry]:
        """The final try's whole record of each (task, attempt) asked."""
        tries = {(r.task_id, r.attempt): r.tries - 1 for r in self.rows()}
        wanted = [(t, a, tries[(t, a)]) for t, a in keys if (t, a) in tries]
        found: dict[tuple[str, int], StoredTry] = {}
        c = attempts.c
        for start in range(0, len(wanted), 200):
            chunk = wanted[start:start + 200]
            query = select(c.record).where(c.run_id == self.run_id,
                                           tuple_(c.task_id, c.attempt, c.try_index).in_(chunk))
            with self.engine.connect() as conn:
                for (blob,) in conn.execute(query):
                    record = StoredTry.parse(blob)
                    found[(record.task_id, record.attempt)] = record
        return found

    def record(self, task_id: str, attempt: int) -> StoredTry | None:
        return self.records([(task_id, attempt)]).get((task_id, attempt))

    def tries(self, task_id: str, attempt: int) -> list[StoredTry]:
        """Every try of one attempt (errors re-run before the final one), in order."""
        c = attempts.c
        query = (select(c.record).where(c.run_id == self.run_id, c.task_id == task_id, c.attempt == attempt)
                 .order_by(c.try_index))
        with self.engine.connect() as conn:
            return [StoredTry.parse(blob) for (blob,) in conn.execute(query)]

    def judge_decisions(self) -> dict[tuple[str, int], str]:
        """(task, attempt) -> passed | failed | none, read from every final record once (SQLite picks the
        judge's part out of each record itself, ten times faster than decoding whole records here)."""
        if self._judge is None:
            if self.engine.dialect.name == "sqlite":
                c = attempts.c
                query = (select(c.task_id, c.attempt, func.json_extract(c.record, "$.grade.judge"))
                         .where(c.run_id == self.run_id).order_by(c.task_id, c.attempt, c.try_index))
                with self.engine.connect() as conn:
                    judged = {(t, a): json.loads(v or "[]") for t, a, v in conn.execute(query)}  # the last try wins
                self._judge = {key: _decision([bool(v.get("passed")) for v in verdicts])
                               for key, verdicts in judged.items()}
            else:
                records = self.records((r.task_id, r.attempt) for r in self.rows())
                self._judge = {key: judge_decision(record) for key, record in records.items()}
        return self._judge

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The task as the run played it (tasks.jsonl: content, initial state, expected changes)."""
        path = self.run_dir / "tasks.jsonl" if self.run_dir is not None else None
        if path is None or not path.is_file():
            return None
        if self._tasks is None:  # task id -> byte offset of its line, read once
            self._tasks, offset = {}, 0
            with path.open("rb") as lines:
                for line in lines:
                    found = TASK_ID.search(line[:500].decode(errors="replace"))
                    if found:
                        self._tasks[json.loads(f'"{found.group(1)}"')] = offset
                    offset += len(line)
        offset = self._tasks.get(task_id)
        if offset is None:
            return None
        with path.open("rb") as lines:
            lines.seek(offset)
            return json.loads(lines.readline())

    def cost(self, tokens: int, usd: float) -> float | None:
        """What an attempt cost as far as tbx can know: None (n/a) where a role's tokens were never seen, or
        tokens were spent on a model with no price (a priced model never bills tokens at $0: a run read from
        a database, with no config.yaml, is known unpriced by that)."""
        if self.unseen or (tokens and (self.unpriced or usd == 0)):
            return None
        return usd

    def tokens(self, tokens: int) -> int | None:
        """An attempt's tokens as far as tbx can know: None (n/a) where a role's were never seen."""
        return None if self.unseen else tokens

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


TASK_ID = re.compile(r'^\{"task": \{"id": "((?:[^"\\]|\\.)*)"')


def judge_decision(record: StoredTry) -> str:
    return _decision([v.passed for v in record.grade.judge] if record.grade is not None else [])


def _decision(passed: list[bool]) -> str:
    """passed | failed | none of an attempt, from whether each judge rule passed."""
    if not passed:
        return "none"
    return "passed" if all(passed) else "failed"


def _agent(config: dict[str, Any]) -> str:
    """Who played the run: a served agent's own name, else the policy's (a model policy's is the model's)."""
    if config.get("stage", {}).get("name") == "serve":
        return config["serve"]["agent_name"]
    return str(config["policy"]["name"])


def load_folder(index: int, run_dir: Path, store_url: str | None) -> StoredRun:
    """A run folder (run.json, config.yaml and, unless store.url, results.sqlite)."""
    if not (run_dir / "run.json").is_file() or not (run_dir / "config.yaml").is_file():
        raise ConfigError(str(run_dir), "runs", "is not a run folder (no run.json or config.yaml)",
                          "give the folders stage=eval printed")
    store = run_dir / "results.sqlite"
    if not store_url and not store.is_file():
        raise ConfigError(str(run_dir), "runs", "has no results.sqlite", "give store.url=URL if the run stored its "
                          "results in a database")
    try:  # what cannot be read is named before the viewer starts (never a page that fails)
        meta = read_run_meta(run_dir / "run.json")
        if not store_url:
            check_store_file(store)
    except ConfigError as exc:
        raise ConfigError(exc.source, "runs", exc.problem, "give the folders of intact runs (restore this one "
                          "from a copy)") from None
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    agent, pricing = _agent(config), run_pricing(config)
    return StoredRun(index=index, name=agent, run_id=meta["identity"], source=store_url or f"sqlite:///{store}",
                     k=int(config["eval"]["attempts"]), agent=agent, stage=config["stage"]["name"],
                     run_dir=run_dir, meta=meta, unseen=pricing.unseen, unpriced=pricing.unpriced)


def load_store(url: str) -> list[StoredRun]:
    """Every run in a results database (no folder: no task content, the run id as the name)."""
    engine = create_engine(url)
    c = attempts.c
    try:
        with engine.connect() as conn:
            found = list(conn.execute(select(c.run_id, func.min(c.stage), func.max(c.attempt))
                                      .group_by(c.run_id).order_by(c.run_id)))
    except Exception as exc:  # any driver's refusal is the user's URL to fix
        raise ConfigError(url, "store.url", f"cannot be read ({str(exc).splitlines()[0]})",
                          "give the URL of a tbx results store") from None
    finally:
        engine.dispose()
    return [StoredRun(index=i, name=run_id, run_id=run_id, source=url, k=int(top) + 1, agent=run_id, stage=stage,
                      unseen=("agent",) if stage == "serve" else ())
            for i, (run_id, stage, top) in enumerate(found)]


def load_runs(run_dirs: Sequence[str], store_url: str | None) -> list[StoredRun]:
    """The runs to show: the folders given, or every run of `store_url`; names made distinct."""
    runs = ([load_folder(i, Path(d), store_url) for i, d in enumerate(run_dirs)] if run_dirs
            else load_store(store_url or ""))
    if not runs:
        raise ConfigError(str(store_url), "store.url", "holds no run", "give runs=[RUN_DIR,...]")
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for run in runs:
        if seen[run.name] > 1:
            run.name = f"{run.name} ({run.run_id})"
    return runs
