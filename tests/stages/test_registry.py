"""A stage is one declared record (tbx/runs/stages.py): adding one is its module, one registry entry and
its option file, and launch.py runs it; every stage's facts agree with the schema, the option files and
docs/architecture.md; validate's identity and regrade's checks follow what those stages use."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.runs.identity import identity_settings, run_identity
from tbx.runs.results import RegradeMismatch
from tbx.runs.stages import STAGES, Stage, stage_named, stage_table
from tbx.stages.environment import check_config
from tests.helpers.stage import make_cfg

ROOT = Path(__file__).resolve().parents[2]
TOY_MODULE = '''"""stage=toy: says which seed it was given."""

from tbx.runs.results import Finished


def run_toy(cfg):
    print(f"toy stage ran with seed {cfg.seed}")
    return Finished()
'''
TOY_ENTRY = '    Stage("toy", "tbx.stages.toy:run_toy", "say the seed", uses=("seed",)),\n'


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_a_new_stage_is_its_module_one_entry_and_its_option_file(tmp_path):
    copy = tmp_path / "tbx_copy"
    for part in ("tbx", "conf", "sweeps"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "launch.py", copy / "launch.py")
    before = files(copy)

    (copy / "tbx/stages/toy.py").write_text(TOY_MODULE)
    registry = copy / "tbx/runs/stages.py"
    text = registry.read_text()
    end = text.index("\n)}\n", text.index("STAGES: dict[str, Stage]")) + 1  # the entries' closing line
    registry.write_text(text[:end] + TOY_ENTRY + text[end:])
    (copy / "conf/stage/toy.yaml").write_text("name: toy\n")

    after = files(copy)
    touched = sorted(name for name in after if before.get(name) != after[name])
    assert touched == ["conf/stage/toy.yaml", "tbx/runs/stages.py", "tbx/stages/toy.py"]

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "launch.py", "stage=toy", "logger=none", f"out_root={tmp_path}/out",
                               *args], cwd=copy, capture_output=True, text=True, timeout=120)

    ran = launch("seed=7")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "toy stage ran with seed 7" in ran.stdout
    shown = launch("seed=7", "show=true")
    assert shown.returncode == 0 and "# plan: stage=toy" in shown.stdout
    assert "# run: none (stage=toy writes no run folder of its own)" in shown.stdout  # run_folder not declared
    refused = launch("launcher.shards=2")  # not shardable: the plan refuses it, as for any such stage
    assert refused.returncode == 2 and "launcher.shards" in refused.stderr


def test_the_option_files_are_the_registered_stages():
    options = {path.stem: path.read_text() for path in (ROOT / "conf/stage").glob("*.yaml")}
    assert set(options) == set(STAGES)
    for name, text in options.items():
        assert f"name: {name}" in text.splitlines()


def test_each_stage_names_a_run_function_and_groups_of_the_schema():
    scoped = {f.name for f in dataclasses.fields(Config) if f.metadata.get("stage_group")}
    used = set()
    for stage in STAGES.values():
        module, _, function = stage.run.partition(":")
        source = ROOT / (module.replace(".", "/") + ".py")
        defined = {node.name for node in ast.parse(source.read_text()).body if isinstance(node, ast.FunctionDef)}
        assert function in defined, stage.name
        assert set(stage.uses) <= scoped, stage.name
        used |= set(stage.uses)
    assert used == scoped  # every stage-scoped group is used by some stage


def test_the_architecture_page_shows_the_registry():
    assert stage_table() in (ROOT / "docs/architecture.md").read_text()


def test_an_unknown_stage_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown stage 'nope'"):
        stage_named("nope")


def test_validate_counts_what_it_plays_not_the_configured_policy(tmp_path):
    """validate plays the oracle, the null agent and mutations with the scripted user, whatever the policy,
    model and user groups say: they do not name its run (and its checks never asked for the model's vLLM)."""
    oracle = make_cfg(tmp_path, "stage=validate", "tasks=mock", "policy=oracle")
    model = make_cfg(tmp_path, "stage=validate", "tasks=mock", "policy=model", "model.temperature=0.3")
    assert not {"policy", "model", "user"} & set(identity_settings(oracle))
    assert run_identity(oracle) == run_identity(model)
    check_config(make_cfg(tmp_path, "stage=validate", "tasks=mock", "policy=model", "model.server.python=/nowhere"))
    with pytest.raises(ConfigError, match="model.server.python"):  # where the policy plays, it is checked
        check_config(make_cfg(tmp_path, "stage=eval", "tasks=mock", "policy=model", "model.server.python=/nowhere"))


def test_a_judge_is_checked_where_the_stage_uses_one(tmp_path):
    """regrade reads the stored judge verdicts and calls no judge: an LLM judge without an endpoint does
    not stop it; validate calls the judge, so it does."""
    llm_judge = ("judge=llm", "judge.endpoint.base_url=null", "judge.endpoint.model=m")
    check_config(make_cfg(tmp_path, "stage=regrade", f"regrade.run_dir={tmp_path}", *llm_judge))
    with pytest.raises(ConfigError, match="judge.endpoint.base_url"):
        check_config(make_cfg(tmp_path, "stage=validate", "tasks=mock", *llm_judge))


def test_an_entry_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="plays episodes"):
        Stage("half", "tbx.stages.eval:run_eval", "plays without its groups", uses=("tasks",), plays_episodes=True)
    with pytest.raises(ValueError, match="loads tasks"):
        Stage("blind", "tbx.stages.eval:run_eval", "loads tasks it does not count", loads_tasks=True)
    with pytest.raises(ValueError, match="exit_code"):
        Stage("mute", "tbx.stages.regrade:run_regrade", "returns no exit status", result=RegradeMismatch)


def test_each_stage_returns_the_frozen_record_it_declares():
    for stage in STAGES.values():
        assert dataclasses.is_dataclass(stage.result) and stage.result.__dataclass_params__.frozen, stage.name
        module, _, function = stage.run.partition(":")
        source = ROOT / (module.replace(".", "/") + ".py")
        (node,) = [n for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == function]
        assert ast.unparse(node.returns) == stage.result.__name__, stage.name


def test_a_stage_that_returns_another_record_stops_the_run(tmp_path, monkeypatch):
    import tbx.stages.view
    from tbx.launch import run_stage

    monkeypatch.setattr(tbx.stages.view, "run_view", lambda cfg: {"served": True})  # a plain dict, as before
    with pytest.raises(TypeError, match="stage view returned a dict; its registry entry declares ViewResult"):
        run_stage(make_cfg(tmp_path, "stage=view", "runs=[x]"))
