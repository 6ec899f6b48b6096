"""stage=regrade: recompute every stored verdict from the stored terminal state, without
re-running any episode, so results stay re-gradable when the grader changes.

Each stored episode holds the tables that changed; the run folder holds each task's initial state
and expected changes. A τ²-bench episode is graded again by τ²'s own evaluator, which replays the stored
transcript's tool calls on a new environment and the task's gold actions on another (tbx/tau2/grading.py). Grading them again with the current grader shows whether every verdict
is reproduced; a grader change that flips verdicts is listed episode by episode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tbx.backend.state import apply_delta
from tbx.config import Config
from tbx.errors import ConfigError
from tbx.grading import grade_state
from tbx.process.durable import write_text
from tbx.records import ERROR_OUTCOMES, Outcome, StoredTry
from tbx.runs.identity import read_run_meta
from tbx.runs.results import RegradeMismatch, RegradeResult
from tbx.store.results import read_records
from tbx.tasks.loader import load_task
from tbx.tasks.model import ExpectedChange

FIELD = "regrade.run_dir"
RESTORE = "restore the run folder from a copy, or regrade another run folder"


def _load_runtimes(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Each task's stored runtime (the task, its initial state, its expected changes) by task id; a line
    that is not one is named with its file and line."""
    runtimes = {}
    for path in sorted(run_dir.glob("tasks*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                runtimes[data["task"]["id"]] = data
            except (ValueError, TypeError, KeyError) as exc:
                raise ConfigError(str(path), FIELD, f"line {number} is not a stored task ({type(exc).__name__}: "
                                  f"{str(exc)[:80]})", RESTORE) from None
    return runtimes


def _check_tasks_stored(run_dir: Path, records: list[StoredTry], runtimes: dict[str, Any]) -> None:
    """Every task a stored try played is in the run's tasks.jsonl: checked before any try is graded again."""
    missing = sorted({record.task_id for record in records} - set(runtimes))
    if missing:
        raise ConfigError(str(run_dir / "tasks.jsonl"), FIELD, f"holds no task {missing[0]!r} ({len(missing)} "
                          "task(s) its stored tries played are missing); regrade needs each task's initial state "
                          "and expected changes", RESTORE)


def regrade_record(record: StoredTry, runtime: dict[str, Any]) -> Outcome:
    """The outcome the current grader gives a stored episode (a τ²-bench episode: τ²'s own evaluator, replaying
    the stored transcript)."""
    if runtime.get("kind") == "tau2":
        from tbx.tau2.grading import regrade_transcript

        return Outcome.SUCCESS if regrade_transcript(runtime["task"], record) == 1.0 else Outcome.FAILURE
    task = load_task(runtime["task"], runtime["source"], policy_text="(stored)")
    initial = runtime["initial"]
    final = apply_delta(initial, record.final_delta)
    expected = [ExpectedChange(**e) for e in runtime["expected"]]
    verdicts = record.grade.judge if record.grade is not None else ()  # the judge's stored decisions
    grade = grade_state(initial, final, expected, runtime["volatile"], task.checks.loose, task.checks.judge,
                        verdicts if (verdicts or not task.checks.judge) else None)
    if grade.passed is None:
        return Outcome.EXCLUDED
    return Outcome.SUCCESS if grade.passed else Outcome.FAILURE


def run_regrade(cfg: Config) -> RegradeResult:
    if not cfg.regrade.run_dir:
        raise ConfigError("conf/config.yaml", "regrade.run_dir", "is empty", "give regrade.run_dir=RUN_FOLDER")
    run_dir = Path(cfg.regrade.run_dir)
    if not (run_dir / "results.sqlite").is_file() and not cfg.store.url:
        raise ConfigError(str(run_dir), "regrade.run_dir", "holds no results.sqlite",
                          "point it at an eval or probe run folder (or give store.url)")
    if not (run_dir / "run.json").is_file():
        raise ConfigError(str(run_dir / "run.json"), FIELD, "is missing; it holds the run's identity, which names "
                          "its stored tries", RESTORE)
    try:
        run_id = read_run_meta(run_dir / "run.json")["identity"]
    except (ConfigError, KeyError) as exc:
        problem = exc.problem if isinstance(exc, ConfigError) else "is damaged (no identity)"
        raise ConfigError(str(run_dir / "run.json"), FIELD, problem, RESTORE) from None
    records = read_records(cfg.store.url or run_dir, run_id, FIELD, RESTORE)
    runtimes = _load_runtimes(run_dir)
    _check_tasks_stored(run_dir, records, runtimes)
    checked, reproduced, mismatches = 0, 0, []
    for record in records:
        if record.final_delta is None or record.outcome in ERROR_OUTCOMES:
            continue  # no verdict was reached: nothing to reproduce
        if record.outcome is Outcome.ABANDONED:
            continue  # the verdict is that the agent left, whatever state it left
        outcome = regrade_record(record, runtimes[record.task_id])
        checked += 1
        if outcome is record.outcome:
            reproduced += 1
        else:
            mismatches.append(RegradeMismatch(record.task_id, record.attempt, record.outcome.value, outcome.value))
    summary = RegradeResult(run_dir=str(run_dir), checked=checked, reproduced=reproduced, mismatches=tuple(mismatches))
    text = json.dumps(summary.to_json(), indent=2)
    write_text(run_dir / "regrade.json", text, "regrade.run_dir")
    if cfg.summary_path:
        write_text(cfg.summary_path, text, "summary_path")
    print(f"regrade {run_dir}: {reproduced}/{checked} verdicts reproduced, {len(mismatches)} differ")
    for item in mismatches[:20]:
        print(f"  {item.task_id} attempt {item.attempt}: stored {item.stored}, now {item.regraded}")
    return summary
