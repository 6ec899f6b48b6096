"""Typed records that pass between stages: episode outcomes, grades and results, a stored try, the frozen pool
manifest, and where a training run stands.

Dependency-free on purpose (the standard library, `tbx.errors` and `tbx.messages` only): the pure core
(`tbx.stats.metrics`, `tbx.stats.difficulty`, `tbx.stats.pool`) and the report read these records without loading MCP,
SQLAlchemy, torch, transformers or Hydra. tests/test_records.py holds that line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from tbx.errors import ConfigError
from tbx.messages import Message, Usage

# Canonical database state (tbx/backend/state.py makes it): {table: {"pk": [column, ...], "rows": [{column:
# value}, ...]}}, plain JSON, so it is stored with each episode and graded again without the database.
# tbx/backend/state.py spells the same alias itself: its source is part of the grader hash (tbx.runs.identity), so
# importing it from here would give every run a new identity.
State = dict[str, dict[str, Any]]


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    INFRA_ERROR = "infra_error"  # backend, tool server or model endpoint failed
    USER_SIM_ERROR = "user_sim_error"  # the simulated user failed or broke its contract
    VERIFIER_ERROR = "verifier_error"  # the grader or judge could not decide
    EXCLUDED = "excluded"  # judge rules but no judge configured: counted, never passed
    ABANDONED = "abandoned"  # a served agent left before the user ended the conversation: reward 0


ERROR_OUTCOMES = frozenset({Outcome.INFRA_ERROR, Outcome.USER_SIM_ERROR, Outcome.VERIFIER_ERROR})


# --- the grade ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of a grade: an expected change, "no other change", or a judge rule."""

    name: str
    passed: bool
    detail: str
    rows: tuple[dict[str, Any], ...] = ()  # the row diff behind this check (each a RowChange.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail, "rows": list(self.rows)}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> CheckResult:
        return CheckResult(data["name"], bool(data["passed"]), data.get("detail") or "", tuple(data.get("rows") or ()))


@dataclass(frozen=True, slots=True)
class JudgeVerdict:
    """A judge's decision on one rule of a task."""

    rule_id: str
    passed: bool
    reason: str
    # what deciding cost; not stored with the grade (the episode's usage["judge"] sums it), so a stored
    # grade's verdicts read back with none
    usage: Usage = field(default_factory=Usage)

    def to_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "passed": self.passed, "reason": self.reason}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> JudgeVerdict:
        return JudgeVerdict(data["rule_id"], bool(data["passed"]), data.get("reason") or "")


