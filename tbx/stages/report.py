"""stage=report: compare evaluated runs (base first) in tables and figures.

    python launch.py stage=report 'runs=[outputs/eval-travel-null-…,outputs/eval-travel-oracle-…]'

Writes report.md and PNGs into the report's run folder: before/after, models side by side
(best and second best marked), cost and reliability, the attempts of the tasks that changed as a
grid, a per-domain heat map, pass@k and pass^k curves. Runs are labelled by the agent that played
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
from tbx.cost import parse_price_table
from tbx.errors import ConfigError
from tbx.metrics import IncompleteInventoryError
from tbx.records import StoredTry
from tbx.report import INTERVAL_COLUMNS, RunData, render_report
from tbx.runs import read_run_meta, resolve_run_dir, save_run_meta
from tbx.sinks import stage_sink
from tbx.stage_results import ReportResult
from tbx.store.results import read_records
from tbx.traits import traits_of
from tbx.view import viewer_command


def _plays_model(target: str) -> bool:
    """Whether the policy a stored run names played its model; a custom policy that cannot be imported
    here is labelled by its own name, like the policies that play none."""
    try:
        return traits_of(target, "policy").plays_model
    except ConfigError:
        return False


def _agent_model(run_cfg: dict[str, Any]) -> tuple[str, float, float]:
    """The agent that played the run (as labels name it) and its prices per million tokens."""
    if run_cfg["stage"]["name"] == "serve":  # an agent outside tbx: its own name; tbx sees no tokens of it
        return run_cfg["serve"]["agent_name"], 0.0, 0.0
    policy, model = run_cfg["policy"], run_cfg["model"]
    if not _plays_model(policy["_target_"]):
        return policy["name"], 0.0, 0.0  # oracle, null, replay: no model tokens
    prices_in = model["price_input_per_mtok"] or model["endpoint"]["price_input_per_mtok"]
    prices_out = model["price_output_per_mtok"] or model["endpoint"]["price_output_per_mtok"]
    return model["name"], prices_in, prices_out


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
    agent, price_in, price_out = _agent_model(run_cfg)
    table = {agent: {"input": price_in, "output": price_out}}
    roles = {}
    for role in ("user", "judge"):
        endpoint = run_cfg[role]["endpoint"]
        if endpoint["model"]:
            roles[role] = endpoint["model"]
            table[endpoint["model"]] = {"input": endpoint["price_input_per_mtok"],
                                        "output": endpoint["price_output_per_mtok"]}
    return RunData(name=name or agent, records=list(finals.values()), model_name=agent,
                   prices=parse_price_table(table, f"{run_dir}/config.yaml"), k=run_cfg["eval"]["attempts"],
                   user_model=roles.get("user", ""), judge_model=roles.get("judge", ""),
                   allow_incomplete=allow_incomplete, billed_records=tries, tasks=meta.get("tasks"))


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
