"""The grader reads the episode's database through a connection the tools and the agent never held.

Two ways to show it, on SQLite and PostgreSQL (the `backend` fixture):
- behaviour: a write the task expects, left *uncommitted* on the tools' own connection while the
  grader reads, does not count (the do-nothing agent still fails), although that connection sees it;
  committed, the same write passes, so the grader reads the very database the tools changed;
- wiring: the engine the grader reads through comes from `backend.open_reader` after the tool
  session closed, and no tool call ever ran on it.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, update

import tbx.catalog as sql_state  # the SQL episode state's terminal read (SqlEpisode.terminal)
import tbx.episodes.run as episode_run
from tbx.catalog import prepare_task
from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.policies.reference import NullPolicy, OraclePolicy
from tbx.tasks import load_task
from tests.helpers.episodes import world_of

MOCK = get_domain("mock")
ACCOUNTS = MOCK.metadata.tables["accounts"]


def nickname_task():
    """mock/nickname/1: the expected change (derived from the reference) is accounts[2].nickname = 'savings'."""
    return load_task(MOCK.generate_tasks(0)[2], "mock-isolation", MOCK.policy)


def play(runtime, backend, policy):
    return asyncio.run(run_episode(world_of(backend), runtime, policy, 0, 0))


@pytest.mark.parametrize("commit", [False, True], ids=["uncommitted", "committed"])
def test_a_write_left_open_on_the_tools_connection_does_not_reach_the_verdict(backend, monkeypatch, commit):
    runtime = prepare_task(nickname_task(), backend)
    assert [(c.op, c.table, c.values) for c in runtime.expected] == [("update", "accounts", {"nickname": "savings"})]
    held, seen = {}, {}
    real_build, real_dump = episode_run.build_server, sql_state.dump_state

    def build_server(name, specs, engine, *rest, **options):
        conn = engine.connect()  # the tools' engine: on SQLite, the very connection every tool call uses
        conn.begin()
        conn.execute(update(ACCOUNTS).where(ACCOUNTS.c.id == 2).values(nickname="savings"))
        if commit:
            conn.commit()
        held["conn"] = conn
        return real_build(name, specs, engine, *rest, **options)

    def dump_state(reader, metadata, *rest):  # the grader's read, the write still open
        conn = held.pop("conn")
        seen["tools"] = conn.execute(select(ACCOUNTS.c.nickname).where(ACCOUNTS.c.id == 2)).scalar_one()
        try:
            return real_dump(reader, metadata, *rest)
        finally:
            conn.rollback()
            conn.close()

    monkeypatch.setattr(episode_run, "build_server", build_server)
    monkeypatch.setattr(sql_state, "dump_state", dump_state)
    result = play(runtime, backend, NullPolicy())
    assert seen["tools"] == "savings"  # the tools' connection sees the write either way
    if commit:
        assert result.outcome is Outcome.SUCCESS, result.cause
        rows = {str(row["id"]): row for row in result.final_delta["accounts"]["rows"]}
        assert rows["2"]["nickname"] == "savings"
    else:
        assert result.outcome is Outcome.FAILURE, result.cause
        assert "row {'id': '2'} of accounts was not updated" in result.cause
        assert not result.final_delta  # the terminal state the grader read is the initial one


def test_the_grader_engine_is_opened_after_the_tools_and_never_used_by_them(backend, monkeypatch):
    import tbx.tools.mcp_server as mcp_server

    runtime = prepare_task(nickname_task(), backend)
    events: list[tuple[str, object]] = []
    real_build, real_dump, real_invoke = episode_run.build_server, sql_state.dump_state, mcp_server.invoke
    real_reader = type(backend).open_reader

    def build_server(name, specs, engine, *rest, **options):
        events.append(("tools engine", engine))
        return real_build(name, specs, engine, *rest, **options)

    def invoke(spec, engine, *rest, **options):
        events.append(("tool call", engine))
        return real_invoke(spec, engine, *rest, **options)

    def open_reader(self, db):
        reader = real_reader(self, db)
        events.append(("reader opened", reader))
        return reader

    def dump_state(reader, metadata, *rest):
        events.append(("grader reads", reader))
        return real_dump(reader, metadata, *rest)

    monkeypatch.setattr(episode_run, "build_server", build_server)
    monkeypatch.setattr(mcp_server, "invoke", invoke)
    monkeypatch.setattr(type(backend), "open_reader", open_reader)
    monkeypatch.setattr(sql_state, "dump_state", dump_state)
    result = play(runtime, backend, OraclePolicy())
    assert result.outcome is Outcome.SUCCESS, result.cause
    kinds = [kind for kind, _ in events]
    assert kinds == ["tools engine", "tool call", "reader opened", "grader reads"]  # one write, then the grader
    tools_engine, grader_engine = events[0][1], events[3][1]
    assert events[1][1] is tools_engine and events[2][1] is grader_engine
    assert grader_engine is not tools_engine and grader_engine.pool is not tools_engine.pool


# --- task files cannot reach outside their folder ----------------------------------------------------------------
# The task format never refers to another file: every field holds its content. A file name where content belongs
# (a relative path that climbs out, an absolute path, or any path) is refused naming the file, the field and the
# fix, and a task folder cannot pull in a file from elsewhere through a link.

def write_task(folder, task, name="task.yaml"):
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(task))
    return path


def mock_transfer() -> dict:
    import json

    return json.loads(json.dumps(MOCK.generate_tasks(0)[0]))


@pytest.mark.parametrize(("field", "value"), [
    ("policy", "../shared/policy.md"),
    ("policy", "/etc/passwd"),
    ("policy", "policy.md"),  # inside the folder: still a file name, not a policy
    ("user", "~/scenarios/ada.yaml"),
    ("seed", "../seeds/rows.yaml"),
    ("seed.rows", "/data/accounts.csv"),
    ("reference", "../../reference.yaml"),
    ("checks", "checks.json"),
    ("checks.expected", "../expected.yaml"),
    ("tools", "file:///srv/tools.txt"),
])
def test_a_field_naming_a_file_is_refused(tmp_path, field, value):
    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig
    from tbx.errors import TaskFormatError

    task = mock_transfer()
    head, _, tail = field.partition(".")
    if tail:
        task[head] = dict(task.get(head) or {}, **{tail: value})
    else:
        task[head] = value
    path = write_task(tmp_path / "tasks", task)
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(tmp_path / "tasks")))
    assert (error.value.source, error.value.field) == (str(path), field)
    assert "never refers to other files" in error.value.problem and "inline" in error.value.fix


def test_a_policy_in_prose_with_a_slash_is_text():
    task = load_task(dict(mock_transfer(), policy="Refunds over $50/day need a manager."), "mem")
    assert task.policy == "Refunds over $50/day need a manager."


def test_a_link_out_of_the_task_folder_is_refused_and_a_link_inside_it_is_not(tmp_path):
    import os

    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig
    from tbx.errors import TaskFormatError

    outside = write_task(tmp_path / "elsewhere", dict(mock_transfer(), id="mock/outside"))
    folder = tmp_path / "tasks"
    inner = write_task(folder / "sub", dict(mock_transfer(), id="mock/inner"))
    os.symlink(inner, folder / "again.yaml")  # a link to a file of the folder: the same task twice
    with pytest.raises(TaskFormatError, match="is also used by"):
        resolve_tasks(TasksConfig(name="files", path=str(folder)))
    (folder / "again.yaml").unlink()
    os.symlink(folder / "sub", folder / "linked_dir")  # links to folders are not followed at all
    assert [t.id for t in resolve_tasks(TasksConfig(name="files", path=str(folder)))] == ["mock/inner"]
    os.symlink(outside, folder / "stolen.yaml")
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(folder)))
    assert (error.value.source, error.value.field) == (str(folder / "stolen.yaml"), "tasks.path")
    assert f"is a link to {outside}, outside the task folder" in error.value.problem and "copy" in error.value.fix
    # given as its own path, the file outside is fine: tasks.path may point anywhere
    assert [t.id for t in resolve_tasks(TasksConfig(name="files", path=str(folder / "stolen.yaml")))] == ["mock/outside"]
