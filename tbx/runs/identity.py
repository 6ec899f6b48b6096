"""Run identity and run folders.

A run is named by a hash of everything that can change its results, so the same command lands in
the same folder and resumes there, and a changed input never resumes an old run:

- every config setting, derived from the schema (`tbx/config/`): a field counts unless its
  metadata marks it as not changing results (`NOT_IDENTITY`: paths, logging, concurrency, waits),
  and a group marked `STAGE_GROUP` counts only for the stages that use it (their `uses` in
  tbx/runs/stages.py), so a new field counts until someone decides otherwise;
- the content of what paths name (`CONTENT`: a replay file or run, a pool manifest, a probe run),
  never the path itself; the runs a report compares by their identities (run.json), in order, so
  `runs=[a/,./b]` and `runs=[a,b]` are one report;
- the content of every task in the set (bundled generators and the user's task files alike), with the
  policy text its agent reads (a domain's policy.md unless the task gives its own);
- the code and text that decide a verdict or what the agent or the user sees (`CODE_PARTS`): the grader,
  the judges, the tool layer (with the domain kit the bundled domains' tools share), the simulated users,
  the prompt renderer and parser, and each domain's schema, seed, tools and policy.md.

The model's settings count unless the policy declares it is a reference that plays no model
(`is_reference`, tbx/traits.py: oracle, null, replay). A folder
pinned with `run_dir=` that holds another run is refused with the settings that changed. The
resolved config and the git commit are saved beside the outputs, atomically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import re
import subprocess
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from tbx.config import Config, plain
from tbx.errors import ConfigError, InputError
from tbx.process.durable import write_text
from tbx.runs.stages import stage_named, stage_of
from tbx.tasks.model import hash_json
from tbx.tau2 import VERSION as TAU2_VERSION
from tbx.tau2 import is_tau2
from tbx.traits import traits_of


def config_settings(value: Any, stage: str) -> Any:
    """The settings of `value` (a config dataclass) that count toward a `stage` run's identity: a field
    marked `STAGE_GROUP` counts only where the stage's registry entry names it in `uses`."""
    return _settings(value, stage_named(stage).uses)


def _settings(value: Any, uses: Collection[str]) -> Any:
    if not dataclasses.is_dataclass(value):
        return value
    settings = {}
    for field in dataclasses.fields(value):
        counts = field.metadata.get("identity", True)
        if counts is False or (field.metadata.get("stage_group") and field.name not in uses):
            continue
        item = getattr(value, field.name)
        settings[field.name] = content_digest(item) if counts == "content" else _settings(item, uses)
    return settings


