"""Config → verl overrides: golden files for the reference recipe, validation, dataset rows.

Runs without verl. The last tests compose the overrides with verl's own Hydra config and run
verl's own config validation; they skip (visibly) where verl is not installed.

Regenerate the golden files after an intended change: `TBX_UPDATE_GOLDEN=1 pytest tests/verl_bridge`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

from tbx.config import Config, LoggerConfig, ModelConfig
from tbx.config import GrpoConfig as GrpoSettings
from tbx.errors import ConfigError
from tbx.records import PoolManifest
from tbx.verl_bridge import VERL_VERSION, HardwareSettings, plan_training, verl_overrides
from tbx.verl_bridge.async_overrides import apply_delta, off_policy_threshold
from tbx.verl_bridge.data import pool_rows, write_bridge_files
from tbx.verl_bridge.episode import load_config
from tests.verl_bridge.pools import manifest

GOLDEN = Path(__file__).parent / "golden"
RUN_DIR = "/runs/train-reference"


def reference_config() -> Config:
    return Config(model=ModelConfig(name="qwen3.8-27b", path="/models/Qwen3.8-27B"))


def overrides_for(finetune: str, grpo: GrpoSettings | None = None) -> list[str]:
    pool = manifest(finetune)
    return verl_overrides(reference_config(), pool, plan_training(pool, RUN_DIR, "train-reference", grpo))


def check_golden(name: str, got: list[str]) -> None:
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("TBX_UPDATE_GOLDEN") == "1":
        path.write_text(f"# verl {VERL_VERSION} overrides, written by tests/verl_bridge/test_overrides.py\n"
                        + yaml.safe_dump(got, sort_keys=False))
    assert got == yaml.safe_load(path.read_text()), f"overrides differ from {path}"


def test_reference_full_parameter_recipe_matches_golden():
    # 3 nodes × 8 H100, 18 groups × 8 episodes, AdamW lr 1e-6, weight decay 0, 50 steps, token-mean.
    got = overrides_for("full")
    check_golden("reference_full", got)
    assert "actor_rollout_ref.rollout.n=8" in got and "data.train_batch_size=18" in got
    assert not any("lora" in item for item in got)


def test_lora_variant_differs_only_in_lora_keys_and_lr():
    got = overrides_for("lora", GrpoSettings(lr=1e-5))
    check_golden("reference_lora", got)
    full = set(overrides_for("full"))
    assert set(got) - full == {"actor_rollout_ref.model.lora_rank=16", "actor_rollout_ref.model.lora_alpha=32",
                               "actor_rollout_ref.model.target_modules=all-linear",
                               "actor_rollout_ref.rollout.load_format=safetensors",
                               "actor_rollout_ref.actor.optim.lr=1e-05",
                               "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls="
                               "tbx.verl_bridge.vllm_ext.LoraSyncExtension"}
    assert full - set(got) == {"actor_rollout_ref.actor.optim.lr=1e-06"}


def test_plan_derives_the_reference_sizes():
    plan = plan_training(manifest(kept=187), RUN_DIR, "x")
    # 18 × 8 = 144 episodes on 3 × 8 = 24 GPUs: 6 per GPU; 187 // 18 = 10 steps per epoch
    assert (plan.episodes_per_step, plan.world_size, plan.episodes_per_gpu) == (144, 24, 6)
    assert (plan.rollout_replicas, plan.steps_per_epoch, plan.total_epochs) == (6, 10, 6)
    assert plan.paths.train_file == f"{RUN_DIR}/verl/train.jsonl" and plan.finetune == "full"


@pytest.mark.parametrize(("change", "field", "fix"), [
    ({"grpo": GrpoSettings(groups_per_step=17)}, "groups_per_step", "multiple of 3"),  # 136 % 24 != 0
    ({"hardware": HardwareSettings(tensor_parallel_size=3)}, "tensor_parallel_size", "[1, 2, 4, 8]"),
    ({"grpo": GrpoSettings(group_size=1)}, "group_size", "at least 2"),
    ({"grpo": GrpoSettings(loss_agg_mode="mean")}, "loss_agg_mode", "token-mean"),
    ({"grpo": GrpoSettings(clip_ratio=1.5)}, "clip_ratio", "(0, 1)"),
    ({"grpo": GrpoSettings(lr=0.0)}, "lr", "positive"),
    ({"hardware": HardwareSettings(nodes=0)}, "nodes", ">= 1"),
])
def test_invalid_settings_name_the_field_and_the_fix(change, field, fix):
    with pytest.raises(ConfigError) as caught:
        plan_training(manifest(), RUN_DIR, "x", **change)
    assert caught.value.field == field and fix in caught.value.fix, str(caught.value)


def test_hardware_comes_from_the_hardware_group_and_the_model():
    cfg = reference_config()
    cfg.hardware.nodes, cfg.hardware.gpus_per_node, cfg.model.tensor_parallel_size = 3, 8, 2
    assert HardwareSettings.from_config(cfg) == HardwareSettings(nodes=3, gpus_per_node=8, tensor_parallel_size=2)
    cfg.hardware.gpus_per_node, cfg.hardware.cpus_per_task = 0, 2  # no GPUs: verl on the CPU, a rank per node
    assert HardwareSettings.from_config(cfg) == HardwareSettings(nodes=3, gpus_per_node=1, tensor_parallel_size=1,
                                                                  cpu=True, cpus_per_node=2)
    plan = plan_training(manifest(), RUN_DIR, "x", GrpoSettings(groups_per_step=3), HardwareSettings.from_config(cfg))
    assert (plan.world_size, plan.episodes_per_gpu, plan.rollout_replicas) == (3, 8, 3)


def cpu_overrides_for(nodes: int = 1, executor: str = "debug", grpo: GrpoSettings | None = None) -> list[str]:
    """The reference recipe on hardware without GPUs (2 groups x 4 episodes, a CPU-sized step)."""
    cfg = reference_config()
    cfg.hardware.nodes, cfg.hardware.gpus_per_node, cfg.hardware.cpus_per_task = nodes, 0, 2
    cfg.hardware.executor = executor
    pool = manifest()
    grpo = grpo or GrpoSettings(group_size=4, groups_per_step=2)
    return verl_overrides(cfg, pool, plan_training(pool, RUN_DIR, "train-reference", grpo,
                                                   HardwareSettings.from_config(cfg)))


def test_the_cpu_delta_is_pinned_and_touches_nothing_of_the_recipe():
    # hardware without GPUs changes the hardware keys (a rank per node, tensor parallel 1) and adds the
    # CPU delta of tbx/verl_bridge/cpu.py; every key of the recipe (algorithm, optimizer, sampler) is kept
    gpu = verl_overrides(reference_config(), manifest(), plan_training(
        manifest(), RUN_DIR, "train-reference", GrpoSettings(group_size=4, groups_per_step=2),
        HardwareSettings(nodes=1, gpus_per_node=1, tensor_parallel_size=1)))
    cpu = cpu_overrides_for()
    assert cpu[:len(gpu)] == gpu  # the same list, then the delta
    check_golden("cpu_delta", cpu[len(gpu):])
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls=" \
           "tbx.verl_bridge.vllm_cpu.CpuReloadExtension" in cpu and "trainer.device=cpu" in cpu
    # verl joining the job's Ray cluster (local and Slurm executors): the head advertises the fake GPUs
    joined = cpu_overrides_for(executor="local")
    assert set(cpu) - set(joined) == {"+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=16",
                                      "+ray_kwargs.ray_init.include_dashboard=False",
                                      "+ray_kwargs.ray_init.object_store_memory=1073741824"}
    two_nodes = cpu_overrides_for(nodes=2, executor="slurm")
    assert {"trainer.nnodes=2", "trainer.n_gpus_per_node=1"} <= set(two_nodes)
    assert not any(item.startswith(("+ray_kwargs.ray_init.num", "ray_kwargs.ray_init.num")) for item in two_nodes)


def test_pool_checks():
    with pytest.raises(ConfigError, match="at most 10 groups"):
        plan_training(manifest(kept=10), RUN_DIR, "x")
    with pytest.raises(ConfigError, match="lora_rank"):
        plan_training(manifest("lora"), RUN_DIR, "x", GrpoSettings(lora_rank=0))
    with pytest.raises(ConfigError, match="pool.finetune"):
        plan_training(manifest("qlora"), RUN_DIR, "x")
    with pytest.raises(ConfigError, match="kept"):
        plan_training(PoolManifest(kept=()), RUN_DIR, "x")
    smaller = plan_training(manifest(kept=30), RUN_DIR, "x", GrpoSettings(groups_per_step=6),
                            HardwareSettings(nodes=1, gpus_per_node=8, tensor_parallel_size=2))
    assert (smaller.episodes_per_gpu, smaller.steps_per_epoch, smaller.total_epochs) == (6, 5, 11)


def test_overrides_follow_the_settings():
    pool = manifest()
    cfg = reference_config()
    cfg.logger = LoggerConfig(kind="none", project="p")
    plan = plan_training(pool, "/runs/with space/it's", "e", GrpoSettings(kl_coef=0.01, norm_adv_by_std=False))
    got = dict(item.split("=", 1) for item in verl_overrides(cfg, pool, plan))
    assert got["actor_rollout_ref.actor.use_kl_loss"] == "True" and got["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    assert got["algorithm.norm_adv_by_std_in_grpo"] == "False" and got["trainer.logger"] == "[console,file]"
    assert got["data.train_files"] == r"'/runs/with space/it\'s/verl/train.jsonl'"  # quoted for Hydra
    cfg.model.path = None
    with pytest.raises(ConfigError, match="model.path"):
        verl_overrides(cfg, pool, plan)


def test_pool_rows_and_bridge_files(tmp_path):
    pool = manifest(kept=3)
    rows = pool_rows(pool)
    assert [r["extra_info"]["task_id"] for r in rows] == sorted(pool.kept)
    assert rows[0] == {"data_source": "travel", "prompt": rows[0]["prompt"], "agent_name": "tbx_episode",
                       "reward_model": {"style": "rule", "ground_truth": rows[0]["extra_info"]["task_id"]},
                       "extra_info": rows[0]["extra_info"]} | {"data_source": "tbx/travel"}
    assert rows[2]["extra_info"] | {} == {"index": 2, "task_id": "travel/fam2/2", "domain": "travel",
                                          "family": "fam2", "band": "medium", "pool_hash": "0123456789abcdef"}
    cfg = reference_config()
    plan = plan_training(manifest(kept=40), str(tmp_path), "e")
    write_bridge_files(cfg, manifest(kept=40), plan)
    lines = Path(plan.paths.train_file).read_text().splitlines()
    assert len(lines) == 40 and json.loads(lines[0])["agent_name"] == "tbx_episode"
    entries = yaml.safe_load(Path(plan.paths.agent_loop_config).read_text())
    assert entries == [{"name": "tbx_episode", "_target_": "tbx.verl_bridge.agent_loop.TbxEpisodeLoop",
                        "tbx_config_path": plan.paths.tbx_config, "run_dir": str(tmp_path), "run_id": "",
                        "max_error_retries": 2, "prompt_style": "tbx", "stop_after_tool_call": True,
                        "resumed_after_step": 0}]
    loaded = load_config(plan.paths.tbx_config)  # the workers rebuild the same typed config
    assert (loaded.model.path, loaded.tasks, loaded.user, loaded.pool) == (cfg.model.path, cfg.tasks, cfg.user, cfg.pool)
    assert "${" not in loaded.backend.workdir + loaded.model.cache_dir  # interpolations resolved on load
    assert json.loads(Path(plan.paths.manifest).read_text())["hash"] == "0123456789abcdef"


@pytest.mark.parametrize("run_id", ["635e839243", "0123456789", "1234567890", "abcdef0123"])
def test_bridge_files_read_back_by_omegaconf_as_written(tmp_path, run_id):
    """verl reads the agent-loop YAML with OmegaConf, whose loader takes `635e839243` for a float (inf): the
    workers then stored every episode under run id 'inf', where the launcher's discard of a killed step's
    episodes never found them (seen in a CI run). Strings that read as numbers stay strings."""
    from omegaconf import OmegaConf

    reference = reference_config()
    cfg = dataclasses.replace(reference, model=dataclasses.replace(reference.model, name="1e5"))
    plan = plan_training(manifest(kept=40), str(tmp_path), "e", run_id=run_id)
    write_bridge_files(cfg, manifest(kept=40), plan)
    (entry,) = OmegaConf.to_container(OmegaConf.load(plan.paths.agent_loop_config))
    assert entry["run_id"] == run_id and entry["max_error_retries"] == 2 and entry["stop_after_tool_call"] is True
    assert load_config(plan.paths.tbx_config).model.name == "1e5"  # not 100000.0


def _compose_with_verl(overrides: list[str]):
    verl = pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")
    from hydra import compose, initialize_config_dir

    assert verl.__version__ == VERL_VERSION
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.mark.slow
@pytest.mark.verl
def test_overrides_compose_with_verls_config_and_pass_its_validation():
    composed = _compose_with_verl(overrides_for("full"))  # an unknown key would fail here
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    assert not need_reference_policy(composed) and not need_critic(composed)  # GRPO, kl 0: actor only
    validate_config(composed, use_reference_policy=False, use_critic=False)
    assert composed.actor_rollout_ref.rollout.prompt_length == 4096  # follows data.max_prompt_length
    assert composed.algorithm.filter_groups.metric == "acc" and composed.trainer.v1.sampler.sync_refill_failed_groups

    lora = _compose_with_verl(overrides_for("lora"))
    assert lora.actor_rollout_ref.model.lora_rank == 16 and lora.actor_rollout_ref.rollout.load_format == "safetensors"
    lora.actor_rollout_ref.rollout.name = "sglang"  # verl's vLLM LoRA-rank check imports vllm (GPU only)
    validate_config(lora, use_reference_policy=need_reference_policy(lora), use_critic=False)

    pool = manifest()
    quoted = plan_training(pool, "/runs/with space/it's", "e")
    composed = _compose_with_verl(verl_overrides(reference_config(), pool, quoted))
    assert composed.data.train_files == "/runs/with space/it's/verl/train.jsonl"


def test_a_lora_run_on_gpus_names_the_worker_extension_verls_lora_sync_needs():
    """verl 0.9.1's LoRA loader calls a vLLM method that vLLM 0.29 renamed (tbx/verl_bridge/vllm_ext.py);
    the CPU delta names its own extension, a subclass of that one."""
    key = "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls"
    lora = dict(line.split("=", 1) for line in (GOLDEN / "reference_lora.yaml").read_text().splitlines()[1:])
    full = dict(line.split("=", 1) for line in (GOLDEN / "reference_full.yaml").read_text().splitlines()[1:])
    assert lora[f"- {key}"] == "tbx.verl_bridge.vllm_ext.LoraSyncExtension" and f"- {key}" not in full


# grpo.max_staleness / grpo.is_threshold → verl's asynchronous V1 trainer and its off-policy correction
# (tbx/verl_bridge/async_overrides.py): the delta against the synchronous recipe, pinned like the CPU delta

_SAMPLER = "trainer.v1.sampler.custom_sampler.name"


def delta(sync: list[str], other: list[str]) -> tuple[list[str], set[str]]:
    """(what `other` adds or changes, in its order; the synchronous lines it replaces)."""
    return [line for line in other if line not in sync], set(sync) - set(other)


def test_max_staleness_0_is_the_synchronous_recipe_bit_for_bit():
    assert overrides_for("full", GrpoSettings(max_staleness=0)) == overrides_for("full")
    assert "trainer.v1.trainer_mode=sync" in overrides_for("full")


def test_the_asynchronous_delta_is_pinned_and_replaces_only_the_mode_and_the_sampler():
    sync = overrides_for("full")
    asynchronous = overrides_for("full", GrpoSettings(max_staleness=1))
    added, replaced = delta(sync, asynchronous)
    check_golden("async_delta", added)
    assert replaced == {"trainer.v1.trainer_mode=sync", f"{_SAMPLER}=TbxReplayBuffer"}  # changed in place
    assert len(asynchronous) == len(sync) + 4 and len({line.split("=")[0] for line in asynchronous}) == len(asynchronous)
    # a group dispatched at step g trains at g + s at the latest: verl counts the versions it spans, inclusively
    two = dict(line.split("=", 1) for line in overrides_for("full", GrpoSettings(max_staleness=2)))
    assert two["trainer.v1.sampler.max_off_policy_threshold"] == "3" == str(off_policy_threshold(2))
    assert two["trainer.v1.colocate_async.num_warmup_batches"] == "2"
    # on CPU the shim for verl's abort at a weight sync joins the CPU platform in the modules verl loads
    key = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"
    cpu = dict(line.split("=", 1) for line in cpu_overrides_for(grpo=GrpoSettings(group_size=4, groups_per_step=2,
                                                                                  max_staleness=1)))
    assert cpu[key] == "'tbx.verl_bridge.cpu_platform,tbx.verl_bridge.vllm_pause'"
    assert dict(line.split("=", 1) for line in cpu_overrides_for())[key] == "tbx.verl_bridge.cpu_platform"


def test_is_threshold_maps_to_verls_token_level_truncated_importance_weight():
    sync = overrides_for("full")
    corrected = overrides_for("full", GrpoSettings(is_threshold=2.0))
    added, replaced = delta(sync, corrected)
    check_golden("correction_delta", added)
    assert replaced == set()
    both = overrides_for("full", GrpoSettings(max_staleness=1, is_threshold=2.0))
    assert set(delta(sync, both)[0]) == set(delta(sync, overrides_for("full", GrpoSettings(max_staleness=1)))[0] + added)


def test_apply_delta_replaces_in_place_and_appends_new_keys():
    assert apply_delta([("a", 1), ("b", 2)], [("c", 3), ("a", 9)]) == [("a", 9), ("b", 2), ("c", 3)]
    assert apply_delta([("a", 1)], []) == [("a", 1)]


@pytest.mark.slow
@pytest.mark.verl
def test_the_asynchronous_overrides_compose_with_verls_config_and_load_tbx_samplers():
    composed = _compose_with_verl(overrides_for("full", GrpoSettings(max_staleness=1, is_threshold=2.0)))
    v1 = composed.trainer.v1
    assert v1.trainer_mode == "colocate_async" and v1.colocate_async.num_warmup_batches == 1
    assert (v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy) == (2, "drop")
    correction = composed.algorithm.rollout_correction
    assert (correction.rollout_is, correction.rollout_is_threshold, correction.bypass_mode) == ("token", 2.0, False)
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.utils.import_utils import load_extern_type

    assert get_trainer_cls(v1.trainer_mode).__name__ == "PPOTrainerColocateAsync"
    sampler_cls = load_extern_type(v1.sampler.custom_sampler.path, v1.sampler.custom_sampler.name)
    assert issubclass(sampler_cls, ReplayBufferAsync)
    sampler = sampler_cls(trainer_mode="colocate_async", trainer_config=v1.colocate_async,
                          max_off_policy_threshold=2, max_off_policy_strategy="drop",
                          sampler_kwargs=v1.sampler.sampler_kwargs, refill_fn=lambda n: n)
    assert (sampler.filter_groups_metric, sampler.max_replacements) == ("acc", 18)


@pytest.mark.slow
@pytest.mark.verl
def test_on_cpu_verls_trainer_computes_in_fp32():
    """verl's FSDP engine computes in bf16 when `fsdp_config.mixed_precision` is unset; on a CPU without bf16
    instructions that made a step's update ~25 minutes (CI). The CPU delta's keys reach verl's engine config."""
    composed = _compose_with_verl(cpu_overrides_for())
    import torch
    from verl.utils.torch_dtypes import PrecisionType

    for role in ("actor", "ref"):  # what verl's FSDPEngine._build_fsdp_module reads
        mixed = composed.actor_rollout_ref[role].fsdp_config.mixed_precision
        assert {PrecisionType.to_dtype(mixed.get(key, "bf16"))
                for key in ("param_dtype", "reduce_dtype", "buffer_dtype")} == {torch.float32}, role
    gpu = _compose_with_verl(overrides_for("full"))  # a GPU run keeps verl's bf16 default
    assert gpu.actor_rollout_ref.actor.fsdp_config.get("mixed_precision") is None
