"""Everything that differs when verl trains on a machine without GPUs, in one place (pure: no verl).

verl 0.9.1 has no CPU platform and its trainer is never run on CPU by verl's own CI, but its
extension points are enough (docs/training.md, "verl on a CPU machine").
The launcher applies this delta when the hardware option has no GPUs (`hardware.gpus_per_node: 0`,
as `local_cpu`, `local_jobs` and `slurm_local` have): the same `launch.py → plan → submitit → Ray
→ verl.trainer.main_ppo` path as on a GPU cluster, with

- `cpu_environment`: the variables every verl process needs — our platform module
  (`tbx.verl_bridge.cpu_platform`, loaded by verl through VERL_USE_EXTERNAL_MODULES and chosen by
  VERL_PLATFORM=cpu), VERL_ENGINE_DEVICE=cuda (verl registers its FSDP engine for cuda and npu
  only; the platform maps the calls to the CPU), vLLM's CPU KV cache size, the node's cores as threads, torch.compile off;
- `cpu_overrides`: the verl keys that change (each with its reason below). The list is pinned by
  tests/verl_bridge/golden/cpu_delta.yaml beside the GPU recipes' golden files.

A data-parallel rank is one Ray "GPU" on CPU: the Ray head advertises one fake GPU per rank
(`fake_gpus`), which verl's placement groups ask for; nothing runs on them.
"""

from __future__ import annotations

from typing import Any

PLATFORM_MODULE = "tbx.verl_bridge.cpu_platform"
WORKER_EXTENSION = "tbx.verl_bridge.vllm_cpu.CpuReloadExtension"
RANKS_PER_NODE = 1  # one training rank (and one rollout replica) per Ray node on CPU
# Ray CPU slots a node advertises: verl's actors reserve them (the trainer worker's bundle alone asks
# for 3), so a 2-core node must advertise more; slots are scheduling tokens, the OS shares the cores.
RAY_CPU_SLOTS = 16
# Ray's object store: 30 % of the machine's memory by default, which on a laptop-sized node competes with
# the trainer and vLLM; a CPU step moves a few MB of tensors through it
OBJECT_STORE_BYTES = 1 << 30
# Ray starts its worker processes at niceness 15 (Ray's `worker_niceness`): on a CPU node every verl process
# (the trainer, vLLM, the agent loop) is a Ray worker, and beside work at the normal niceness on the same cores
# a niceness of 15 gets a few percent of a core each (the kernel's weight 36 against 1024), so a training step
# crawls on a loaded machine (docs/benchmarks.md, "Measurements behind design choices"). Read by the raylet when its node starts:
# the job's Ray head (tbx/launch/ray_cluster.py) or the Ray instance verl starts itself.
RAY_NODE_ENVIRONMENT = {"RAY_worker_niceness": "0"}


def is_cpu(gpus_per_node: int) -> bool:
    """verl trains on the CPU exactly when the hardware option has no GPUs."""
    return gpus_per_node == 0


def cpu_environment(kv_cache_gib: float, threads: int) -> dict[str, str]:
    """Variables for verl's trainer process (Ray passes them on to every worker it starts)."""
    return {
        # Ray gives an actor that names no CPU count one thread: the trainer and vLLM (which take turns,
        # never run at once) would each use one core of the node's `threads`
        "OMP_NUM_THREADS": str(threads),
        "VERL_USE_EXTERNAL_MODULES": PLATFORM_MODULE,
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "VLLM_CPU_KVCACHE_SPACE": f"{kv_cache_gib:g}",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # share the cores with the trainer instead of pinning them
        "TORCH_COMPILE_DISABLE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **RAY_NODE_ENVIRONMENT,
    }


def fake_gpus(nodes: int) -> int:
    """Ray "GPU"s the cluster must advertise: one per training rank."""
    return nodes * RANKS_PER_NODE


def ray_cpu_slots(cpus: int) -> int:
    """CPU slots for a Ray node of `cpus` cores that verl trains on."""
    return max(cpus, RAY_CPU_SLOTS)


def cpu_overrides(cpus: int, nodes: int, joins_cluster: bool, kv_cache_gib: float) -> list[tuple[str, Any]]:
    """The verl keys that differ on CPU. `joins_cluster`: verl joins a Ray cluster the job started
    (whose head already advertises the fake GPUs) instead of starting its own. The environment of
    `cpu_environment` also goes to every Ray worker verl starts (`runtime_env`): workers of a cluster
    the job started inherit the Ray node's environment, not the trainer's."""
    pairs: list[tuple[str, Any]] = [
        ("trainer.device", "cpu"),
        # FSDP1 passes sync_module_states=True, which torch refuses for CPU parameters
        ("actor_rollout_ref.actor.strategy", "fsdp2"),
        ("actor_rollout_ref.ref.strategy", "fsdp2"),
        # no flash attention on CPU: torch's own kernels, on padded batches
        ("+actor_rollout_ref.model.override_config.attn_implementation", "sdpa"),
        ("actor_rollout_ref.model.use_remove_padding", False),
        ("actor_rollout_ref.actor.use_torch_compile", False),
        # recomputing activations saves accelerator memory at a third more compute; host memory is ample
        ("actor_rollout_ref.model.enable_gradient_checkpointing", False),
        ("actor_rollout_ref.actor.fsdp_config.use_torch_compile", False),
        # vLLM's CPU build repacks weights after loading: reload through vLLM's layerwise reload
        ("+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls", WORKER_EXTENSION),
        ("actor_rollout_ref.rollout.dtype", "float32"),  # bf16 is slower than fp32 on these CPUs
        # verl's FSDP engine computes in bf16 unless told otherwise (`mixed_precision` unset → param_dtype bf16);
        # a CPU without bf16 instructions (AVX2 only) multiplies bf16 ~70x slower than fp32 (0.7 against 54 GFLOPS a
        # core, measured here), so a step's update took 25 minutes instead of 1 to 2: the trainer computes in fp32,
        # as vLLM samples, on every CPU
        *((f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision.{key}", "fp32")
          for role in ("actor", "ref") for key in ("param_dtype", "reduce_dtype", "buffer_dtype")),
        ("actor_rollout_ref.rollout.enforce_eager", True),  # compiling the graphs takes minutes
        # sleep mode frees and restores GPU memory through CUDA's allocator
        ("actor_rollout_ref.rollout.free_cache_engine", False),
        ("+actor_rollout_ref.rollout.enable_sleep_mode", False),
        # a seeded request split by chunked prefill kills the CPU engine ("CPU Generator does not use offset")
        ("actor_rollout_ref.rollout.enable_chunked_prefill", False),
        # one process of each helper kind: a small machine has few cores
        ("actor_rollout_ref.rollout.agent.num_workers", 1),
        ("reward.num_workers", 1),
        ("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1),
        ("data.dataloader_num_workers", 0),  # the rows are a few ids: no loader processes
    ]
    pairs += [(f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}", value)
              for key, value in cpu_environment(kv_cache_gib, cpus).items()]
    if not joins_cluster:
        pairs += [
            ("+ray_kwargs.ray_init.num_gpus", fake_gpus(nodes)),
            ("ray_kwargs.ray_init.num_cpus", ray_cpu_slots(cpus)),
            ("+ray_kwargs.ray_init.include_dashboard", False),
            ("+ray_kwargs.ray_init.object_store_memory", OBJECT_STORE_BYTES),
        ]
    return pairs
