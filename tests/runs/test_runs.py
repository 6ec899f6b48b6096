"""Run identity from content (tbx/runs/identity.py): an edited task or replay file, or a changed setting that
can change results, is a new run with a fresh verdict, never a silent resume of the old folder; what
cannot change results (paths, concurrency, waits, logging) keeps the folder.
"""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tbx.config import NOT_IDENTITY, Config, EndpointConfig
from tbx.errors import ConfigError
from tbx.runs.identity import changed_settings, config_settings, run_identity
from tests.helpers.episodes import nickname_task
from tests.helpers.stage import make_cfg, run
from tests.launch import compose_cfg


def test_an_edited_task_file_gets_a_fresh_verdict(tmp_path):
    """A recorded agent (the replay of fixed steps) passes the task; the task file is edited so those steps
    no longer do: the same command must give 0%, where resuming the old folder reported 100%."""
    task, tasks, steps = nickname_task(), tmp_path / "tasks.yaml", tmp_path / "steps.jsonl"
    tasks.write_text(yaml.safe_dump(task))
    steps.write_text(json.dumps({"task_id": task["id"], "steps": task["reference"]}) + "\n")
    args = ("tasks=files", f"tasks.path={tasks}", "policy=replay", f"policy.path={steps}")
    first = run(make_cfg(tmp_path, *args))
    assert (first.pass_at_1, first.episodes) == (1.0, 1)
    task["reference"][1]["arguments"]["nickname"] = "rainy day"  # the expected state now has this nickname
    task["user"]["private_facts"]["nickname"]["value"] = "rainy day"
    tasks.write_text(yaml.safe_dump(task))
    second = run(make_cfg(tmp_path, *args))
    assert second.run_dir != first.run_dir
    assert (second.pass_at_1, second.episodes) == (0.0, 1)


def test_an_edited_replay_file_gets_a_fresh_verdict(tmp_path):
    task, steps = nickname_task(), tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"task_id": task["id"], "steps": task["reference"]}) + "\n")
    args = ("tasks=mock", "tasks.families=[nickname]", "policy=replay", f"policy.path={steps}")
    first = run(make_cfg(tmp_path, *args))
    assert (first.pass_at_1, first.episodes) == (1.0, 1)
    steps.write_text(json.dumps({"task_id": task["id"], "steps": [{"say": "Done."}]}) + "\n")
    second = run(make_cfg(tmp_path, *args))
    assert second.run_dir != first.run_dir
    assert (second.pass_at_1, second.episodes) == (0.0, 1)


@pytest.mark.parametrize("override", ["model.endpoint.temperature=0.2", "model.endpoint.base_url=http://other:1/v1",
                                      "model.endpoint.model=other", "user.endpoint.temperature=0.3",
                                      "judge.endpoint.model=other", "model.temperature=0.5", "eval.max_turns=3",
                                      "eval.turn_timeout_s=10", "faults.tool=0.1"])
def test_settings_that_change_results_are_a_new_run(override):
    base = ("stage=eval", "tasks=mock", "policy=model")
    assert run_identity(compose_cfg(*base)) != run_identity(compose_cfg(*base, override))


@pytest.mark.parametrize("override", ["model.endpoint.concurrency=2", "model.endpoint.timeout_s=5",
                                      "model.endpoint.max_retries=0", "user.endpoint.api_key_env=KEY",
                                      "eval.concurrency=1", "eval.call_timeout_s=9", "eval.episode_timeout_s=9",
                                      "eval.max_error_retries=5",
                                      "backend.workdir=/elsewhere", "store.url=sqlite:///x.sqlite", "logger=none",
                                      "out_root=/elsewhere", "tasks.name=renamed", "faults.hang_s=1",
                                      "+extra.note=hello", "grpo.steps=3", "probe.attempts=3"])
def test_paths_logging_concurrency_and_waits_keep_the_run(override):
    base = ("stage=eval", "tasks=mock", "policy=model")
    assert run_identity(compose_cfg(*base)) == run_identity(compose_cfg(*base, override))


def test_a_new_field_counts_unless_marked():
    """The identity is derived from the schema: a field nobody marked counts, a NOT_IDENTITY one does not."""
    @dataclasses.dataclass
    class Endpoint(EndpointConfig):
        top_k: int = 40  # a new sampling setting: counts
        log_requests: bool = dataclasses.field(default=False, metadata=NOT_IDENTITY)

    cfg = Config()
    settings = config_settings(dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, endpoint=Endpoint())), "eval")["model"]["endpoint"]
    assert settings["top_k"] == 40 and "log_requests" not in settings and "concurrency" not in settings
    assert "temperature" in settings and "base_url" in settings and "model" in settings
    assert "grpo" not in config_settings(cfg, "eval") and "grpo" in config_settings(cfg, "train")


def test_the_code_that_grades_counts(monkeypatch):
    from tbx.runs import identity as runs
    cfg = compose_cfg("stage=eval", "tasks=mock", "policy=oracle")
    before = run_identity(cfg)
    monkeypatch.setattr(runs, "code_versions", lambda domains: {"grader": "another grader"})
    runs._memo.clear()
    assert run_identity(cfg) != before


def test_a_pinned_folder_of_another_run_is_refused_naming_what_changed(tmp_path):
    args = ("tasks=mock", "policy=oracle", f"run_dir={tmp_path / 'pinned'}")
    run(make_cfg(tmp_path, *args))
    before = (tmp_path / "pinned" / "config.yaml").read_text()
    with pytest.raises(ConfigError) as error:
        run(make_cfg(tmp_path, *args, "eval.attempts=2", "eval.max_turns=4"))
    assert error.value.field == "run_dir" and "changed: eval.attempts, eval.max_turns" in error.value.problem
    assert (tmp_path / "pinned" / "config.yaml").read_text() == before


def test_changed_settings_lists_dotted_names():
    old = {"model": {"endpoint": {"temperature": 1.0, "model": "a"}}, "seed": 0}
    new = {"model": {"endpoint": {"temperature": 0.2, "model": "a"}}, "seed": 0, "task_content": "x"}
    assert changed_settings(old, new) == ["model.endpoint.temperature", "task_content"]


def test_run_json_holds_the_identity_settings_and_the_config_as_run(tmp_path):
    out = run(make_cfg(tmp_path, "tasks=mock", "policy=oracle"))
    meta = json.loads((Path(out.run_dir) / "run.json").read_text())
    assert set(meta["settings"]["code"]) == {"grader", "judges", "tools", "users", "agent", "mock"} and len(meta["settings"]["task_content"]) == 16
    assert meta["identity"] == Path(out.run_dir).name.rsplit("-", 1)[1]
