"""The report's three tables, as plain data (for W&B or JSON) and as Markdown.

Table 1 compares each run with the first (the base); Table 2 puts the runs side by side and, with
three runs or more, marks the best and second-best value of each column (only a value one run holds
alone: a tie is no one's best); Table 3 is cost and reliability. Percentages are kept in percent,
changes in percentage points (pp); costs in USD; None means "not defined" or "not known" (no task at
k/k, so no cost per reliable task; a model with no price; a served agent's tokens), shown as n/a.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tbx.report.data import Comparison, RunStats

BEST, SECOND = "best", "second"
MARKED_RUNS = 3  # known values a column needs before it marks any: of two, Table 1 says which is higher


@dataclass(frozen=True)
class Table:
    """`rows` holds plain values; `text` the same cells formatted; `marks` "", "best" or "second"."""

    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    text: tuple[tuple[str, ...], ...]
    marks: tuple[tuple[str, ...], ...]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "columns": list(self.columns),
                "rows": [list(r) for r in self.rows], "marks": [list(m) for m in self.marks]}

    def to_markdown(self) -> str:
        def cell(text: str, mark: str) -> str:
            return f"**{text}**" if mark == BEST else f"_{text}_" if mark == SECOND else text

        text_columns = [all(isinstance(row[i], str) for row in self.rows) for i in range(len(self.columns))]
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" if is_text else "---:" for is_text in text_columns) + "|"]
        for text, marks in zip(self.text, self.marks, strict=True):
            lines.append("| " + " | ".join(cell(t, m) for t, m in zip(text, marks, strict=True)) + " |")
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def count(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def usd(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"${value:,.{digits}f}"


def _delta_pp(new: float, base: float) -> str:
    return f"{100 * (new - base):+.2f} pp"


def _delta_count(new: int, base: int, with_ratio: bool) -> str:
    ratio = f" (×{new / base:.1f})" if with_ratio and base else ""
    return f"{new - base:+,d}{ratio}"


def _delta_usd(new: float | None, base: float | None) -> str:
    return "n/a" if new is None or base is None else f"{'+' if new >= base else '-'}${abs(new - base):,.2f}"


RATE, COUNT, RATIO, USD = "rate", "count", "count with ratio", "usd"


def _metric_rows(k: int) -> list[tuple[str, Callable[[RunStats], Any], str]]:
    """(label, value of a run, kind) for Table 1; the reliable-task count also shows its ratio."""
    rows = [
        ("pass@1 (%)", lambda s: s.summary.pass_at_1, RATE),
        (f"pass@{k} (%)", lambda s: s.summary.pass_at_k, RATE),
        (f"pass^{k} (%)", lambda s: s.summary.pass_hat_k, RATE),  # τ²-bench's figure: solved in all k (unbiased)
        (f"observed {k}/{k} (%)", lambda s: s.summary.observed_all, RATE),
        ("successful attempts", lambda s: s.summary.successes, COUNT),
        ("judged attempts", lambda s: s.summary.attempts, COUNT),
        (f"tasks at {k}/{k}", lambda s: s.summary.tasks_all, RATIO),
        ("tasks solved at least once", lambda s: s.summary.tasks_any, COUNT),
        ("errors and exclusions (not failures)", lambda s: sum(s.errors.values()), COUNT),
        (f"cost per reliable ({k}/{k}) task (USD)", lambda s: s.reliability.per_reliable_task, USD),
    ]
    return rows if k > 1 else rows[:1] + rows[3:]  # with k = 1, pass@k and pass^k are pass@1


def _rate_field(label: str) -> str:
    """The Summary field behind a rate row of Table 1 (labels as _metric_rows writes them)."""
    if label == "pass@1 (%)":
        return "pass_at_1"
    return "pass_at_k" if label.startswith("pass@") else "observed_all"


def _paired_cell(comparison: Comparison, label: str) -> tuple[list[float] | None, str]:
    """The paired change of one rate with its interval: plain [estimate, low, high] in pp, and text."""
    paired = comparison.overall
    if paired is None:
        return None, "no shared task"
    if label.startswith("pass^"):  # the paired bootstrap covers pass@1, pass@k and observed k/k
        return None, ""
    i = paired.interval(_rate_field(label))
    plain = [round(100 * v, 6) for v in (i.estimate, i.low, i.high)]
    return plain, f"{100 * i.estimate:+.2f} [{100 * i.low:+.2f}, {100 * i.high:+.2f}]"


def before_after_table(stats: Sequence[RunStats], comparisons: Sequence[Comparison] = ()) -> Table:
    """Table 1: the first run is the base; every other run gets its value, its change and, for rates, the
    paired change on the tasks both share with its bootstrap interval (`comparisons`, one per other run)."""
    base, news = stats[0], stats[1:]
    k = base.summary.k
    by_name = {c.new.name: c for c in comparisons}
    columns = ["metric", base.name]
    for s in news:
        columns += [s.name, f"change ({s.name})"] + ([f"paired change, 95% CI ({s.name})"] if s.name in by_name else [])
    rows, text = [], []
    for label, value, kind in _metric_rows(k):
        is_rate = kind == RATE
        row: list[Any] = [label, _plain(value(base), is_rate)]
        cells = [label, _text(value(base), kind)]
        for s in news:
            new, old = value(s), value(base)
            row += [_plain(new, is_rate), _change(new, old, kind)]
            cells += [_text(new, kind), _delta_text(new, old, kind)]
            if s.name in by_name:
                plain, cell = _paired_cell(by_name[s.name], label) if is_rate else (None, "")
                row.append(plain)
                cells.append(cell)
        rows.append(tuple(row))
        text.append(tuple(cells))
    note = (f"{base.summary.n_tasks} tasks × {k} attempts. Changes in percentage points (pp) for rates, "
            "in counts (× ratio) otherwise. Errors and exclusions are not counted as failures.")
    for c in comparisons:
        if c.overall is not None:
            p = c.overall
            note += (f" Paired change ({c.new.name}): new − base on the {p.n_tasks} tasks both ran, with the "
                     f"{int(100 * p.level)}% percentile interval of a bootstrap over those tasks ({p.resamples:,} "
                     f"resamples; a task's attempts in both runs stay together; where both runs are all 0 or all "
                     f"1 on a rate, the square-and-add of their Jeffreys intervals, so it keeps its width); "
                     f"{p.better} tasks better, {p.worse} worse.")
    title = (f"Table 1. Before/after: {base.name} (base) vs {', '.join(s.name for s in news)}" if news
             else f"Table 1. {base.name} (no second run to compare)")
    return Table("table1_before_after", title, tuple(columns), tuple(rows), tuple(text),
                 tuple(("",) * len(columns) for _ in rows), note)


def _plain(value: float | int | None, is_rate: bool) -> float | int | None:
    return round(100 * value, 6) if is_rate and value is not None else value


def _text(value: Any, kind: str) -> str:
    return pct(value) if kind == RATE else usd(value) if kind == USD else count(value)


def _change(new: Any, old: Any, kind: str) -> float | int | None:
    if new is None or old is None:
        return None
    return round(100 * (new - old), 6) if kind == RATE else round(new - old, 6) if kind == USD else new - old


def _delta_text(new: Any, old: Any, kind: str) -> str:
    if kind == RATE:
        return _delta_pp(new, old)
    return _delta_usd(new, old) if kind == USD else _delta_count(new, old, kind == RATIO)


def rank_marks(values: Sequence[float | None], higher_is_better: bool = True) -> list[str]:
    """'best' for the best value and 'second' for the next, each only where one cell alone holds it (a
    tie is no one's best, and a second place is only second after a best), among three known values or
    more (of two, a mark only restates which is higher); None (not known) is unranked."""
    known = [v for v in values if v is not None]
    if len(known) < MARKED_RUNS:
        return [""] * len(values)
    distinct = sorted(set(known), reverse=higher_is_better)
    marks: dict[float, str] = {}
    for value, mark in zip(distinct[:2], (BEST, SECOND), strict=False):
        if known.count(value) > 1:
            break
        marks[value] = mark
    return [marks.get(v, "") if v is not None else "" for v in values]


def _ranked_table(name: str, title: str, stats: Sequence[RunStats],
                  columns: Sequence[tuple[str, Callable[[RunStats], Any], Callable[[Any], str], bool | None]],
                  note: str) -> Table:
    """One row per run; column = (label, value, format, higher is better; None = not ranked)."""
    rows = [tuple([s.name] + [value(s) for _, value, _, _ in columns]) for s in stats]
    text = [tuple([s.name] + [fmt(value(s)) for _, value, fmt, _ in columns]) for s in stats]
    marks_by_column = [[""] * len(stats)]
    for i, (_, _, _, higher) in enumerate(columns, start=1):
        values = [r[i] for r in rows]
        marks_by_column.append([""] * len(stats) if higher is None else rank_marks(values, higher))
    marks = [tuple(col[r] for col in marks_by_column) for r in range(len(stats))]
    header = ("run",) + tuple(label for label, _, _, _ in columns)
    return Table(name, title, header, tuple(rows), tuple(text), tuple(marks), note)


def side_by_side_table(stats: Sequence[RunStats]) -> Table:
    """Table 2: runs side by side; with three runs or more, per column the best value in bold, the second
    underlined (a value one run holds alone)."""
    k = stats[0].summary.k
    columns = [
        ("model", lambda s: s.run.model_name, str, None),
        ("pass@1 (%)", lambda s: round(100 * s.summary.pass_at_1, 6), lambda v: f"{v:.2f}", True),
        (f"pass@{k} (%)", lambda s: round(100 * s.summary.pass_at_k, 6), lambda v: f"{v:.2f}", True),
        (f"observed {k}/{k} (%)", lambda s: round(100 * s.summary.observed_all, 6), lambda v: f"{v:.2f}", True),
        ("successful attempts", lambda s: s.summary.successes, count, True),
        (f"tasks at {k}/{k}", lambda s: s.summary.tasks_all, count, True),
        ("tasks solved at least once", lambda s: s.summary.tasks_any, count, True),
    ]
    if k == 1:  # pass@k is pass@1
        del columns[2]
    note = ("No single metric ranks the models: read coverage (pass@k) and repeatability (observed k/k) "
            "together.")
    if len(stats) >= MARKED_RUNS:
        note = "Bold: best in the column; underlined (_…_): second best (a tie is marked neither way). " + note
    return _ranked_table("table2_side_by_side", "Table 2. Models side by side", stats, columns, note)


def cost_table(stats: Sequence[RunStats]) -> Table:
    """Table 3: evaluation cost and what it buys (lower cost is better: with three runs or more, bold best,
    underlined second); a cost or token count tbx cannot know is n/a and never ranked."""
    k = stats[0].summary.k

    def tokens(role: str) -> Callable[[RunStats], int | None]:
        return lambda s: s.cost.by_role()[role].tokens if role in s.cost.by_role() else 0

    columns = [
        ("campaign cost (USD)", lambda s: s.reliability.campaign_usd, usd, False),
        ("cost per success (USD)", lambda s: s.reliability.per_success, lambda v: usd(v, 3), False),
        (f"cost per reliable ({k}/{k}) task (USD)", lambda s: s.reliability.per_reliable_task, usd, False),
        ("agent tokens", tokens("agent"), count, None),
        ("user tokens", tokens("user"), count, None),
        ("judge tokens", tokens("judge"), count, None),
        ("total tokens", lambda s: s.cost.tokens, count, None),
    ]
    note = (f"Campaign cost = measured tokens × per-model prices over every recorded episode (errors "
            f"included); cost per reliable task = campaign cost ÷ tasks at {k}/{k}, n/a when no task is "
            "reliable. n/a also where tbx cannot know: a model with no price (0 in and out, the default), and "
            "a served agent's tokens (it runs outside tbx). Probing and training are not included.")
    return _ranked_table("table3_cost", "Table 3. Cost and reliability", stats, columns, note)
