"""The task file schema (tbx/tasks/schema.py): every field is typed, and a value of the wrong type anywhere is one
line naming the file, that field and the fix, never a task loaded with it."""

from __future__ import annotations

import json

import pytest

from tbx.domains import get_domain
from tbx.errors import TaskFormatError
from tbx.tasks import load_task
from tbx.tasks.schema import field_name

FREE = ("arguments", "key", "values", "rows", "private_facts")  # mappings whose entries are the author's own
WRONG = (5, True, "two words", [], {})


def full_task() -> dict:
    """The mock domain's first task with every optional field of the format given."""
    task = json.loads(json.dumps(get_domain("mock").generate_tasks(0)[0]))
    task["user"]["private_facts"]["owner_name"]["kind"] = "name"
    task["seed"] = {"rows": {"accounts": [{"id": 9, "owner": "Dee", "balance": 7}]}}
    task["checks"] |= {"volatile": ["transfers.memo"], "loose": ["accounts.balance"],
                       "judge": [{"id": "told", "rule": "told the user", "evidence": ["done"]}]}
    return task | {"policy": "Be kind.", "tools": ["get_account", "transfer"]}


def typed_places(node: object, loc: tuple = ()) -> list[tuple]:
    """Every place of `node` whose value the format types (not the free entries of arguments, keys, rows)."""
    places = [loc] if loc else []
    if loc and loc[-1] in FREE:  # the mapping itself is typed; what it holds is not
        return places
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        places.extend(typed_places(value, (*loc, key)))
    return places


def test_the_full_task_loads():
    task = load_task(full_task(), "mem", "policy")
    assert task.tools == ("get_account", "transfer") and task.checks.judge[0].evidence == ("done",)
    assert task.user.private_facts["owner_name"].kind == "name" and task.seed_rows["accounts"][0]["id"] == 9


@pytest.mark.parametrize("loc", typed_places(full_task()), ids=field_name)
def test_a_value_of_the_wrong_type_anywhere_is_one_line_naming_its_field(loc):
    for wrong in WRONG:
        task = full_task()
        node = task
        for key in loc[:-1]:
            node = node[key]
        if type(node[loc[-1]]) is type(wrong):
            continue
        node[loc[-1]] = wrong
        with pytest.raises(TaskFormatError) as error:  # before: `family: 5` or `checks: []` loaded
            load_task(task, "task.yaml", "policy")
        where = field_name(loc)
        if loc[-2:-1] in (("keywords",), ("evidence",)):  # a list of phrases is named as a whole, with the entry
            where = field_name(loc[:-1])
            assert f"[{loc[-1]}] is {wrong!r}" in error.value.problem, str(error.value)
        assert error.value.field == where or error.value.field.startswith((f"{where}.", f"{where}[")), \
            (wrong, str(error.value))
        assert "\n" not in str(error.value) and error.value.fix, str(error.value)


@pytest.mark.parametrize(("change", "field", "problem"), [
    (lambda t: t.update(family=5), "family", "expected a string, got int 5"),
    (lambda t: t.update(tools=["get_account", 7]), "tools[1]", "expected a string, got int 7"),
    (lambda t: t.update(checks=[]), "checks", "expected a mapping, got list []"),
    (lambda t: t.update(policy=[]), "policy", "expected a string, got list []"),
    (lambda t: t["reference"][0].update(arguments={"x": 1}), "reference[0].arguments", "a message has no arguments"),
], ids=["family", "tool name", "checks as a list", "empty list as policy", "arguments of a message"])
def test_a_value_the_loader_used_to_drop_or_keep_unchecked_is_refused(change, field, problem):
    task = full_task()
    change(task)
    with pytest.raises(TaskFormatError) as error:
        load_task(task, "task.yaml", "policy")
    assert (error.value.field, error.value.problem) == (field, problem), str(error.value)


def test_a_missing_field_is_named_before_an_unknown_key_and_a_misspelt_key_before_a_bad_value():
    task = full_task()
    del task["split"]
    task["user"]["privat_facts"] = task["user"].pop("private_facts")
    task["turn_limit"] = 0
    with pytest.raises(TaskFormatError) as error:
        load_task(task, "task.yaml")
    assert error.value.field == "split" and "required fields: id, domain, split, user, reference" in error.value.fix
    task["split"] = "bench"
    with pytest.raises(TaskFormatError) as error:
        load_task(task, "task.yaml")
    assert error.value.field == "user.privat_facts" and error.value.fix.startswith("did you mean 'private_facts'?")
