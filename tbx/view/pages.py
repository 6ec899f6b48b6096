"""The viewer's pages as HTML: what each page shows, read from stored runs, rendered by Jinja2 templates.

Every function takes runs and a `links` (served URLs or export file names) and returns a page; nothing
here serves or writes files. Numbers come from the same functions as the report's (tbx.stats.metrics,
tbx.stats.paired), over the final try of each attempt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, select_autoescape

from tbx.backend.state import canonical
from tbx.records import StoredTry
from tbx.stats.metrics import attempt_tally, bootstrap_ci, outcomes_from_records, summarize
from tbx.stats.paired import paired_difference
from tbx.view.store import JUDGE_DECISIONS, OUTCOMES, AttemptFilter, AttemptRow, StoredRun

HEADLINE_RESAMPLES = 1000


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("tbx.view", "templates"), autoescape=select_autoescape(),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda v: "n/a" if v is None else f"{100 * v:.1f}"
    env.filters["usd"] = lambda v: "n/a" if v is None else f"${v:,.4f}"  # None: not known, never $0
    env.filters["count"] = lambda v: "n/a" if v is None else f"{v:,}"
    env.filters["pretty"] = lambda v: json.dumps(v, indent=1, ensure_ascii=False, default=str)
    return env


def render(template: str, links: Any, **context: Any) -> str:
    return environment().get_template(template).render(links=links, **context)


# --- runs -------------------------------------------------------------------------------------------

def _outcomes(rows: Sequence[AttemptRow]) -> tuple[dict[str, list[bool]], dict[str, str], dict[str, int]]:
    return outcomes_from_records(rows)


def _rates(outcomes: dict[str, list[bool]], k: int, rng: np.random.Generator) -> dict[str, Any] | None:
    """pass@1, pass@k, observed k/k with their intervals; None when no attempt reached a verdict."""
    if not any(outcomes.values()):
        return None
    summary = summarize(outcomes, attempts=k, allow_incomplete=True)
    ci = bootstrap_ci(outcomes, rng, attempts=k, allow_incomplete=True, resamples=HEADLINE_RESAMPLES)
    return {"tasks": summary.n_tasks, "attempts": summary.attempts, "pass_at_1": ci.pass_at_1,
            "pass_at_k": ci.pass_at_k, "observed_all": ci.observed_all}


def _known_sum(values: list[Any]) -> Any:
    """The sum, or None (n/a) when one value is not known."""
    return None if any(v is None for v in values) else sum(values)


def headline(run: StoredRun) -> dict[str, Any]:
    """The run's headline, overall and per domain, with abandoned attempts (counted as failures), errors
    and the bill of its final tries (n/a where tbx cannot know it)."""
    rows = run.rows()
    outcomes, domains, errors = _outcomes(rows)
    rng = np.random.default_rng(0)
    groups = {"all": outcomes} | {d: {t: v for t, v in outcomes.items() if domains[t] == d}
                                  for d in sorted(set(domains.values()))}
    lines = []
    for name, group in groups.items():
        in_group = [r for r in rows if name == "all" or r.domain == name]
        lines.append({"name": name, "rates": _rates(group, run.k, rng),
                      "abandoned": sum(r.outcome == "abandoned" for r in in_group),
                      "errors": sum(r.outcome not in ("success", "failure", "abandoned") for r in in_group),
                      "cost": _known_sum([run.cost(r.tokens, r.cost_usd) for r in in_group]),
                      "tokens": _known_sum([run.tokens(r.tokens) for r in in_group]), "attempts": len(in_group)})
    asked = set(run.meta.get("tasks") or ()) | set(outcomes)  # the run's task set (run.json), else as stored
    tally = attempt_tally(rows, asked, run.k) if run.stage in ("eval", "serve") else None  # k attempts asked
    return {"run": run, "lines": lines, "errors": {k: v for k, v in errors.items() if v}, "tally": tally}


def runs_page(runs: Sequence[StoredRun], links: Any, curves: dict[int, bool]) -> str:
    return render("runs.html", links, runs=runs, headlines=[headline(r) for r in runs], curves=curves)


# --- attempts ---------------------------------------------------------------------------------------

def attempts_page(run: StoredRun, links: Any, filt: AttemptFilter, page: int, page_size: int) -> str:
    rows = run.rows()
    judge = run.judge_decisions() if filt.judge else None
    kept = [r for r in rows if filt.keeps(r, judge)]
    pages = max(1, -(-len(kept) // page_size))
    page = min(max(1, page), pages)
    shown = kept[(page - 1) * page_size:page * page_size]
    records = run.records((r.task_id, r.attempt) for r in shown)
    causes = {key: (rec.cause, rec.counts.get("turns", 0)) for key, rec in records.items()}
    return render("attempts.html", links, run=run, rows=shown, causes=causes, filt=filt, page=page, pages=pages,
                  total=len(rows), matched=len(kept), outcomes=OUTCOMES, decisions=JUDGE_DECISIONS,
                  domains=sorted({r.domain for r in rows}), families=sorted({r.family for r in rows}))


# --- an episode -------------------------------------------------------------------------------------

def transcript(record: StoredTry) -> list[dict[str, Any]]:
    """The conversation as the page shows it: each message with its role, and a tool result with the name
    of the call it answers."""
    names = {}
    items = []
    for message in record.transcript:
        for call in message.tool_calls:
            names[call.id] = call.name
        items.append({"role": message.role, "content": message.content, "calls": message.tool_calls,
                      "is_error": message.is_error, "answers": names.get(message.tool_call_id, message.name)})
    return items


def _row_diff(change: dict[str, Any], spec: dict[str, Any] | None) -> dict[str, Any]:
    """One changed row: per column before, after, what the task expected, whether it changed or mismatches."""
    before, after = change.get("before") or {}, change.get("after") or {}
    expected = (spec or {}).get("values", {})
    names = list(dict.fromkeys([*before, *after, *expected]))
    changed = set(change.get("columns", []))
    cells = [{"column": c, "before": before.get(c), "after": after.get(c),
              "expected": expected.get(c, ""), "has_expected": c in expected, "changed": c in changed,
              "mismatch": c in expected and canonical(expected[c]) != after.get(c)} for c in names]
    return {"op": change.get("op"), "table": change.get("table"), "key": change.get("key"), "cells": cells}


def _unchanged(spec: dict[str, Any] | None, task: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What the terminal state holds where a failing check found no change to compare: the row the
    expected update or delete names, as it was before (the run changed nothing in it, so it is the
    terminal row too), or for a missing insert, no new row; each beside the expected values."""
    if spec is None or task is None:
        return []
    table = spec.get("table")
    if spec.get("op") == "insert":
        return [_row_diff({"op": "no new row in", "table": table, "key": None}, spec)]
    key = {c: canonical(v) for c, v in (spec.get("key") or {}).items()}
    rows = (task.get("initial") or {}).get(table, {}).get("rows", [])
    row = next((r for r in rows if all(r.get(c) == v for c, v in key.items())), None)
    op = "unchanged (terminal = before)" if row is not None else "no such row, before or after"
    return [_row_diff({"op": op, "table": table, "key": spec.get("key"), "before": row, "after": row}, spec)]