def content_digest(path: str | None) -> str | None:
    """A hash of what `path` names: a run folder or results.sqlite by its stored tries, a model folder
    by its weights' fingerprint, another folder by its files, a file by its bytes; "missing" when there
    is nothing (the stage names that error itself)."""
    if not path:
        return None
    target = Path(path).expanduser()
    if not target.exists():
        return "missing"
    if target.is_dir() and (any(target.glob("*.safetensors")) or any(target.glob("*.bin"))):
        from tbx.vllm.weights import weights_fingerprint

        return weights_fingerprint(target)  # model weights: reading every byte of 70B would take minutes
    store = target / "results.sqlite" if target.is_dir() else target
    if store.is_file() and store.suffix == ".sqlite":
        from tbx.store.results import records_digest

        return records_digest(store)
    digest = hashlib.sha256()
    files = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
    for file in files:
        digest.update(str(file.relative_to(target) if target.is_dir() else "").encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def stage_tasks(cfg: Config) -> list:
    """The tasks a stage plays (before sharding): its task set, or for training the pool's."""
    from tbx.catalog import load_manifest, manifest_tasks, resolve_tasks

    stage = stage_of(cfg)
    if stage.tasks_from_pool:
        try:
            return manifest_tasks(load_manifest(cfg.train.pool, "train.pool"))
        except InputError:
            return []  # the stage itself stops on the manifest, with this error
    return resolve_tasks(cfg.tasks) if stage.loads_tasks else []


# The code and text that decide a verdict or what the agent or the user sees, by part (files under tbx/,
# hashed by their bytes); each bundled domain adds its schema, seed, tools and policy.md.
CODE_PARTS = {
    "grader": ("grading/diff.py", "grading/verdict.py", "backend/state.py"),
    "judges": ("grading/judge.py", "grading/judge_llm.py"),
    # domains/kit.py: the argument checks and look-ups every bundled domain's tools share (their messages)
    "tools": ("tools/arguments.py", "tools/declare.py", "tools/mcp_server.py", "tools/runtime.py", "domains/kit.py"),
    "users": ("users/base.py", "users/facts.py", "users/lexicon.py", "users/llm.py", "users/phrases.py",
              "users/profiles.py", "users/reading.py", "users/scripted.py"),
    "agent": ("policies/prompting.py", "llm/parsing.py", "llm/wire.py", "episodes/run.py", "messages.py"),
}
# a domain's tasks.py needs no entry: the content of every task it generates counts
DOMAIN_PARTS = ("schema.py", "seed.py", "tools.py", "policy.md")
PACKAGE = Path(__file__).parents[1]  # tbx/


def files_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def code_versions(domains: set[str]) -> dict[str, str]:
    """Hashes of the source and text that decide verdicts or what the agent and the user see: per part of
    CODE_PARTS, and per domain its schema, seed, tools and policy.md."""
    versions = {part: files_hash([PACKAGE / name for name in names]) for part, names in CODE_PARTS.items()}
    for name in sorted(domains):
        if is_tau2(name):  # τ²'s tools, data and policy are the pinned package's; tbx's side is tbx/tau2
            versions[name] = f"{TAU2_VERSION}-" + files_hash(sorted((PACKAGE / "tau2").glob("*.py")))
            continue
        folder = Path(importlib.import_module(f"tbx.domains.{name}").__file__).parent
        versions[name] = files_hash([folder / part for part in DOMAIN_PARTS if (folder / part).is_file()])
    return versions


def compute_settings(cfg: Config, tasks: list | None = None) -> dict[str, Any]:
    """Everything the run's hash covers. `tasks`: the stage's resolved task list (read here if None)."""
    settings = config_settings(cfg, cfg.stage.name)
    if "runs" in settings:  # a report of the same runs is the same report, however their paths are written
        settings["runs"] = [stored_identity(path) for path in cfg.runs]
    if "model" in settings and traits_of(cfg.policy._target_, "policy").is_reference:
        settings.pop("model")  # oracle, null and replay play no model
    tasks = stage_tasks(cfg) if tasks is None else tasks
    if tasks:
        settings["task_content"] = hash_json(sorted((t.id, t.content_hash, hash_json(t.policy)) for t in tasks))
        settings["code"] = code_versions({t.domain for t in tasks})
    return settings


def stored_identity(run_dir: str) -> str:
    """The identity a run folder's run.json holds; its absolute path when it holds none (the stage that
    reads the folder names that error)."""
    try:
        return str(json.loads((Path(run_dir).expanduser() / "run.json").read_text())["identity"])
    except (OSError, ValueError, KeyError, TypeError):
        return str(Path(run_dir).expanduser().absolute())


_memo: dict[str, dict[str, Any]] = {}


def _identity(cfg: Config, tasks: list | None = None) -> dict[str, Any]:
    """{identity, settings}, computed once per config and content in a process (reading every task
    costs about a second for the whole benchmark) and again when a file the content comes from changed."""
    key = json.dumps([dataclasses.asdict(cfg), _stamps(cfg)], sort_keys=True, default=str)
    if key not in _memo or tasks is not None:
        settings = compute_settings(cfg, tasks)
        _memo[key] = {"identity": hash_json(settings)[:10], "settings": settings}
    return _memo[key]


def _stamps(cfg: Config) -> list[tuple[str, int, int]]:
    """Size and modification time of every file a run's content comes from (the memo's key)."""
    paths = [cfg.tasks.path, cfg.tasks.pool, cfg.policy.path, cfg.train.pool, cfg.select.probe_run,
             cfg.regrade.run_dir]
    stamps = []
    for path in filter(None, paths):
        root = Path(path).expanduser()
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        stamps += [(str(f), s.st_size, s.st_mtime_ns) for f in files if f.exists() for s in [f.stat()]]
    return stamps


def identity_settings(cfg: Config, tasks: list | None = None) -> dict[str, Any]:
    return _identity(cfg, tasks)["settings"]


def run_identity(cfg: Config, tasks: list | None = None) -> str:
    """The run's hash (10 hex digits): its folder name, its rows in the results store, its W&B group."""
    return _identity(cfg, tasks)["identity"]


def run_name(cfg: Config) -> str:
    if cfg.stage.name == "select":
        return f"select-{cfg.pool.name}-{run_identity(cfg)}"
    if cfg.stage.name == "report":
        return f"report-{len(cfg.runs)}runs-{run_identity(cfg)}"
    agent = cfg.serve.agent_name if cfg.stage.name == "serve" else cfg.policy.name
    return f"{cfg.stage.name}-{tasks_label(cfg)}-{agent}-{run_identity(cfg)}"


def tasks_label(cfg: Config) -> str:
    """The task set a run's name shows: the `tasks` group's name, or for training the task set the pool
    was probed on (the pool manifest's), which `tasks=` does not choose."""
    from tbx.catalog import load_manifest

    if stage_of(cfg).tasks_from_pool:
        try:
            name = load_manifest(cfg.train.pool, "train.pool").probe_settings.get("tasks", {}).get("name")
        except InputError:
            name = None  # the stage itself stops on the manifest
        if isinstance(name, str) and re.fullmatch(r"[\w.-]{1,64}", name):
            return name
    return cfg.tasks.name


def changed_settings(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ between two identity settings (pure)."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix or "(settings)"]
    names = []
    for key in sorted(set(old) | set(new), key=str):
        names += changed_settings(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
    return names


def resolve_run_dir(cfg: Config) -> Path:
    """The run's folder (made by the first file written into it, so a start that fails its checks leaves
    no empty folder); refused when it already holds a run with another identity (a pinned `run_dir=`
    whose inputs changed), naming what changed."""
    path = Path(cfg.run_dir) if cfg.run_dir else Path(cfg.out_root) / run_name(cfg)
    meta = path / "run.json"
    if meta.is_file():
        held = read_run_meta(meta)
        if held.get("identity") not in (None, run_identity(cfg)):
            changed = changed_settings(held.get("settings", {}), identity_settings(cfg))
            shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            raise ConfigError(str(meta), "run_dir", f"holds run {held['identity']}, made from other inputs "
                              f"(changed: {shown or 'the code that grades'})",
                              "give another run_dir (or none: each identity gets its own folder), "
                              "or delete the folder to start over")
    return path


START_OVER = "start over with another run_dir (or none: each identity gets its own folder), or delete the folder"


def read_run_meta(path: Path) -> dict[str, Any]:
    """A run folder's run.json; a damaged one (truncated, not JSON, not a mapping) is named with the fix."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "run_dir", f"is damaged (not JSON: {str(exc).splitlines()[0]})",
                          START_OVER) from None
    if not isinstance(meta, dict):
        raise ConfigError(str(path), "run_dir", "is damaged (not a JSON object)", START_OVER)
    return meta


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def save_run_meta(run_dir: Path, cfg: Config, tasks: list | None = None) -> None:
    """config.yaml and run.json, each replaced whole. Stages call it once their start-up checks passed,
    so a start that fails leaves an earlier run's files as they were. `tasks`: the task set the identity
    names (every shard's), saved as {id: domain} so a report can tell a killed run from a finished one."""
    write_text(run_dir / "config.yaml", yaml.safe_dump(plain(cfg), sort_keys=False))
    meta = {"identity": run_identity(cfg), "settings": identity_settings(cfg), "git_commit": git_commit()}
    if tasks is not None:
        meta["tasks"] = {task.id: task.domain for task in tasks}
    path = run_dir / "run.json"
    if path.is_file():  # a resumed run keeps what served and trained it (record_meta)
        meta |= {k: v for k, v in read_run_meta(path).items() if k in RECORDED}
    write_text(path, json.dumps(meta, indent=2))


RECORDED = ("engine", "trainer")  # what `record_meta` adds to run.json


def record_meta(run_dir: Path, key: str, value: dict[str, Any]) -> None:
    """Add what served (`engine`: `{"name": "vllm", "version": "0.32.0", "weights": ...}`) or trained
    (`trainer`: verl's version and checkpoint) the run to `run.json`."""
    if key not in RECORDED:
        raise ValueError(f"run.json records {RECORDED}, not {key!r}")
    path = run_dir / "run.json"
    meta = read_run_meta(path) if path.is_file() else {}
    meta[key] = value
    write_text(path, json.dumps(meta, indent=2))


def record_engine(run_dir: Path, engine: dict[str, Any]) -> None:
    """Add what served the policy to `run.json`."""
    record_meta(run_dir, "engine", engine)
