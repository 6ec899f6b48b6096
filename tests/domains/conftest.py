"""Fixtures of the domain tests: every task of a bundled domain, prepared once per test module."""

import pytest

from tbx.backend.sqlite import SQLiteBackend
from tbx.catalog import prepare_task, resolve_tasks
from tbx.config import TasksConfig
from tbx.domains import domain_names


@pytest.fixture(scope="module", params=domain_names())
def domain_runtimes(request, tmp_path_factory):
    """(domain name, SQLite backend, the runtimes of all its tasks) for each bundled domain."""
    backend = SQLiteBackend(str(tmp_path_factory.mktemp(request.param)))
    tasks = resolve_tasks(TasksConfig(name=request.param, domains=[request.param]))
    yield request.param, backend, [prepare_task(t, backend) for t in tasks]
    backend.close()