def verdict(record: StoredTry, task: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The grade's checks, each with its row diff: expected vs terminal rows (for a failing check that found
    no change, the row as it stands), and the extra side effects (the rows of "no other change") marked."""
    specs = (task or {}).get("expected", [])
    checks = []
    for check in record.grade.checks if record.grade is not None else ():
        name = check.name
        spec = None
        if name.startswith("expected[") and "]" in name:
            index = int(name[len("expected["):name.index("]")])
            spec = specs[index] if index < len(specs) else None
        extra = name == "no other change"
        # a row may carry its own expected values (a τ²-bench record against the gold actions' record)
        rows = [_row_diff(r, spec if "expected" not in r else {"values": r["expected"]}) for r in check.rows]
        if not rows and not check.passed:
            rows = _unchanged(spec, task)
        checks.append({"name": name, "passed": check.passed, "detail": check.detail, "extra": extra,
                       "spec": spec, "rows": rows, "expected_column": spec is not None
                       or any("expected" in r for r in check.rows)})
    return checks


def judge_rules(task: dict[str, Any] | None, record: StoredTry) -> list[dict[str, Any]]:
    """Each judge rule of the task with the judge's decision and evidence on it."""
    rules = {r.get("id", ""): r for r in ((task or {}).get("task", {}).get("checks", {}).get("judge") or [])}
    verdicts = {v.rule_id: v for v in (record.grade.judge if record.grade is not None else ())}
    return [{"id": rule_id, "rule": rules.get(rule_id, {}), "verdict": verdicts.get(rule_id)}
            for rule_id in dict.fromkeys([*rules, *verdicts])]


