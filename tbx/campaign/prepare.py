"""Preparing a campaign's tasks once: templates and prepared tasks cached by content across runs.

Preparing a task (`tbx.catalog.prepare_task`) builds its template database, dumps its initial state and
replays the reference solution into a twin to derive the expected changes: 14-20 s for the 512
benchmark tasks, on every run. The template is already kept by content (`backend.workdir/templates`);
the rest is kept here, in `backend.workdir/prepared/<key>.json`, where the key hashes everything the
result depends on: the task's content, its template key (schema, base and task seed rows), the code of
its domain (schema, seed, tools, the tool runtime), of the grader and of the preparation itself, and
the backend kind. A change to any of them is another key, so a stale entry is never read; an
unreadable entry is prepared again. Only what is exact in JSON is kept (the canonical initial state,
the derived expected changes: canonical text); a task's own `checks.expected` comes from the task.

Tasks not in the cache are prepared in parallel, over the cores a campaign's workers use (spawned
processes that write the cache and end with their parent); a task that fails there is prepared again
here, which raises its error as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tqdm import tqdm

from tbx import catalog
from tbx.backend import Backend
from tbx.campaign.components import build_backend
from tbx.campaign.workers import map_shares, share_processes
from tbx.catalog import TaskRuntime, prepare_task, template_key, template_rows
from tbx.config import Config
from tbx.domains import get_domain, source_hash
from tbx.process.durable import write_text
from tbx.process.owner import Owner, this_process
from tbx.tasks.model import ExpectedChange, Task
from tbx.tau2 import is_tau2

CACHE_VERSION = 1  # bump when what an entry holds changes
MIN_TASKS_PER_PROCESS = 32  # fewer misses are prepared here: a process's start-up (~1-2 s) would cost more


def write_runtimes(path: Path, runtimes: dict[str, TaskRuntime]) -> None:
    """Tasks as run (content, initial state, expected changes): what `stage=regrade` needs."""
    lines = [json.dumps(rt.to_json(), default=str) for rt in runtimes.values()]
    write_text(path, "\n".join(lines) + "\n")


class PreparedCache:
    """Prepared tasks of one backend kind under `folder`, by content key."""

    def __init__(self, folder: Path, backend_kind: str):
        self.folder, self.kind = folder, backend_kind
        self._code: dict[str, str] = {}

    def key(self, task: Task) -> str:
        if task.domain not in self._code:
            from tbx.runs.identity import code_versions

            versions = code_versions({task.domain})
            self._code[task.domain] = f"{versions['grader']}|{versions[task.domain]}|{source_hash(catalog)}"
        blob = f"{CACHE_VERSION}|{self.kind}|{task.content_hash}|{template_key(task, get_domain(task.domain))}|" \
               f"{self._code[task.domain]}"
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def load(self, task: Task, backend: Backend) -> TaskRuntime | None:
        """The task's runtime from its entry (its template ensured), or None when there is none."""
        key = self.key(task)
        try:
            entry = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
            if entry["key"] != key:
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        domain = get_domain(task.domain)
        template = backend.ensure_template(template_key(task, domain), domain.metadata, template_rows(task))
        expected = task.checks.expected
        if expected is None:
            expected = tuple(ExpectedChange(**change) for change in entry["derived"])
        return TaskRuntime(task, domain, template, entry["initial"], tuple(expected),
                           catalog.ignored(task, domain, tuple(expected)))

    def save(self, runtime: TaskRuntime) -> None:
        """Keep `runtime` (a lost or half-written entry is only prepared again: no fsync)."""
        key = self.key(runtime.task)
        derived = None if runtime.task.checks.expected is not None else [vars(e) for e in runtime.expected]
        entry = {"key": key, "task": runtime.task.id, "initial": runtime.initial, "derived": derived}
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{key}.{this_process().tag}-{uuid.uuid4().hex[:8]}.partial"
        try:
            partial.write_text(json.dumps(entry), encoding="utf-8")
            os.replace(partial, self.folder / f"{key}.json")
        except OSError:
            partial.unlink(missing_ok=True)  # a full disk: the task is prepared again next time

    def sweep(self) -> None:
        """Remove half-written entries of processes (on this host) that are gone."""
        for item in self.folder.glob(".*.partial"):
            owner = Owner.parse(item.name)
            if owner is not None and owner.gone():
                item.unlink(missing_ok=True)


def _cache(cfg: Config, backend: Backend) -> PreparedCache:
    return PreparedCache(Path(cfg.backend.workdir) / "prepared", backend.kind)


def _prepare_chunk(cfg: Config, tasks: list[Task]) -> int:
    """In a preparing process: prepare `tasks` into the cache; return how many succeeded."""
    backend = build_backend(cfg)
    try:
        cache, done = _cache(cfg, backend), 0
        for task in tasks:
            try:
                cache.save(prepare_task(task, backend))
                done += 1
            except Exception:  # prepared again by the parent, which reports it
                continue
        return done
    finally:
        backend.close()


def _prepare_in_processes(cfg: Config, tasks: list[Task], processes: int) -> None:
    for _ in map_shares(_prepare_chunk, cfg, tasks, processes, f"prepare {len(tasks)} tasks ({processes} processes)"):
        pass


def prepare_all(cfg: Config, tasks: list[Task], backend: Backend) -> dict[str, TaskRuntime]:
    """Every task's runtime: from the prepared-task cache, else prepared (in parallel when many are
    missing and more than one core is available) and kept there."""
    cache = _cache(cfg, backend)
    if cache.folder.is_dir():
        cache.sweep()
    # τ²-bench tasks keep no template: their runtime is the gold actions played once in memory (tbx/tau2)
    kept = {task.id: prepare_task(task, backend) for task in tasks if is_tau2(task.domain)}
    tasks = [task for task in tasks if task.id not in kept]
    runtimes: dict[str, TaskRuntime | None] = {task.id: cache.load(task, backend) for task in tasks}
    missing = [task for task in tasks if runtimes[task.id] is None]
    processes = share_processes(cfg, len(missing), MIN_TASKS_PER_PROCESS)
    if processes > 1:
        try:
            _prepare_in_processes(cfg, missing, processes)
        except BrokenProcessPool:  # a preparing process died (killed, out of memory): the rest is prepared here
            pass
        for task in missing:
            runtimes[task.id] = cache.load(task, backend)
    todo = [task for task in tasks if runtimes[task.id] is None]
    for task in tqdm(todo, desc="prepare", unit="task", file=sys.stderr, disable=not todo, mininterval=2.0):
        runtime = prepare_task(task, backend)
        cache.save(runtime)
        runtimes[task.id] = runtime
    return kept | {task_id: runtime for task_id, runtime in runtimes.items() if runtime is not None}