@dataclass(frozen=True, slots=True)
class Grade:
    """The verdict on a terminal state with its per-check breakdown (tbx.grading.grade_state makes it): every
    expected change, "no other change" and each judge rule, each with the rows behind it."""

    passed: bool | None  # None: excluded (judge rules but no judge)
    checks: tuple[CheckResult, ...]
    judge: tuple[JudgeVerdict, ...] = ()
    excluded_reason: str = ""

    @property
    def failed_checks(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def explain(self) -> str:
        if self.passed is None:
            return f"excluded: {self.excluded_reason}"
        if self.passed:
            return "pass"
        return "; ".join(f"{c.name}: {c.detail}" for c in self.failed_checks)

    def to_dict(self) -> dict[str, Any]:
        """The stored form (the `grade` of an episode's record), in the key order it has always had."""
        return {"passed": self.passed, "checks": [c.to_dict() for c in self.checks],
                "judge": [v.to_dict() for v in self.judge], "excluded_reason": self.excluded_reason}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Grade:
        return Grade(passed=data.get("passed"), checks=tuple(CheckResult.from_dict(c) for c in data.get("checks") or ()),
                     judge=tuple(JudgeVerdict.from_dict(v) for v in data.get("judge") or ()),
                     excluded_reason=data.get("excluded_reason") or "")


# --- episodes -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeResult:
    """One played episode: outcome, transcript, accounting, terminal state, version hashes."""

    task_id: str
    domain: str
    family: str
    attempt: int
    seed: int
    outcome: Outcome
    cause: str  # why: the failed checks, or the error
    transcript: tuple[Message, ...]
    usage: dict[str, Usage]  # "agent", "user", "judge"
    counts: dict[str, int]  # turns, tool_calls, tool_errors, malformed_calls
    final_delta: State | None  # tables that changed; with the task's initial state, the terminal dump
    grade: Grade | None  # None: no verdict was reached (an error before grading)
    hashes: dict[str, str]  # task, tools, grader, initial state
    timings: dict[str, float]  # seconds: clone, loop, grade, total
    ended_by: str = ""  # user_stop | turn_limit | agent_left | an AgentFault reason | error
    # policy and user names; user_end (why a user_stop: completed | cannot_help | patience | user); faults
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float | None:
        """1/0 for a verdict (abandoned is a 0); None for errors and exclusions (never a 0)."""
        if self.outcome is Outcome.SUCCESS:
            return 1.0
        if self.outcome in (Outcome.FAILURE, Outcome.ABANDONED):
            return 0.0
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "domain": self.domain, "family": self.family, "attempt": self.attempt,
            "seed": self.seed, "outcome": self.outcome.value, "reward": self.reward, "cause": self.cause,
            "ended_by": self.ended_by, "transcript": [m.to_dict() for m in self.transcript],
            "usage": {k: u.to_dict() for k, u in self.usage.items()}, "counts": self.counts,
            "final_delta": self.final_delta, "grade": None if self.grade is None else self.grade.to_dict(),
            "hashes": self.hashes,
            "timings": self.timings, "extra": self.extra,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> EpisodeResult:
        """An episode as `to_dict` wrote it; keys an older record lacks take their defaults."""
        return EpisodeResult(**_episode_fields(data))


def _episode_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """EpisodeResult's fields from its stored form: what older releases wrote too (a missing key is its
    default; `reward` is not read, it follows from the outcome)."""
    grade = data.get("grade")
    return {
        "task_id": data["task_id"], "domain": data.get("domain") or "", "family": data.get("family") or "",
        "attempt": data["attempt"], "seed": data.get("seed", 0), "outcome": Outcome(data["outcome"]),
        "cause": data.get("cause") or "", "transcript": tuple(Message.from_dict(m) for m in data.get("transcript") or ()),
        "usage": {role: Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0))
                  for role, u in (data.get("usage") or {}).items()},
        "counts": dict(data.get("counts") or {}), "final_delta": data.get("final_delta"),
        "grade": None if grade is None else Grade.from_dict(grade), "hashes": dict(data.get("hashes") or {}),
        "timings": dict(data.get("timings") or {}), "ended_by": data.get("ended_by") or "",
        "extra": dict(data.get("extra") or {}),
    }


@dataclass(frozen=True)
class StoredTry(EpisodeResult):
    """One try of an attempt as the results store keeps it (tbx/store/results.py, the JSON of its `record`
    column): the episode, the try's number among its attempt's tries (error outcomes are re-run), what it
    cost and the stage that stored it. What the store's readers return."""

    try_index: int = 0  # 0 for the first try of an attempt
    cost_usd: float = 0.0  # priced from the episode's usage (tbx.stats.cost)
    stage: str = ""  # eval, probe, train, serve

    @staticmethod
    def of(result: EpisodeResult, try_index: int, cost_usd: float, stage: str) -> StoredTry:
        return StoredTry(**{f.name: getattr(result, f.name) for f in fields(EpisodeResult)}, try_index=try_index,
                         cost_usd=cost_usd, stage=stage)

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON's keys, in the order the store has always written them."""
        return super().to_dict() | {"try": self.try_index, "cost_usd": self.cost_usd, "stage": self.stage}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> StoredTry:
        return StoredTry(**_episode_fields(data), try_index=data.get("try", 0), cost_usd=data.get("cost_usd", 0.0),
                         stage=data.get("stage") or "")

    @staticmethod
    def parse(blob: str | bytes) -> StoredTry:
        """A stored try from its `record` column."""
        return StoredTry.from_dict(json.loads(blob))