def episode_context(run: StoredRun, task_id: str, attempt: int) -> dict[str, Any] | None:
    tries = run.tries(task_id, attempt)
    if not tries:
        return None
    record, task = tries[-1], run.task(task_id)
    return {"run": run, "record": record, "task": task, "tries": tries, "transcript": transcript(record),
            "checks": verdict(record, task), "judge": judge_rules(task, record),
            "usage": {role: u.prompt_tokens + u.completion_tokens for role, u in record.usage.items()}
                     | dict.fromkeys(run.unseen),  # None: never seen by tbx
            "cost": run.cost(sum(u.prompt_tokens + u.completion_tokens for u in record.usage.values()),
                             record.cost_usd or 0.0),
            "weights": run.meta.get("engine", {}).get("weights"),
            "engine": run.meta.get("engine", {}), "run_seed": run.meta.get("settings", {}).get("seed")}


def episode_page(run: StoredRun, links: Any, task_id: str, attempt: int) -> str | None:
    context = episode_context(run, task_id, attempt)
    return None if context is None else render("episode.html", links, e=context)


# --- compare ----------------------------------------------------------------------------------------

def _by_task(rows: Sequence[AttemptRow]) -> dict[str, dict[int, AttemptRow]]:
    tasks: dict[str, dict[int, AttemptRow]] = {}
    for r in rows:
        tasks.setdefault(r.task_id, {})[r.attempt] = r
    return tasks


def compare_context(base: StoredRun, new: StoredRun) -> dict[str, Any]:
    """Per shared task: successes / judged attempts in each run, the change, and each run's row of attempt
    outcomes (one column per attempt, "missing" where a run has none); the paired difference with its
    interval (same k only)."""
    a, b = _by_task(base.rows()), _by_task(new.rows())
    base_outcomes, new_outcomes = _outcomes(base.rows())[0], _outcomes(new.rows())[0]
    tasks = []
    for task_id in sorted(set(a) & set(b)):
        x, y = base_outcomes.get(task_id, []), new_outcomes.get(task_id, [])
        rate_x, rate_y = (sum(x) / len(x) if x else None), (sum(y) / len(y) if y else None)
        change = None if rate_x is None or rate_y is None else rate_y - rate_x
        attempts = sorted(set(a[task_id]) | set(b[task_id]))
        grid = [(run, [(n, row.outcome if row else "missing") for n in attempts for row in [rows.get(n)]])
                for run, rows in ((base, a[task_id]), (new, b[task_id]))]
        tasks.append({"id": task_id, "domain": next(iter(a[task_id].values())).domain, "base": (sum(x), len(x)),
                      "new": (sum(y), len(y)), "change": change, "attempts": attempts, "grid": grid})
    tasks.sort(key=lambda t: (-(abs(t["change"]) if t["change"] else 0), t["id"]))
    paired = (paired_difference(base_outcomes, new_outcomes, base.k, np.random.default_rng(0))
              if base.k == new.k else None)
    return {"base": base, "new": new, "tasks": tasks, "paired": paired,
            "flipped": sum(1 for t in tasks if t["change"]), "only_base": len(set(a) - set(b)),
            "only_new": len(set(b) - set(a))}


def compare_page(base: StoredRun, new: StoredRun, links: Any) -> str:
    return render("compare.html", links, c=compare_context(base, new))


def pair_page(base: StoredRun, new: StoredRun, links: Any, task_id: str, attempt: int) -> str | None:
    left, right = episode_context(base, task_id, attempt), episode_context(new, task_id, attempt)
    if left is None and right is None:
        return None
    return render("pair.html", links, base=base, new=new, left=left, right=right, task_id=task_id, attempt=attempt)
