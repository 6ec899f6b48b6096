"""The typed records: the pure core loads no framework, the pool manifest round-trips its file format, and a
stored grade and try parse from and back to the JSON the store keeps."""

import json
import subprocess
import sys

import pytest

from tbx.errors import ConfigError
from tbx.records import (
    Grade,
    JudgeVerdict,
    Outcome,
    PoolManifest,
    PoolTask,
    StoredTry,
    TrainState,
    manifest_hash,
)

HEAVY = ("mcp", "sqlalchemy", "torch", "transformers", "hydra", "omegaconf")


def test_the_pure_core_loads_no_framework():
    code = ("import sys, tbx.stats.metrics, tbx.stats.difficulty, tbx.stats.pool, tbx.records\n"
            f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"the pure core imported {loaded.strip()}"


def test_the_schema_and_the_llm_wire_load_no_framework():
    """Policies, users and the judge import their config groups and tbx.llm: neither needs Hydra or the tools."""
    code = ("import sys, tbx.config, tbx.llm.client, tbx.llm.parsing, tbx.llm.wire\n"
            f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"imported {loaded.strip()}"



def test_building_a_config_loads_no_framework():
    """Config.__post_init__ checks the values (tbx/config/values.py): no server, store or tool framework for that."""
    code = ("import sys\nfrom tbx.config import Config\nConfig()\n"
            f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & set({(*HEAVY, 'uvicorn', 'starlette')!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"imported {loaded.strip()}"

def written_manifest() -> dict:
    """A manifest as stage=select writes it (keys in its order), hash included."""
    rows = [{"domain": "mock", "family": "transfer", "k": 3, "n": 4, "errors": 1, "id": "mock/transfer/5",
             "kept": True, "band": "often", "mean": 0.7, "interval": [0.4, 0.9], "masses": [0.0, 0.1, 0.2, 0.6, 0.1]},
            {"domain": "mock", "family": "nickname", "k": 0, "n": 0, "errors": 2, "id": "mock/nickname/1",
             "kept": False, "band": None, "mean": None, "interval": None, "masses": None}]
    data = {"version": 1, "probe_run": "/runs/probe-x", "probe_run_id": "abc", "probe_settings": {"tasks": {}},
            "pool": {"name": "full_param", "keep_ranges": [[0.08, 0.9]], "finetune": "full"},
            "difficulty": {"edges": [0, 0.08, 0.3, 0.6, 0.9, 1], "names": ["a", "b", "c", "d", "e"]},
            "kept": ["mock/transfer/5"], "dropped": [], "no_verdict": ["mock/nickname/1"],
            "band_counts": {"a": 0, "b": 0, "c": 0, "d": 1, "e": 0}, "tasks": rows}
    return data | {"hash": manifest_hash(data)}


def test_a_written_manifest_round_trips_byte_for_byte():
    data = written_manifest()
    text = json.dumps(data, indent=2)
    manifest = PoolManifest.parse(text, "pool.json", "train.pool")
    assert manifest.tasks[0] == PoolTask("mock/transfer/5", "mock", "transfer", 3, 4, 1, True, "often", 0.7,
                                         (0.4, 0.9), (0.0, 0.1, 0.2, 0.6, 0.1))
    assert json.dumps(manifest.to_dict(), indent=2) == text
    assert manifest.content_hash() == manifest.hash == manifest.sealed().hash


def test_a_partial_manifest_loads_by_the_hash_it_was_written_with():
    data = {"version": 1, "kept": ["a/b/1"], "tasks": []}  # as tests and older tools wrote them
    data["hash"] = manifest_hash(data)
    manifest = PoolManifest.parse(json.dumps(data), "pool.json", "train.pool")
    assert manifest.kept == ("a/b/1",) and manifest.finetune == "full"


@pytest.mark.parametrize(("text", "problem"), [
    ("{", "is not a readable pool manifest"),
    (json.dumps({"kept": []}), "does not match its hash"),
    (json.dumps({"kept": "a", "hash": manifest_hash({"kept": "a"})}), "'kept' is not a list"),
])
def test_a_bad_manifest_names_the_file_field_and_fix(text, problem):
    with pytest.raises(ConfigError, match=problem) as caught:
        PoolManifest.parse(text, "runs/pool.json", "train.pool")
    assert caught.value.source == "runs/pool.json" and caught.value.field == "train.pool" and caught.value.fix


def test_an_edited_manifest_is_refused():
    data = written_manifest()
    data["kept"].append("mock/nickname/1")
    with pytest.raises(ConfigError, match="edited by hand"):
        PoolManifest.parse(json.dumps(data), "pool.json", "train.pool")


def test_train_state_keeps_the_checkpoint_format():
    state = TrainState(step=3, scored=[1.0, 0.0], history=[{"train/step": 3}])
    extra = state.checkpoint_extra({"position": 7})
    assert extra == {"sampler": {"position": 7}, "scored": [1.0, 0.0], "history": [{"train/step": 3}]}
    assert TrainState.from_checkpoint(3, extra) == TrainState(3, [1.0, 0.0], [{"train/step": 3}], {"position": 7})


def stored_grade() -> dict:
    """An episode's grade as the store has always kept it (a failed expected change with its row diff, the
    unexpected-change check, one judge rule)."""
    row = {"op": "update", "table": "accounts", "key": {"id": "1"}, "before": {"balance": "100"},
           "after": {"balance": "90"}, "columns": ["balance"]}
    return {"passed": False,
            "checks": [{"name": "expected[0] update accounts", "passed": False, "detail": "row {'id': 1}: balance is "
                        "'90', expected '95'", "rows": [row]},
                       {"name": "no other change", "passed": True, "detail": "no unexpected change", "rows": []},
                       {"name": "judge told_done", "passed": True, "detail": "the agent said ['done']", "rows": []}],
            "judge": [{"rule_id": "told_done", "passed": True, "reason": "the agent said ['done']"}],
            "excluded_reason": ""}


def test_a_stored_grade_round_trips_with_its_checks():
    data = stored_grade()
    grade = Grade.from_dict(data)
    assert grade.passed is False and grade.failed_checks == (grade.checks[0],)
    assert grade.checks[0].rows[0]["after"] == {"balance": "90"}
    assert grade.judge == (JudgeVerdict("told_done", True, "the agent said ['done']"),)
    assert grade.explain() == "expected[0] update accounts: row {'id': 1}: balance is '90', expected '95'"
    assert json.dumps(grade.to_dict()) == json.dumps(data)  # the stored shape, key order included


def test_an_excluded_grade_says_why():
    grade = Grade.from_dict({"passed": None, "checks": [], "judge": [], "excluded_reason": "no judge"})
    assert grade.passed is None and grade.explain() == "excluded: no judge"


def test_a_stored_try_round_trips_in_the_store_s_key_order():
    row = {"task_id": "mock/a", "domain": "mock", "family": "f", "attempt": 2, "seed": 7, "outcome": "failure",
           "reward": 0.0, "cause": "expected[0]: missing", "ended_by": "user_stop",
           "transcript": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "get_account",
                                                                               "arguments": {"account_id": 1}}]},
                          {"role": "tool", "content": "{}", "tool_call_id": "c1", "name": "get_account"}],
           "usage": {"agent": {"prompt_tokens": 3, "completion_tokens": 1}}, "counts": {"turns": 1},
           "final_delta": {"accounts": {"pk": ["id"], "rows": []}}, "grade": stored_grade(),
           "hashes": {"task": "t"}, "timings": {"total": 0.5}, "extra": {"policy": "coin"},
           "try": 1, "cost_usd": 0.25, "stage": "eval"}
    tried = StoredTry.parse(json.dumps(row))
    assert (tried.outcome, tried.reward, tried.try_index, tried.cost_usd) == (Outcome.FAILURE, 0.0, 1, 0.25)
    assert tried.transcript[1].tool_calls[0].arguments == {"account_id": 1} and tried.grade.judge[0].passed
    assert json.dumps(tried.to_dict()) == json.dumps(row)


def test_a_stored_try_of_an_older_record_takes_defaults_for_what_it_lacks():
    tried = StoredTry.from_dict({"task_id": "mock/a", "attempt": 0, "outcome": "infra_error", "grade": None})
    assert (tried.reward, tried.ended_by, tried.extra, tried.try_index, tried.cost_usd, tried.stage) == (
        None, "", {}, 0, 0.0, "")
