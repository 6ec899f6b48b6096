"""stage=select: from a probe run to a frozen pool manifest.

Each probed task gets its Jeffreys posterior and band (`tbx.stats.difficulty`); the `pool` strategy
keeps some bands (`tbx.stats.pool`). The manifest lists every task with k, n, band, posterior mean and
90% interval, whether it is kept, the probe run, the settings, and a content hash. Training
reads only the manifest and records its hash: selection happens once, and the pool never
changes during a run.

    python launch.py stage=select select.probe_run=outputs/probe-train-... pool=lora
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import yaml

from tbx.config import Config, plain
from tbx.errors import ConfigError
from tbx.process.durable import write_text
from tbx.records import Outcome, PoolManifest, PoolTask, StoredTry
from tbx.report.band_histogram import plot_band_histogram
from tbx.runs.identity import read_run_meta, resolve_run_dir, save_run_meta
from tbx.runs.results import PoolSelection
from tbx.runs.sinks import stage_sink
from tbx.stats.difficulty import describe, validate_band_names, validate_edges
from tbx.stats.pool import PoolStrategy, select_pool
from tbx.store.results import read_records


def probe_counts(records: list[StoredTry]) -> dict[str, PoolTask]:
    """k, n, errors and labels per task from stored probe tries (the last try of each attempt), as the pool's
    rows before selection."""
    last: dict[tuple[str, int], StoredTry] = {}
    for record in records:
        last[(record.task_id, record.attempt)] = record
    tasks: dict[str, PoolTask] = {}
    for (task_id, _), record in sorted(last.items()):
        task = tasks.get(task_id) or PoolTask(id=task_id, domain=record.domain, family=record.family)
        if record.outcome in (Outcome.SUCCESS, Outcome.FAILURE):
            task = replace(task, k=task.k + (record.outcome is Outcome.SUCCESS), n=task.n + 1)
        elif record.outcome is not Outcome.EXCLUDED:
            task = replace(task, errors=task.errors + 1)
        tasks[task_id] = task
    return tasks


def build_manifest(cfg: Config, probe_dir: Path, records: list[StoredTry]) -> PoolManifest:
    edges = validate_edges(cfg.difficulty.edges)
    names = validate_band_names(cfg.difficulty.names, edges)
    strategy = PoolStrategy(cfg.pool.name, tuple(tuple(r) for r in cfg.pool.keep_ranges))
    tasks = probe_counts(records)
    unjudged = sorted(t for t, e in tasks.items() if e.n == 0)
    difficulties = {t: describe(e.k, e.n, edges) for t, e in tasks.items() if e.n > 0}
    selection = select_pool(difficulties, strategy, edges)
    kept = set(selection.kept)
    rows = []
    for task_id, counted in sorted(tasks.items()):
        d = difficulties.get(task_id)
        rows.append(replace(counted, kept=task_id in kept, band=None if d is None else names[d.band],
                            mean=None if d is None else d.mean, interval=None if d is None else tuple(d.interval),
                            masses=None if d is None else tuple(d.masses)))
    probe_meta = read_run_meta(probe_dir / "run.json")
    probe_tasks = yaml.safe_load((probe_dir / "config.yaml").read_text())["tasks"]  # as run, paths included
    return PoolManifest(
        probe_run=str(probe_dir.resolve()), probe_run_id=probe_meta["identity"],
        probe_settings=probe_meta["settings"] | {"tasks": probe_tasks},
        pool=plain(cfg.pool), difficulty=plain(cfg.difficulty),
        kept=selection.kept, dropped=selection.dropped, no_verdict=tuple(unjudged),
        band_counts=dict(zip(names, selection.band_counts, strict=True)), tasks=tuple(rows),
    ).sealed()


def format_pool(manifest: PoolManifest) -> str:
    lines = [f"{'band':16s} {'tasks':>6s}  kept"]
    kept_bands = {row.band for row in manifest.tasks if row.kept}
    for band, count in manifest.band_counts.items():
        lines.append(f"{band:16s} {count:6d}  {'yes' if band in kept_bands else 'no'}")
    lines.append(f"pool {manifest.pool['name']}: {len(manifest.kept)} of {len(manifest.tasks)} tasks kept "
                 f"(hash {manifest.hash})")
    return "\n".join(lines)


def run_select(cfg: Config) -> PoolSelection:
    if not cfg.select.probe_run:
        raise ConfigError("conf/config.yaml", "select.probe_run", "is empty", "give select.probe_run=PROBE_RUN_FOLDER")
    probe_dir = Path(cfg.select.probe_run)
    if not (probe_dir / "run.json").is_file():
        raise ConfigError(str(probe_dir), "select.probe_run", "is not a probe run folder (no run.json)",
                          "point it at the folder stage=probe printed")
    probe_id = read_run_meta(probe_dir / "run.json")["identity"]
    records = read_records(cfg.store.url or probe_dir, probe_id, "select.probe_run")
    if not records:
        raise ConfigError(str(probe_dir), "select.probe_run", "holds no probe attempts", "run stage=probe first")
    manifest = build_manifest(cfg, probe_dir, records)
    run_dir = resolve_run_dir(cfg)
    save_run_meta(run_dir, cfg)
    text = json.dumps(manifest.to_dict(), indent=2)
    write_text(run_dir / "pool.json", text)
    if cfg.select.manifest_path:
        write_text(cfg.select.manifest_path, text, "select.manifest_path")
    difficulties = {row.id: describe(row.k, row.n, cfg.difficulty.edges) for row in manifest.tasks if row.n > 0}
    plot_band_histogram(difficulties, cfg.difficulty.edges, cfg.difficulty.names, list(manifest.kept),
                        run_dir / "bands.png")
    with stage_sink(cfg, run_dir) as sink:
        sink.log({"pool/kept": len(manifest.kept), "pool/tasks": len(manifest.tasks)}
                 | {f"pool/band/{band}": count for band, count in manifest.band_counts.items()})
        sink.table("pool/tasks", ["task", "domain", "family", "k", "n", "band", "mean", "kept"],
                   [[r.id, r.domain, r.family, r.k, r.n, r.band, r.mean, r.kept] for r in manifest.tasks])
        sink.image("pool/bands", run_dir / "bands.png")
    print(format_pool(manifest) + f"\n-> {run_dir / 'pool.json'}")
    return PoolSelection(run_dir=str(run_dir), manifest=str(run_dir / "pool.json"), hash=manifest.hash,
                         plot=str(run_dir / "bands.png"), kept=len(manifest.kept), n_tasks=len(manifest.tasks))
