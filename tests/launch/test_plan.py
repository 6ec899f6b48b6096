"""The job plan: derived numbers, the checks (field + values + fix), and submitit's parameters."""

import pytest

from tbx.errors import ConfigError
from tbx.launch.plan import executor_parameters, make_plan
from tests.launch import compose_cfg


def test_default_runs_here_in_one_job():
    plan = make_plan(compose_cfg())
    assert (plan.executor, plan.nodes, plan.tasks, plan.gpus, plan.shards, plan.ray_nodes) == ("debug", 1, 1, 0, 1, 0)
    assert plan.vllm_replicas == 0 and not plan.sharded
    assert executor_parameters(compose_cfg().hardware, plan, compose_cfg().launcher, "x") == {}


@pytest.mark.parametrize(("tp", "replicas"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_a100_node_holds_gpus_over_tp_replicas(tp, replicas):
    plan = make_plan(compose_cfg("hardware=slurm_a100x8", f"model.tensor_parallel_size={tp}"))
    assert plan.gpus_per_task == 8 and plan.vllm_replicas == replicas  # 8 GPUs / tp


def test_tp_that_does_not_divide_the_gpus_names_field_and_divisors():
    with pytest.raises(ConfigError) as err:
        make_plan(compose_cfg("hardware=slurm_a100x8", "model.tensor_parallel_size=3"))
    assert err.value.field == "model.tensor_parallel_size"
    assert "does not divide the 8 GPUs" in err.value.problem and "[1, 2, 4, 8]" in err.value.fix


def test_tp_without_gpus_points_at_gpu_hardware():
    with pytest.raises(ConfigError, match="has no GPUs") as err:
        make_plan(compose_cfg("model.tensor_parallel_size=2"))
    assert "hardware=slurm_a100x8" in err.value.fix


VERL = ("stage=train", "grpo.trainer=verl")


def test_training_on_3x8_h100_is_a_ray_cluster_with_6_episodes_per_rank():
    plan = make_plan(compose_cfg(*VERL, "hardware=slurm_h100_3x8"))  # grpo=reference: 18 groups x 8
    assert (plan.nodes, plan.tasks_per_node, plan.gpus) == (3, 1, 24)
    assert (plan.ray_nodes, plan.ray_workers) == (3, 2)  # head on the first node, a worker on each other
    assert plan.episodes_per_step == 144 and plan.data_parallel == 24  # 18 x 8 over 3 x 8 GPUs: 6 each


def test_training_batch_that_does_not_split_over_the_ranks_is_refused():
    overrides = (*VERL, "hardware=slurm_h100_3x8", "hardware.nodes=5")  # 40 GPUs; 144 % 40 = 24
    with pytest.raises(ConfigError) as err:
        make_plan(compose_cfg(*overrides))
    assert err.value.field == "hardware.nodes" and "144 per step do not split over 40" in err.value.problem
    assert "[8, 16, 24, 48, 72, 144]" in err.value.fix and "grpo.groups_per_step" in err.value.fix
    assert make_plan(compose_cfg(*overrides, "grpo.groups_per_step=20")).data_parallel == 40  # 160 / 40 = 4


def test_native_training_is_one_process_without_ray():
    plan = make_plan(compose_cfg("stage=train", "grpo=cpu_small"))
    assert plan.ray_nodes == 0 and plan.data_parallel == 1 and plan.episodes_per_step == 8  # 2 groups x 4
    assert make_plan(compose_cfg(*VERL)).ray_nodes == 0  # in this process: verl starts its own Ray
    with pytest.raises(ConfigError, match="trains in one process") as err:
        make_plan(compose_cfg("stage=train", "hardware=slurm_h100_3x8"))
    assert "grpo.trainer=verl" in err.value.fix


@pytest.mark.parametrize(("overrides", "field", "words"), [
    (["hardware.nodes=0"], "hardware.nodes", "hardware.nodes >= 1"),
    (["hardware.nodes=2"], "hardware.nodes", "runs on this machine only"),
    (["hardware.tasks_per_node=2"], "hardware.tasks_per_node", "hardware=local_jobs"),
    (["hardware=slurm_a100x8", "hardware.tasks_per_node=3"], "hardware.gpus_per_node", "do not split over 3"),
    (["hardware.gpu_type=a100"], "hardware.gpu_type", "gpus_per_node is 0"),
    (["hardware.mem_gb=0"], "hardware.mem_gb", "is 0"),
    # (hardware.executor, hardware.ray_auth_mode and grpo.trainer are Enum fields, refused at composition:
    # tests/hardening/test_bad_config.py)
    (["stage=train", "grpo.trainer=verl", "grpo.groups_per_step=0"], "grpo.groups_per_step",
     "give grpo.groups_per_step >= 1"),
    (["launcher.shards=0"], "launcher.shards", "launcher.shards >= 1"),
    (["launcher.shards=2", "stage=select"], "launcher.shards", "stage=select is one job"),
    (["launcher.shards=2", "eval.num_shards=2"], "eval.num_shards", "give one of them"),
    (["launcher.max_parallel=0"], "launcher.max_parallel", "is 0"),
])
def test_bad_numbers_name_the_field_and_the_fix(overrides, field, words):
    with pytest.raises(ConfigError) as err:
        make_plan(compose_cfg(*overrides))
    assert err.value.field == field and words in str(err.value)


def test_more_shards_than_tasks_is_refused_only_when_the_count_is_known():
    cfg = compose_cfg("stage=probe", "tasks=mock", "launcher.shards=4")
    assert make_plan(cfg).shards == 4
    with pytest.raises(ConfigError, match="more than the 3 task"):
        make_plan(cfg, n_tasks=3)
    assert make_plan(cfg, n_tasks=4).sharded


def test_slurm_parameters_for_the_a100_node():
    cfg = compose_cfg("hardware=slurm_a100x8", "hardware.account=proj", "hardware.setup=[module load cuda]",
                      "launcher.shards=8", "launcher.max_parallel=2", "stage=probe")
    plan = make_plan(cfg)
    assert executor_parameters(cfg.hardware, plan, cfg.launcher, "probe-x") == {
        "name": "probe-x", "timeout_min": 720, "nodes": 1, "tasks_per_node": 1, "cpus_per_task": 64, "mem_gb": 480,
        "slurm_gres": "gpu:a100:8", "slurm_partition": "gpu", "slurm_account": "proj", "slurm_constraint": "a100",
        "slurm_setup": ["module load cuda"], "slurm_array_parallelism": 2}
    assert any("SQLite WAL" in note for note in plan.notes)  # 8 writers, no store.url


def test_untyped_gpus_and_local_jobs_parameters():
    cfg = compose_cfg("hardware=slurm_local", "hardware.gpus_per_node=2")
    params = executor_parameters(cfg.hardware, make_plan(cfg), cfg.launcher, "n")
    assert params["gpus_per_node"] == 2 and "slurm_gres" not in params and params["slurm_partition"] == "debug"
    local = compose_cfg("hardware=local_jobs")
    assert executor_parameters(local.hardware, make_plan(local), local.launcher, "n") == {
        "name": "n", "timeout_min": 240, "nodes": 1, "tasks_per_node": 1}


def test_describe_lists_what_will_run():
    text = make_plan(compose_cfg("hardware=slurm_a100x8", "model.tensor_parallel_size=2", "stage=probe",
                                 "launcher.shards=4")).describe()
    assert "stage=probe on slurm (hardware=slurm_a100x8)" in text
    assert "tensor parallel 2 -> 4 vLLM replica(s)" in text and "an array of 4 jobs" in text
    ray = make_plan(compose_cfg(*VERL, "hardware=slurm_h100_3x8")).describe()
    assert "head on rank 0 + 2 worker(s), 8 GPU(s) and 96 CPU slot(s) each" in ray
    assert "144 episodes per step over 24" in ray
    cpu = make_plan(compose_cfg(*VERL, "hardware=local_jobs", "grpo.groups_per_step=2", "grpo.group_size=4"))
    assert (cpu.ray_nodes, cpu.ray_gpus, cpu.ray_cpus) == (1, 1, 16)  # verl on CPU: one fake GPU, 16 slots
    assert "1 GPU(s) (fake: verl on CPU) and 16 CPU slot(s)" in cpu.describe()


def test_where_a_run_runs_is_not_part_of_its_identity():
    from tbx.runs.identity import run_identity

    here = compose_cfg("stage=probe", "tasks=mock")
    there = compose_cfg("stage=probe", "tasks=mock", "hardware=slurm_a100x8", "launcher.shards=3", "launcher.wait=false")
    assert run_identity(here) == run_identity(there)  # same folder, same store rows, same W&B group


def test_how_the_model_is_served_is_not_part_of_a_runs_identity():
    """The server's interpreter, KV cache and batch width change float summation order only: a run
    resumed with other settings continues in the same folder."""
    from tbx.runs.identity import run_identity

    here = compose_cfg("stage=eval", "tasks=mock", "policy=model")
    there = compose_cfg("stage=eval", "tasks=mock", "policy=model", "model.server.kv_cache_gib=4",
                        "model.server.max_num_seqs=8", "model.server.enforce_eager=false")
    assert there.model.server.max_num_seqs == 8 and run_identity(here) == run_identity(there)
    assert run_identity(here) != run_identity(compose_cfg("stage=eval", "tasks=mock", "policy=model",
                                                          "model.max_new_tokens=7"))
