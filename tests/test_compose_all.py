"""Every option of every config group, and every point of every sweep, composes into the typed
Config, passes the job plan's checks, and goes through launch.py's `show=true` path (the resolved
config, the run name and the plan, printed without running anything)."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import launch
from tbx.config import Config
from tests.helpers.stage import OPTIONS, REQUIRED

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted(f.stem for f in (ROOT / "sweeps").glob("*.yaml"))


def show(dict_cfg, capsys) -> str:
    """launch.py's main without Hydra's runtime around it (hydra.main keeps the function in __wrapped__)."""
    dict_cfg.show = True
    launch.main.__wrapped__(dict_cfg)
    return capsys.readouterr().out


def test_every_group_has_options():
    groups = {group for group, _ in OPTIONS}
    assert {"hardware", "stage", "tasks", "policy", "model", "backend", "pool", "logger", "grpo"} <= groups
    assert len(SWEEPS) >= 3


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_shows_its_plan(group, option, tmp_path, capsys):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        dict_cfg = compose("config", overrides=[f"{group}={option}", f"out_root={tmp_path}",
                                                *REQUIRED.get((group, option), [])])
    assert isinstance(OmegaConf.to_object(dict_cfg), Config)
    out = show(dict_cfg, capsys)
    assert "# run: " in out and "# plan: stage=" in out, out[-500:]
    assert not any(tmp_path.iterdir())  # show=true runs nothing


def sweep_points(name: str) -> tuple[list[list[str]], object]:
    """The override lists the basic sweeper would launch for sweeps/<name>.yaml."""
    with initialize_config_dir(str(ROOT / "sweeps"), version_base="1.3"):
        cfg = compose(name, overrides=[f"hydra.searchpath=[file://{ROOT}/conf]"], return_hydra_config=True)
    params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    overrides = OverridesParser.create().parse_overrides(params)
    return BasicSweeper.split_arguments(overrides, None)[0], cfg


@pytest.mark.parametrize("name", SWEEPS)
def test_every_point_of_the_sweep_composes_and_shows_its_plan(name, tmp_path, capsys):
    points, cfg = sweep_points(name)
    assert cfg.hydra.mode.name == "MULTIRUN"  # `python launch.py sweep=NAME` fans out without -m
    assert len(points) > 1
    runs = set()
    for point in points:
        with initialize_config_dir(str(ROOT / "sweeps"), version_base="1.3"):
            dict_cfg = compose(name, overrides=[f"hydra.searchpath=[file://{ROOT}/conf]", *point,
                                                f"out_root={tmp_path}"])
        out = show(dict_cfg, capsys)
        assert "# plan: stage=" in out
        runs.add(next(line for line in out.splitlines() if line.startswith("# run: ")))
    assert len(runs) == len(points)  # every point is its own run (folder and W&B group)


def test_sweep_sizes():
    assert {name: len(sweep_points(name)[0]) for name in SWEEPS} == {
        "band_edges": 6, "lr_x_pool": 6, "probe_stopping": 6, "reference_policies": 2}


def test_a_real_model_is_evaluated_with_the_llm_user_and_the_embedded_path_keeps_the_scripted_one(tmp_path):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        real = compose("config", overrides=["experiment=eval_endpoint", f"out_root={tmp_path}",
                                            *REQUIRED[("experiment", "eval_endpoint")]])
        embedded = compose("config", overrides=["experiment=embedded_pipeline", f"out_root={tmp_path}"])
    cfg = OmegaConf.to_object(real)
    assert (cfg.user._target_, cfg.model.kind, cfg.stage.name, cfg.tasks.name) == (
        "tbx.users.llm.LLMUser", "openai", "eval", "bench")
    assert (cfg.user.endpoint.base_url, cfg.user.endpoint.model) == ("http://127.0.0.1:8000/v1", "some-model")
    assert OmegaConf.to_object(embedded).user._target_ == "tbx.users.scripted.ScriptedUser"
    assert Config().user._target_ == "tbx.users.scripted.ScriptedUser"


def test_without_a_stage_launch_runs_the_main_job(tmp_path, capsys):
    assert launch.with_main_job([]) == ["experiment=embedded_pipeline"]
    assert launch.with_main_job(["show=true"]) == ["experiment=embedded_pipeline", "show=true"]
    for named in (["stage=eval"], ["experiment=embedded_pipeline"], ["sweep=band_edges"], ["+experiment=x"]):
        assert launch.with_main_job(named) == named
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        dict_cfg = compose("config", overrides=[*launch.with_main_job([]), f"out_root={tmp_path}"])
    cfg = OmegaConf.to_object(dict_cfg)
    assert (cfg.stage.name, cfg.tasks.name, cfg.model.name) == ("pipeline", "train_sample", "smollm2_135m")
    assert "# plan: stage=pipeline" in show(dict_cfg, capsys)
