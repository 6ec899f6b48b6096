"""Malformed task files fail with the file, the field and the fix."""

import pytest
import yaml

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tbx.domains import get_domain
from tbx.errors import TaskFormatError
from tbx.tasks import load_task


def good_task() -> dict:
    return dict(get_domain("mock").generate_tasks(0)[0])


def write(tmp_path, data, name="task.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_good_file_loads(tmp_path):
    write(tmp_path, good_task())
    tasks = resolve_tasks(TasksConfig(name="files", path=str(tmp_path)))
    assert [t.id for t in tasks] == ["mock/transfer/5"]
    assert "Frozen accounts cannot send money" in tasks[0].policy  # the domain policy by default


@pytest.mark.parametrize(
    ("change", "field", "fix"),
    [
        (lambda t: t.pop("user"), "user", "add 'user:'"),
        (lambda t: t.update(split="test"), "split", "use 'bench'"),
        (lambda t: t.update(turn_limit=0), "turn_limit", "positive integer"),
        (lambda t: t.update(colour="red"), "colour", "remove it"),
        (lambda t: t["user"].pop("opening_message"), "user.opening_message", "non-empty string"),
        (lambda t: t.update(reference=[]), "reference", "at least one step"),
        (lambda t: t["reference"].append({"tool": "x", "say": "y"}), "reference[4]", "split it"),
        (lambda t: t["checks"].update(expected=[]), "checks.expected", "at least one change"),
        (lambda t: t["checks"]["expected"][0].update(op="upsert"), "checks.expected[0].op", "insert, update"),
        (lambda t: t["checks"]["expected"][0].pop("key"), "checks.expected[0].key", "primary key"),
        (lambda t: t.update(domain="airline"), "domain", "tbx/domains/airline"),
        (lambda t: t.update(tools=["get_account", "fly"]), "tools", "unknown tool 'fly'"),
        (lambda t: t.update(tools=["get_account"]), "reference[2].tool", "add it to 'tools'"),
        (lambda t: t.update(seed={"rows": {"acounts": [{"id": 9}]}}), "seed.rows.acounts", "unknown table"),
        (lambda t: t.update(seed={"rows": {"accounts": [{"idd": 9}]}}), "seed.rows.accounts[0].idd", "columns"),
        (lambda t: t["checks"]["expected"][0].update(table="acct"), "checks.expected[0].table", "one of"),
        (lambda t: t["checks"].update(volatile=["accounts.nope"]), "checks.volatile[0]", "table.column"),
        (lambda t: t.update(id="../../etc/passwd"), "id", "letters"),
        (lambda t: t["user"]["private_facts"]["owner_name"].update(kind="nickname"),
         "user.private_facts.owner_name.kind", "use one of identifier, date, name"),
    ],
)
def test_malformed_task_names_file_field_and_fix(tmp_path, change, field, fix):
    data = good_task()
    change(data)
    path = write(tmp_path, data)
    with pytest.raises(TaskFormatError) as info:
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    assert info.value.source == str(path)
    assert info.value.field == field
    assert fix in str(info.value)


@pytest.mark.parametrize(("name", "text", "match"), [
    ("broken.yaml", "id: [unclosed\n", "broken.yaml: field '\\(file\\)': is not valid YAML"),
    # the list is never closed: the parser stops on line 3, where it says what it expected
    ("broken.yaml", "id: x\nuser: [a, b\nsplit: bench\n", "at line 3, column 6: .*expected ',' or ']'"),
    ("broken.jsonl", '{"id": "a"}\n{"id": \n', "at line 2, column 8"),
], ids=["yaml", "yaml line and column", "json lines line and column"])
def test_invalid_yaml_names_the_file_line_and_column(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TaskFormatError, match=match):
        resolve_tasks(TasksConfig(name="files", path=str(path)))


def test_duplicate_ids_are_refused(tmp_path):
    write(tmp_path, good_task(), "a.yaml")
    write(tmp_path, good_task(), "b.yaml")
    with pytest.raises(TaskFormatError, match="is also used by"):
        resolve_tasks(TasksConfig(name="files", path=str(tmp_path)))


def test_a_fact_may_declare_its_kind():
    data = good_task()
    data["user"]["private_facts"]["owner_name"]["kind"] = "name"
    assert load_task(data, "mem", "policy").user.private_facts["owner_name"].kind == "name"


def test_load_task_keeps_structure():
    task = load_task(good_task(), "mem", "policy text")
    assert task.user.private_facts["owner_name"].keywords == ("name", "owner")
    assert task.user.private_facts["owner_name"].kind is None  # inferred by the scripted user
    assert task.reference[2].arguments["amount"] == 5
    assert task.content_hash == load_task(good_task(), "elsewhere", "x").content_hash


# --- the values a task file can hold but a run cannot use: one line each, before any database is built -----------

@pytest.mark.parametrize(("row", "field", "problem", "fix"), [
    ({"id": 2**70, "owner": "Dee", "balance": 2}, "seed.rows.accounts[0].id", "past the 64-bit integers",
     "give a value in -9223372036854775808..9223372036854775807"),
    ({"id": 9, "owner": {"first": "Dee"}, "balance": 2}, "seed.rows.accounts[0].owner", "is a mapping",
     "not a mapping"),
    ({"id": 9, "owner": "Dee", "balance": "lots"}, "seed.rows.accounts[0].balance", "is 'lots', not a number",
     "unquoted"),
], ids=["integer past 64 bits", "mapping as a column value", "text in a numeric column"])
def test_a_seed_value_its_column_cannot_hold_names_the_column(tmp_path, row, field, problem, fix):
    data = good_task()
    data["seed"] = {"rows": {"accounts": [row]}}
    path = write(tmp_path, data)
    with pytest.raises(TaskFormatError) as info:  # before: InfraError from the template build ("a service it uses")
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    error = info.value
    assert (error.source, error.field) == (str(path), field) and problem in error.problem and fix in error.fix, error


@pytest.mark.parametrize("task_id", ["mock/a<b", 'mock/a"b', "mock/a=b", "mock/a b"])
def test_an_id_outside_the_documented_alphabet_is_refused(tmp_path, task_id):
    path = write(tmp_path, good_task() | {"id": task_id})
    with pytest.raises(TaskFormatError) as info:
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    assert info.value.field == "id" and "outside the id alphabet" in info.value.problem
    assert "letters, digits, '-', '_' and '/'" in info.value.fix


def test_ids_of_the_documented_alphabet_load(tmp_path):
    path = write(tmp_path, good_task() | {"id": "tau2_retail/12"})
    assert [t.id for t in resolve_tasks(TasksConfig(name="files", path=str(path)))] == ["tau2_retail/12"]


def test_a_yaml_alias_that_refers_to_itself_is_one_line(tmp_path):
    text = yaml.safe_dump(good_task()).replace("- arguments:\n    account_id: 1\n",
                                               "- arguments: &args\n    account_id: 1\n    again: *args\n")
    assert "*args" in text
    path = tmp_path / "task.yaml"
    path.write_text(text)
    with pytest.raises(TaskFormatError) as info:  # before: "Circular reference detected" from the run identity
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    assert info.value.field == "(file)" and "the alias *args (line" in info.value.problem, info.value


def test_an_alias_to_an_ended_value_is_kept(tmp_path):
    text = yaml.safe_dump(good_task()).replace("family: transfer\n", "family: &f transfer\n") + "policy: *f\n"
    path = tmp_path / "task.yaml"
    path.write_text(text)
    assert resolve_tasks(TasksConfig(name="files", path=str(path)))[0].policy == "transfer"


def test_a_misspelt_tool_in_a_reference_gets_did_you_mean(tmp_path):
    data = good_task()
    data["reference"][1]["tool"] = "get_acount"
    path = write(tmp_path, data)
    with pytest.raises(TaskFormatError) as info:
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    assert info.value.field == "reference[1].tool" and info.value.fix.startswith("did you mean 'get_account'?")
