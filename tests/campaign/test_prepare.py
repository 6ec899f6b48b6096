"""The prepared-task cache: a second preparation of the same tasks reads it (nothing prepared again) and
gives the same runtimes; a task whose content changed, or whose code changed, is prepared again; tasks
prepared in parallel processes equal tasks prepared here."""

from __future__ import annotations

import dataclasses

from tbx.campaign import prepare as prepare_module
from tbx.campaign.components import build_backend
from tbx.campaign.prepare import prepare_all
from tbx.catalog import load_domain_task, resolve_tasks
from tests.helpers.stage import make_cfg


def as_data(runtimes: dict) -> dict:
    return {task_id: (rt.template, rt.initial, rt.expected, rt.volatile) for task_id, rt in runtimes.items()}


def counting(monkeypatch) -> list[str]:
    """The ids of the tasks `prepare_all` prepares (instead of reading the cache)."""
    prepared, real = [], prepare_module.prepare_task
    monkeypatch.setattr(prepare_module, "prepare_task", lambda task, backend: prepared.append(task.id) or
                        real(task, backend))
    return prepared


def test_a_second_preparation_reads_the_cache_and_a_changed_task_is_prepared_again(tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path, "tasks=travel", "tasks.limit=6", "eval.workers=1")
    tasks = resolve_tasks(cfg.tasks)
    backend = build_backend(cfg)
    try:
        prepared = counting(monkeypatch)
        first = prepare_all(cfg, tasks, backend)
        assert len(prepared) == 6
        prepared.clear()
        second = prepare_all(cfg, tasks, backend)
        assert prepared == [] and as_data(second) == as_data(first)

        data = dict(tasks[0].raw, turn_limit=tasks[0].turn_limit + 1)  # another content, the same id
        edited = [load_domain_task(data, tasks[0].source), *tasks[1:]]
        third = prepare_all(cfg, edited, backend)
        assert prepared == [tasks[0].id] and as_data(third) == as_data(first)

        prepared.clear()
        monkeypatch.setattr("tbx.runs.identity.code_versions", lambda domains: {"grader": "new", "travel": "new"})
        prepare_all(cfg, tasks, backend)
        assert prepared == [t.id for t in tasks]  # the grader's or the domain's code changed: all again
    finally:
        backend.close()


def test_tasks_prepared_in_parallel_processes_equal_tasks_prepared_here(tmp_path, monkeypatch):
    here = make_cfg(tmp_path / "here", "tasks=travel", "eval.workers=1")
    apart = make_cfg(tmp_path / "apart", "tasks=travel", "eval.workers=2")
    tasks = resolve_tasks(here.tasks)
    assert len(tasks) >= 2 * prepare_module.MIN_TASKS_PER_PROCESS  # so that two processes prepare them
    runtimes, prepared = {}, counting(monkeypatch)  # counts this process's preparations only
    for name, cfg in (("here", here), ("apart", apart)):
        prepared.clear()
        backend = build_backend(cfg)
        try:
            runtimes[name] = {task_id: dataclasses.replace(rt, template="") for task_id, rt in
                              prepare_all(cfg, tasks, backend).items()}
        finally:
            backend.close()
    assert prepared == []  # "apart": every task was prepared by the spawned processes, none here
    assert len(list((tmp_path / "apart" / "db" / "prepared").glob("*.json"))) == len(tasks)
    assert as_data(runtimes["apart"]) == as_data(runtimes["here"])
