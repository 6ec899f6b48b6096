"""What each stage's run function returns: a frozen record, declared in the stage's registry entry
(`tbx/runs/stages.py`), with the status the process exits with (`exit_code`, 0 when it went well;
tbx/errors.py lists the others). launch.py reads that status; the pipeline reads the records of the stages
it runs. A result a stage also writes as a file (summary.json, probe.json, regrade.json, train.json, the
gate summary) is written from `to_json()`, in the keys and order that file has always had.

Light to import (the standard library and tbx.records): the registry imports it before any stage runs, and
the parts below the stages that build a result (the campaign's summary, the verl bridge) import it too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from tbx.records import AttemptTally, OutcomeSummary

if TYPE_CHECKING:
    from tbx.report.tables import Table


class StageResult(Protocol):
    """Anything a stage returns: at least the status its process exits with."""

    exit_code: int


def _file(result: Any) -> dict[str, Any]:
    """A result as its file holds it: its fields in order, the exit status left out (no file had it)."""
    data = asdict(result)
    data.pop("exit_code")
    return data


@dataclass(frozen=True, slots=True)
class Finished:
    """What a stage with nothing more to report returns."""

    exit_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResult(OutcomeSummary):
    """stage=eval's and stage=serve's result: the run's final tries counted (the OutcomeSummary fields, the
    overall counts first), the headline, and where and what ran. summary.json is `to_json()`."""

    pass_at_k: float | None  # None when no attempt reached a verdict
    observed_all: float | None  # the share of tasks solved in every attempt
    incomplete_tasks: tuple[str, ...]  # tasks with fewer judged attempts than asked
    k: int
    run_dir: str
    policy: str  # the agent, as its run is labelled
    tasks: str  # the task set's name
    attempts: int
    error_tries: int  # tries that ended in an error outcome (re-run ones included)
    cost_usd: float  # every try's
    tally: AttemptTally  # the attempts asked: judged, errored, excluded, abandoned, missing
    # pass^k, τ²-bench's reliability figure: the mean over tasks of the unbiased P(all k attempts succeed)
    pass_hat_k: float | None = None
    exit_code: int = 0  # EXIT_NO_VERDICT when every attempt errored

    @staticmethod
    def of(outcomes: OutcomeSummary, **rest: Any) -> EvalResult:
        return EvalResult(**{f.name: getattr(outcomes, f.name) for f in fields(OutcomeSummary)}, **rest)

    def to_json(self) -> dict[str, Any]:
        return _file(self)


@dataclass(frozen=True, slots=True)
class ProbedTask:
    """One probed task: successes k among n attempts with a verdict, its band and posterior mean."""

    k: int
    n: int
    band: str | None  # None without any verdict
    mean: float | None  # rounded to 4 places


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResult:
    """stage=probe's result; probe.json is `to_json()`."""

    run_dir: str
    n_tasks: int
    rounds: int
    episodes: int  # tries stored
    error_tries: int
    episodes_share_of_fixed_n: float  # episodes / (probe.attempts x tasks)
    bands: dict[str, int]  # tasks per band name, then "no verdict"
    cost_usd: float
    tasks: dict[str, ProbedTask]
    exit_code: int = 0  # EXIT_NO_VERDICT when no attempt reached a verdict

    def to_json(self) -> dict[str, Any]:
        return _file(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSelection:
    """stage=select's result: where the frozen pool manifest went, its hash and how many tasks it keeps."""

    run_dir: str
    manifest: str  # the pool.json written
    hash: str
    plot: str  # the bands histogram
    kept: int
    n_tasks: int  # tasks probed
    exit_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainResult:
    """stage=train's result, whichever trainer ran: where the run is and the model it trained. train.json is
    `to_json()` of the trainer's own result (NativeTrainResult, VerlTrainResult)."""

    run_dir: str
    pool_hash: str
    steps: int  # steps the recipe asked for
    final_model: str | None  # the trained model's folder; None when no step updated the model
    exit_code: int = 0  # EXIT_NO_UPDATE when no step updated the model

    def _with_exit_code(self, data: dict[str, Any]) -> dict[str, Any]:
        """train.json names its exit code only when it is not 0 (as it always has)."""
        return data | ({"exit_code": self.exit_code} if self.exit_code else {})


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeTrainResult(TrainResult):
    updates: int  # steps that updated the model
    history: tuple[dict[str, Any], ...]  # each step's metrics (train/...)
    weights: str  # the served weights' version at the end

    def to_json(self) -> dict[str, Any]:
        data = {"run_dir": self.run_dir, "pool_hash": self.pool_hash, "steps": self.steps, "updates": self.updates,
                "history": list(self.history), "final_model": self.final_model, "weights": self.weights}
        return self._with_exit_code(data)


@dataclass(frozen=True, slots=True, kw_only=True)
class VerlTrainResult(TrainResult):
    trained_steps: int  # verl's newest checkpoint
    updates: int | None  # steps with a gradient (None: verl logged no gradient norm)
    checkpoints: str
    command: str  # the trainer's command line (a shell file)
    log: str
    metrics: str  # verl's metrics file
    verl: dict[str, Any]  # the trainer: name, version, checkpoint, base_model, device (run.json's "trainer")

    def to_json(self) -> dict[str, Any]:
        data = {"run_dir": self.run_dir, "trainer": "verl", "pool_hash": self.pool_hash, "steps": self.steps,
                "trained_steps": self.trained_steps, "updates": self.updates, "checkpoints": self.checkpoints,
                "final_model": self.final_model, "command": self.command, "log": self.log, "metrics": self.metrics,
                "verl": self.verl}
        return self._with_exit_code(data)


@dataclass(frozen=True, slots=True)
class RegradeMismatch:
    """A stored verdict the current grader does not reproduce."""

    task_id: str
    attempt: int
    stored: str
    regraded: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RegradeResult:
    """stage=regrade's result; regrade.json is `to_json()`."""

    run_dir: str
    checked: int  # stored verdicts graded again
    reproduced: int
    mismatches: tuple[RegradeMismatch, ...]
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return _file(self)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A task the admission gate keeps out, with every reason."""

    id: str
    source: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FamilyGate:
    """The gate's counts over one family's tasks."""

    tasks: int
    admitted: int
    mutations: int
    equivalent: int  # passing mutations that leave the reference's own changes


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidateResult:
    """stage=validate's result; the gate summary (`summary_path`) is `to_json()`."""

    n_tasks: int
    admitted: int
    rejected: tuple[Rejection, ...]  # by task id
    by_family: dict[str, FamilyGate]
    exit_code: int = 0  # 1 when a task is rejected

    def to_json(self) -> dict[str, Any]:
        return _file(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportResult:
    """stage=report's result: the report's files and its tables."""

    run_dir: str
    markdown: str
    figures: tuple[str, ...]
    tables: tuple[Table, ...]  # Table 1, 2, 3
    exit_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewResult:
    """stage=view's result: the static export's index and page count, or that the viewer was served."""

    export: str | None = None
    pages: int = 0
    served: bool = False
    exit_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeModelResult:
    """stage=serve_model's result: the kept server (its URL and pid, whether this command started it), or the
    URLs of the servers `serve_model.stop=true` stopped."""

    url: str = ""
    pid: int | None = None
    started: bool = False
    ready_s: float | None = None  # how long the server took to answer, when this command started it
    stopped: tuple[str, ...] = ()
    exit_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    """stage=pipeline's result: the run folder of each step (the manifest for select)."""

    probe: str
    select: str  # the pool manifest
    train: str | None  # None when the pool was empty
    eval: dict[str, tuple[str, ...]]  # per evaluation set: the base model's run, then the trained model's
    report: dict[str, str]  # per evaluation set: its report.md
    exit_code: int = 0  # EXIT_NO_UPDATE when training updated nothing