# --- outcome counts -------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeCounts:
    """The final tries of one group of attempts (a run, a domain, a family) by outcome (tbx.stats.metrics counts)."""

    n_tasks: int
    episodes: int  # attempts (their final tries)
    pass_at_1: float | None  # successes among the verdicts; None without any verdict
    counts: dict[str, int]  # attempts per outcome, every outcome by its value
    errors: int  # attempts that ended in an error outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeSummary(OutcomeCounts):
    """A run's final tries counted overall (the fields it shares with OutcomeCounts), per domain and per family,
    with the tokens they spent and their tool calls: the head of summary.json."""

    by_domain: dict[str, OutcomeCounts]
    by_family: dict[str, OutcomeCounts]  # keyed "domain/family"
    tokens: dict[str, int]  # "<role>_prompt_tokens", "<role>_completion_tokens"
    tool_calls: int
    tool_errors: int
    malformed_calls: int


@dataclass(frozen=True, slots=True)
class AttemptTally:
    """Where a run's asked attempts (tasks x attempts) stand, shown beside every metric so a result that shrank
    says by how much: pass@1 is over `judged` only (tbx.stats.metrics.attempt_tally counts)."""

    asked: int
    judged: int  # reached a verdict: success, failure or abandoned
    errored: int  # the final try ended in an error outcome (infrastructure, user simulator, verifier)
    excluded: int  # judge rules with no judge
    abandoned: int  # verdicts (failures) where a served agent left before the user ended the conversation
    missing: int  # asked, with no try stored (not played yet)

    def line(self) -> str:
        return (f"{self.judged} of {self.asked} attempts judged (pass@1 is over these); {self.errored} errored, "
                f"{self.excluded} excluded, {self.abandoned} abandoned (failures), {self.missing} missing")


# --- the frozen pool ------------------------------------------------------------------------------------------

