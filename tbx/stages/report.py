"""stage=report: compare evaluated runs (base first) in tables and figures.

    python launch.py stage=report 'runs=[outputs/eval-travel-null-…,outputs/eval-travel-oracle-…]'

Writes report.md and PNGs into the report's run folder (named by the runs' identities): before/after,
models side by side (best and second best marked among three runs or more, never on a tie), cost and
reliability (n/a where tbx cannot know a cost), the attempts of the tasks that changed as a grid, a
per-domain heat map, pass@k and pass^k curves. Runs are labelled by the agent that played
them (a served agent by its `serve.agent_name`). The bill covers every try (retried errors included);
a task with fewer judged attempts than asked stops the report unless `report.allow_incomplete=true`.
Runs of different k get a report per k (`k<K>/report.md`), then a one-line refusal (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.records import StoredTry
from tbx.report import INTERVAL_COLUMNS, RunData, render_report
from tbx.runs.identity import read_run_meta, resolve_run_dir, save_run_meta
from tbx.runs.results import ReportResult
from tbx.runs.sinks import stage_sink
from tbx.stats.cost import run_pricing
from tbx.stats.metrics import IncompleteInventoryError
from tbx.store.results import read_records
from tbx.view import viewer_command


def load_run(run_dir: Path, name: str, store_url: str | None, allow_incomplete: bool) -> RunData:
    """A stored eval run as the report reads it: final tries, every try for the bill, prices."""
    if not (run_dir / "run.json").is_file():
        raise ConfigError(str(run_dir), "runs", "is not a run folder (no run.json)",
                          "list the folders stage=eval printed")
    meta = read_run_meta(run_dir / "run.json")
    run_cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    tries = read_records(store_url or run_dir, meta["identity"], "runs")
    finals: dict[tuple[str, int], StoredTry] = {}
    for record in tries:
        finals[(record.task_id, record.attempt)] = record
    pricing = run_pricing(run_cfg)
    return RunData(name=name or pricing.agent, records=list(finals.values()), model_name=pricing.agent,
                   prices=pricing.prices, k=run_cfg["eval"]["attempts"], user_model=pricing.models["user"],
                   judge_model=pricing.models["judge"], allow_incomplete=allow_incomplete, billed_records=tries,
                   tasks=meta.get("tasks"), unseen_roles=pricing.unseen)


def _by_k(runs: list[RunData]) -> dict[int, list[RunData]]:
    """The runs grouped by k (attempts per task), in the order given."""
    groups: dict[int, list[RunData]] = {}
    for run in runs:
        groups.setdefault(run.k, []).append(run)
    return groups


def _render(cfg: Config, runs: list[RunData], out: Path):  # ReportFiles
    try:
        return render_report(runs, out, rng=np.random.default_rng(cfg.seed), resamples=cfg.report.resamples)
    except IncompleteInventoryError as exc:
        raise ConfigError(str(cfg.runs), "report.allow_incomplete", str(exc),
                          "re-run the missing attempts, or set report.allow_incomplete=true") from exc


def run_report(cfg: Config) -> ReportResult:
    if not cfg.runs:
        raise ConfigError("conf/config.yaml", "runs", "is empty", "give runs=[BASE_RUN,OTHER_RUN,...]")
    if cfg.report.names and len(cfg.report.names) != len(cfg.runs):
        raise ConfigError("conf/config.yaml", "report.names", f"has {len(cfg.report.names)} names for "
                          f"{len(cfg.runs)} runs", "give one name per run, or none")
    names = cfg.report.names or [""] * len(cfg.runs)
    runs = [load_run(Path(r), n, cfg.store.url, cfg.report.allow_incomplete) for r, n in zip(cfg.runs, names,
                                                                                               strict=True)]
    labels = [r.name for r in runs]
    if len(set(labels)) != len(labels):
        raise ConfigError("conf/config.yaml", "report.names", f"the runs would be labelled {labels}, and a label "
                          "names one run in every table", "give report.names=[...] with one distinct name per run")
    run_dir = resolve_run_dir(cfg)
    save_run_meta(run_dir, cfg)
    groups = _by_k(runs)
    if len(groups) > 1:
        _report_per_k(cfg, groups, run_dir)
    files = _render(cfg, runs, run_dir)
    with stage_sink(cfg, run_dir) as sink:
        _log_report(sink, files)
    print(f"report of {len(runs)} runs -> {files.markdown_path}")
    for path in files.png_paths:
        print(f"  figure {path}")
    print(f"look at the episodes: {viewer_command(cfg.runs)}")
    return ReportResult(run_dir=str(run_dir), markdown=str(files.markdown_path),
                        figures=tuple(str(p) for p in files.png_paths), tables=files.tables)


def _flat(value: Any) -> Any:
    """A cell W&B tables take: an interval [estimate, low, high] as text, everything else as it is."""
    return f"{value[0]:+.2f} [{value[1]:+.2f}, {value[2]:+.2f}]" if isinstance(value, list) else value


def _log_report(sink, files) -> None:  # a Sink, ReportFiles
    """The tables (intervals also as numeric columns), the figures, and pass@k / pass^k as line plots."""
    for index, table in enumerate(files.tables, 1):
        sink.table(f"report/table{index}", table.columns, [[_flat(v) for v in row] for row in table.rows])
    sink.table("report/intervals", INTERVAL_COLUMNS, files.intervals)
    for path in files.png_paths:
        sink.image(f"report/{path.stem}", path)
    if files.curves and len(next(iter(files.curves.values()))["ks"]) > 1:  # at k = 1 a curve is one point
        ks = next(iter(files.curves.values()))["ks"]
        for key, title in (("pass_at_k", "pass@k: solved at least once in k"), ("pass_hat_k", "pass^k: solved in all k")):
            sink.lines(f"report/{key}", ks, {name: c[key] for name, c in files.curves.items()}, title, "k")


def _report_per_k(cfg: Config, groups: dict[int, list[RunData]], run_dir: Path) -> None:
    """Runs of different k do not compare: a report per k (in k<K>/), then the one-line refusal (exit 2)."""
    written = []
    for k, group in groups.items():
        files = _render(cfg, group, run_dir / f"k{k}")
        written.append(str(files.markdown_path))
        print(f"report of the {len(group)} run(s) at k={k} -> {files.markdown_path}")
    ks = ", ".join(f"{r.name} k={r.k}" for group in groups.values() for r in group)
    raise ConfigError(str(run_dir), "runs", f"the runs have different k (attempts per task: {ks}), and pass@k "
                      "and observed k/k only compare at one k", f"read the per-k reports ({', '.join(written)}), "
                      "or compare runs evaluated with the same eval.attempts")
