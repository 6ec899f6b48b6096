"""The trainer's settings are honoured or refused, never silently ignored.

- The finetune mode (full parameters or LoRA) is the frozen pool manifest's, for the native trainer as for
  verl's (tbx/verl_bridge/overrides.py `validate_manifest`); a `pool=` option that says otherwise is
  refused at the checks launch.py runs, in one line.
- `grpo.kl_coef` and `grpo.loss_agg_mode`: tests/hardening/test_bad_config.py (refused at composition).
"""

import json

import pytest

import tbx.stages.train
from tbx.errors import ConfigError
from tbx.records import PoolManifest
from tbx.runs.identity import run_name
from tbx.stages.environment import check_config
from tests.helpers.stage import make_cfg
from tests.launch import compose_cfg


def write_manifest(folder, finetune: str) -> str:
    """A sealed pool.json as stage=select writes it, keeping one mock task, selected for `finetune`."""
    name = "lora" if finetune == "lora" else "full_param"
    manifest = PoolManifest(kept=("mock/transfer/5",), pool={"name": name, "finetune": finetune},
                            probe_settings={"tasks": {"name": "mock", "domains": ["mock"]}}).sealed()
    path = folder / f"{name}-pool.json"
    path.write_text(json.dumps(manifest.to_dict()))
    return str(path)


class Started(Exception):
    """Raised by the stand-in for the model loading: the run got as far as building its trainable policy."""


@pytest.mark.parametrize(("finetune", "pool"), [("lora", "full_param"), ("full", "lora")])
def test_the_native_trainer_trains_as_the_manifest_was_selected(tmp_path, monkeypatch, finetune, pool):
    built = []

    def build(cfg, run_dir, finetune=None):  # the model and its vLLM server are the GPU seam
        built.append(finetune or cfg.pool.finetune)
        raise Started

    monkeypatch.setattr(tbx.stages.train, "build_trainable", build)
    cfg = make_cfg(tmp_path, "stage=train", "model=smollm2_135m", f"pool={pool}",
                   f"train.pool={write_manifest(tmp_path, finetune)}")
    with pytest.raises(Started):
        tbx.stages.train.run_train(cfg)
    assert built == [finetune]  # the manifest's, whatever the pool group says


@pytest.mark.parametrize(("finetune", "pool", "fix"), [("lora", [], "give pool=lora"),
                                                        ("full", ["pool=lora"], "give pool=full_param")])
def test_a_pool_option_that_mismatches_the_manifest_is_refused(tmp_path, finetune, pool, fix):
    path = write_manifest(tmp_path, finetune)
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg("stage=train", f"train.pool={path}", *pool))
    assert error.value.field == "pool.finetune" and fix in error.value.fix, str(error.value)
    assert f"was selected for {finetune}" in error.value.problem and "\n" not in str(error.value)


@pytest.mark.parametrize(("finetune", "pool"), [("lora", ["pool=lora"]), ("full", [])])
def test_a_pool_option_that_matches_the_manifest_passes(tmp_path, finetune, pool):
    check_config(compose_cfg("stage=train", f"train.pool={write_manifest(tmp_path, finetune)}", *pool))


def test_a_training_run_is_named_by_the_task_set_its_pool_was_probed_on(tmp_path):
    """`tasks=` does not choose a training run's tasks (the pool does), so the run's name shows the pool's."""
    cfg = make_cfg(tmp_path, "stage=train", "tasks=travel", f"train.pool={write_manifest(tmp_path, 'full')}")
    assert run_name(cfg).startswith("train-mock-")
    unreadable = make_cfg(tmp_path, "stage=train", "tasks=travel", f"train.pool={tmp_path / 'missing.json'}")
    assert run_name(unreadable).startswith("train-travel-")  # the stage itself stops on the manifest
