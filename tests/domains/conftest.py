"""Fixtures of the domain tests: every task of a bundled domain, prepared once per test session
(the tests only clone its templates); a SQLite backend and prepared runtimes by task, once per test
module."""

import pytest

from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import load_domain_task, prepare_task, resolve_tasks
from tbx.config import TasksConfig
from tbx.domains import domain_names


@pytest.fixture(scope="session", params=domain_names())
def domain_runtimes(request, tmp_path_factory):
    """(domain name, SQLite backend, the runtimes of all its tasks) for each bundled domain."""
    backend = SQLiteBackend(str(tmp_path_factory.mktemp(request.param)))
    tasks = resolve_tasks(TasksConfig(name=request.param, domains=[request.param]))
    yield request.param, backend, [prepare_task(t, backend) for t in tasks]
    backend.close()


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = SQLiteBackend(str(tmp_path_factory.mktemp("domain")))
    yield b
    b.close()


@pytest.fixture(scope="module")
def runtime(backend):
    """Prepared runtimes by task mapping (template built once per task; prepare_task fails unless
    the reference meets the task's checks)."""
    cache = {}

    def get(data: dict):
        if data["id"] not in cache:
            cache[data["id"]] = prepare_task(load_domain_task(data, data["id"]), backend)
        return cache[data["id"]]

    return get
