"""Summaries of episode outcomes (pure).

pass@1 is the mean success over attempts that reached a verdict: error outcomes and exclusions
are reported beside it, never counted as failures.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from tbx.episodes.record import ERROR_OUTCOMES, Outcome

VERDICTS = (Outcome.SUCCESS, Outcome.FAILURE)


def _rate(counts: Counter) -> float | None:
    judged = counts[Outcome.SUCCESS.value] + counts[Outcome.FAILURE.value]
    return counts[Outcome.SUCCESS.value] / judged if judged else None


def _group(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    counts: Counter = Counter()
    tasks = set()
    for record in records:
        counts[record["outcome"]] += 1
        tasks.add(record["task_id"])
    return {
        "n_tasks": len(tasks),
        "episodes": sum(counts.values()),
        "pass_at_1": _rate(counts),
        "counts": {o.value: counts[o.value] for o in Outcome},
        "errors": sum(counts[o.value] for o in ERROR_OUTCOMES),
    }


def outcome_summary(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Summary of final episode records (dicts as stored): overall, per domain, per family."""
    summary = _group(records)
    by_domain: dict[str, list] = defaultdict(list)
    by_family: dict[str, list] = defaultdict(list)
    for record in records:
        by_domain[record["domain"]].append(record)
        by_family[f"{record['domain']}/{record['family']}"].append(record)
    summary["by_domain"] = {name: _group(rs) for name, rs in sorted(by_domain.items())}
    summary["by_family"] = {name: _group(rs) for name, rs in sorted(by_family.items())}
    tokens: Counter = Counter()
    tools: Counter = Counter()
    for record in records:
        for role, usage in record["usage"].items():
            for kind, value in usage.items():
                tokens[f"{role}_{kind}"] += value
        tools.update(record["counts"])
    summary["tokens"] = dict(tokens)
    summary["tool_calls"] = tools["tool_calls"]
    summary["tool_errors"] = tools["tool_errors"]
    summary["malformed_calls"] = tools["malformed_calls"]
    return summary


def format_summary(summary: Mapping[str, Any], title: str) -> str:
    """A plain-text table for the terminal."""
    def pct(value: float | None) -> str:
        return "   n/a" if value is None else f"{100 * value:6.1f}%"

    lines = [title, f"{'group':40s} {'tasks':>6s} {'eps':>6s} {'pass@1':>7s} {'succ':>5s} {'fail':>5s} "
             f"{'error':>5s} {'excl':>5s}"]
    rows = [("all", summary)] + list(summary["by_family"].items())
    for name, group in rows:
        c = group["counts"]
        lines.append(f"{name[:40]:40s} {group['n_tasks']:6d} {group['episodes']:6d} {pct(group['pass_at_1'])} "
                     f"{c['success']:5d} {c['failure']:5d} {group['errors']:5d} {c['excluded']:5d}")
    return "\n".join(lines)