def manifest_hash(manifest: Mapping[str, object]) -> str:
    """The content hash a pool manifest carries (over every key but `hash`, as JSON with sorted keys): a frozen
    pool is checked against it wherever it is read, so a hand-edited manifest is refused."""
    body = {k: v for k, v in manifest.items() if k != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PoolTask:
    """One probed task of a pool manifest: its counts, band and posterior, and whether the pool kept it."""

    id: str
    domain: str = ""
    family: str = ""
    k: int = 0  # successes among the attempts that reached a verdict
    n: int = 0  # attempts that reached a verdict
    errors: int = 0  # attempts that ended in an error outcome
    kept: bool = False
    band: str | None = None  # band name; None without a verdict
    mean: float | None = None  # posterior mean success rate
    interval: tuple[float, float] | None = None  # 90% posterior interval
    masses: tuple[float, ...] | None = None  # posterior mass per band

    def to_dict(self) -> dict[str, Any]:
        # the key order stage=select has always written (the hash sorts keys; the file's reader does not care)
        return {"domain": self.domain, "family": self.family, "k": self.k, "n": self.n, "errors": self.errors,
                "id": self.id, "kept": self.kept, "band": self.band, "mean": self.mean,
                "interval": None if self.interval is None else list(self.interval),
                "masses": None if self.masses is None else list(self.masses)}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> PoolTask:
        interval, masses = data.get("interval"), data.get("masses")
        return PoolTask(id=data["id"], domain=data.get("domain") or "", family=data.get("family") or "",
                        k=data.get("k", 0), n=data.get("n", 0), errors=data.get("errors", 0),
                        kept=bool(data.get("kept", False)), band=data.get("band"), mean=data.get("mean"),
                        interval=None if interval is None else tuple(interval),
                        masses=None if masses is None else tuple(masses))


MANIFEST_VERSION = 1


@dataclass(frozen=True)
class PoolManifest:
    """The frozen training pool stage=select writes (pool.json): which tasks are kept, every probed task's
    band, the probe run and settings it came from, and a content hash (`manifest_hash`) that training and
    evaluation check before they use it."""

    kept: tuple[str, ...]  # task ids, sorted
    dropped: tuple[str, ...] = ()
    no_verdict: tuple[str, ...] = ()  # probed tasks whose attempts all errored
    tasks: tuple[PoolTask, ...] = ()
    pool: Mapping[str, Any] = field(default_factory=dict)  # the pool config group: name, keep_ranges, finetune
    difficulty: Mapping[str, Any] = field(default_factory=dict)  # the difficulty group: edges, names
    band_counts: Mapping[str, int] = field(default_factory=dict)  # tasks per band name, in band order
    probe_run: str = ""  # the probe run folder
    probe_run_id: str = ""  # its identity
    probe_settings: Mapping[str, Any] = field(default_factory=dict)  # its run settings, and `tasks` as run
    version: int = MANIFEST_VERSION
    hash: str = ""  # manifest_hash of the rest; `sealed()` sets it

    @property
    def finetune(self) -> str:
        """How the trainer updates the model on this pool: full | lora."""
        return str(self.pool.get("finetune", "full"))

    def to_dict(self) -> dict[str, Any]:
        """The on-disk form (pool.json), in the key order stage=select has always written."""
        data = {"version": self.version, "probe_run": self.probe_run, "probe_run_id": self.probe_run_id,
                "probe_settings": dict(self.probe_settings), "pool": dict(self.pool),
                "difficulty": dict(self.difficulty), "kept": list(self.kept), "dropped": list(self.dropped),
                "no_verdict": list(self.no_verdict), "band_counts": dict(self.band_counts),
                "tasks": [task.to_dict() for task in self.tasks]}
        return data | ({"hash": self.hash} if self.hash else {})

    def content_hash(self) -> str:
        return manifest_hash(self.to_dict())

    def sealed(self) -> PoolManifest:
        """This manifest carrying the hash of its content."""
        return replace(self, hash=self.content_hash())

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> PoolManifest:
        """The record of a manifest as read; missing keys take their defaults (the hash is not checked:
        `parse` checks it against the data as written)."""
        return PoolManifest(
            kept=tuple(data["kept"]), dropped=tuple(data.get("dropped") or ()),
            no_verdict=tuple(data.get("no_verdict") or ()),
            tasks=tuple(PoolTask.from_dict(row) for row in data.get("tasks") or ()),
            pool=dict(data.get("pool") or {}), difficulty=dict(data.get("difficulty") or {}),
            band_counts=dict(data.get("band_counts") or {}), probe_run=data.get("probe_run") or "",
            probe_run_id=data.get("probe_run_id") or "", probe_settings=dict(data.get("probe_settings") or {}),
            version=data.get("version", MANIFEST_VERSION), hash=data.get("hash") or "")

    @staticmethod
    def parse(text: str, source: str, field: str) -> PoolManifest:
        """The manifest in `text` (the content of `source`, named by the config key `field`), refused with a
        ConfigError unless it is one and its content matches its hash. The hash is checked on the data as
        written, so every manifest ever written keeps loading whatever keys it has."""
        try:
            data = json.loads(text)
            kept, stated = data["kept"], data.get("hash")
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(source, field, f"is not a readable pool manifest ({exc})",
                              "give the pool.json that stage=select wrote") from None
        if stated != manifest_hash(data):
            raise ConfigError(source, field, "its content does not match its hash (edited by hand?)",
                              "re-create it with stage=select; the pool is frozen once selected")
        if not isinstance(kept, list):
            raise ConfigError(source, field, "its 'kept' is not a list of task ids", "re-create it with stage=select")
        try:
            return PoolManifest.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(source, field, f"is not a readable pool manifest ({exc!r})",
                              "re-create it with stage=select") from None


# --- training -------------------------------------------------------------------------------------------------

@dataclass
class TrainState:
    """Where a native training run stands: what a checkpoint keeps beside the weights and the optimizer, so a
    killed run resumes where it stopped. Mutable on purpose: the trainer appends to it once per step."""

    step: int = 0  # optimizer steps done
    scored: list[float] = field(default_factory=list)  # rewards of every trained episode so far
    history: list[dict[str, Any]] = field(default_factory=list)  # each step's metrics
    sampler: dict[str, Any] | None = None  # GroupSampler.state_dict() at the last checkpoint

    def checkpoint_extra(self, sampler: dict[str, Any]) -> dict[str, Any]:
        """The `extra` of a checkpoint (its format: sampler, scored, history)."""
        return {"sampler": sampler, "scored": self.scored, "history": self.history}

    @staticmethod
    def from_checkpoint(step: int, extra: Mapping[str, Any]) -> TrainState:
        return TrainState(step=step, scored=list(extra["scored"]), history=list(extra["history"]),
                          sampler=extra["sampler"])
