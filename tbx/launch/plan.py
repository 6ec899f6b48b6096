"""The job plan: config + hardware -> nodes, tasks, GPUs, vLLM replicas, shards, Ray layout (pure).

`make_plan` derives everything the launcher needs from the composed config and checks that the
numbers add up before anything is submitted; a mismatch raises `ConfigError` naming the field, the
values and the fix. `executor_parameters` turns a plan into submitit's parameters. No I/O here:
the task count, when sharding needs it, and the training batch come in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tbx.config import Config, HardwareConfig, LauncherConfig
from tbx.errors import ConfigError
from tbx.runs.stages import STAGES, stage_of

CONFIG = "conf/config.yaml"


@dataclass(frozen=True)
class TrainBatch:
    """Episodes of one GRPO step: `groups` tasks, each attempted `episodes_per_group` times."""

    groups: int  # grpo.groups_per_step (18 in the reference run, docs/training.md)
    episodes_per_group: int  # grpo.group_size (8)

    @property
    def episodes(self) -> int:
        return self.groups * self.episodes_per_group


@dataclass(frozen=True)
class JobPlan:
    """What one stage submits. Counts are per job unless they say otherwise."""

    stage: str
    hardware: str  # the hardware option's name
    executor: str  # debug | local | slurm
    nodes: int
    tasks_per_node: int
    gpus_per_task: int
    cpus_per_task: int
    tensor_parallel_size: int
    vllm_replicas: int  # per task: its GPUs / tensor-parallel size (0 without GPUs)
    shards: int  # eval/probe: jobs in the array (1: one job); then one job writes the summary
    ray_nodes: int  # stage=train with grpo.trainer=verl off this process: head (rank 0) + workers; 0: no Ray
    episodes_per_step: int  # stage=train: groups x episodes per group (0 otherwise)
    data_parallel: int  # stage=train: ranks a step's episodes are split over (0 otherwise)
    notes: tuple[str, ...] = ()
    # what each Ray node advertises (ray_nodes > 0): its GPUs and CPUs; verl on a machine without GPUs gets
    # one fake GPU per training rank and more CPU slots than cores (tbx/verl_bridge/cpu.py)
    ray_gpus: int = 0
    ray_cpus: int = 0
    ray_object_store_bytes: int | None = None  # None: Ray's default

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def gpus(self) -> int:
        return self.tasks * self.gpus_per_task

    @property
    def ray_workers(self) -> int:
        return max(self.ray_nodes - 1, 0)

    @property
    def sharded(self) -> bool:
        return self.shards > 1

    def describe(self) -> str:
        """The plan as comment lines, for `show=true`."""
        lines = [f"# plan: stage={self.stage} on {self.executor} (hardware={self.hardware})",
                 f"#   job: {self.nodes} node(s) x {self.tasks_per_node} task(s); per task {self.gpus_per_task} "
                 f"GPU(s), {self.cpus_per_task} CPU(s)"]
        if self.gpus_per_task:
            lines.append(f"#   model: tensor parallel {self.tensor_parallel_size} -> {self.vllm_replicas} vLLM "
                         f"replica(s) per task, {self.vllm_replicas * self.tasks} per job")
        if self.sharded:
            lines.append(f"#   shards: an array of {self.shards} jobs (eval.shard=i eval.num_shards={self.shards}), "
                         "then one job that finds them in the store and writes the summary")
        if self.ray_nodes:
            fake = "" if self.gpus_per_task else " (fake: verl on CPU)"
            lines.append(f"#   ray: head on rank 0 + {self.ray_workers} worker(s), {self.ray_gpus} GPU(s){fake} and "
                         f"{self.ray_cpus} CPU slot(s) each")
        if self.episodes_per_step:
            lines.append(f"#   train: {self.episodes_per_step} episodes per step over {self.data_parallel} "
                         f"data-parallel rank(s), {self.episodes_per_step // self.data_parallel} each")
        lines += [f"#   note: {note}" for note in self.notes]
        return "\n".join(lines)


def make_plan(cfg: Config, n_tasks: int | None = None) -> JobPlan:
    """Derive and check the plan. `n_tasks`: size of the task set, when known (checks the shard count)."""
    hw = cfg.hardware
    check_hardware(hw)
    gpus_per_task = hw.gpus_per_node // hw.tasks_per_node
    tp = cfg.model.tensor_parallel_size
    check_tensor_parallel(hw, gpus_per_task, tp, cfg.model.name)
    shards = check_shards(cfg, n_tasks)
    tasks = hw.nodes * hw.tasks_per_node
    batch, data_parallel, ray_nodes = None, 0, 0
    if cfg.stage.name == "train":
        batch = TrainBatch(cfg.grpo.groups_per_step, cfg.grpo.group_size)
        data_parallel = check_trainer(cfg, batch, tasks)
        ray_nodes = tasks if cfg.grpo.trainer == "verl" and hw.executor != "debug" else 0
    # a Ray node of any other job (RayJob brings one up for whatever it runs) has the task's own resources
    ray_gpus, ray_cpus, ray_store = (ray_resources(gpus_per_task, hw.cpus_per_task) if ray_nodes
                                     else (gpus_per_task, hw.cpus_per_task, None))
    return JobPlan(
        stage=cfg.stage.name, hardware=hw.name, executor=str(hw.executor), nodes=hw.nodes,
        tasks_per_node=hw.tasks_per_node, gpus_per_task=gpus_per_task, cpus_per_task=hw.cpus_per_task,
        tensor_parallel_size=tp, vllm_replicas=gpus_per_task // tp, shards=shards, ray_nodes=ray_nodes,
        episodes_per_step=batch.episodes if batch else 0, data_parallel=data_parallel,
        notes=plan_notes(cfg, shards), ray_gpus=ray_gpus, ray_cpus=ray_cpus, ray_object_store_bytes=ray_store,
    )


def ray_resources(gpus_per_task: int, cpus_per_task: int) -> tuple[int, int, int | None]:
    """(GPUs, CPUs, object store bytes) of a Ray node of a verl job: its own (Ray's default store), or on
    CPU verl's fake GPUs, CPU slots and a small store (tbx/verl_bridge/cpu.py)."""
    if gpus_per_task:
        return gpus_per_task, cpus_per_task, None
    from tbx.verl_bridge.cpu import OBJECT_STORE_BYTES, RANKS_PER_NODE, ray_cpu_slots

    return RANKS_PER_NODE, ray_cpu_slots(cpus_per_task), OBJECT_STORE_BYTES


def _hw_error(hw: HardwareConfig, key: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"conf/hardware/{hw.name}.yaml", f"hardware.{key}", problem, fix)


def check_hardware(hw: HardwareConfig) -> None:
    for key in ("nodes", "tasks_per_node", "cpus_per_task", "time_min"):
        if getattr(hw, key) < 1:
            raise _hw_error(hw, key, f"is {getattr(hw, key)}", f"give hardware.{key} >= 1")
    if hw.gpus_per_node < 0:
        raise _hw_error(hw, "gpus_per_node", f"is {hw.gpus_per_node}", "give 0 (CPU) or more")
    if hw.mem_gb is not None and hw.mem_gb < 1:
        raise _hw_error(hw, "mem_gb", f"is {hw.mem_gb}", "give >= 1, or null for the partition's default")
    if hw.executor != "slurm" and hw.nodes > 1:
        raise _hw_error(hw, "nodes", f"is {hw.nodes}, but the {hw.executor} executor runs on this machine only",
                        "use a Slurm option (hardware=slurm_h100_3x8) or hardware.nodes=1")
    if hw.executor == "debug" and hw.tasks_per_node > 1:
        raise _hw_error(hw, "tasks_per_node", f"is {hw.tasks_per_node}, but the debug executor runs one task "
                        "in this process", "use hardware=local_jobs (a process per task) or Slurm")
    if hw.gpus_per_node % hw.tasks_per_node:
        raise _hw_error(hw, "gpus_per_node", f"{hw.gpus_per_node} GPUs do not split over {hw.tasks_per_node} "
                        "tasks per node", "make hardware.tasks_per_node divide hardware.gpus_per_node")
    if hw.gpu_type and not hw.gpus_per_node:
        raise _hw_error(hw, "gpu_type", f"is {hw.gpu_type!r} but hardware.gpus_per_node is 0",
                        "set hardware.gpus_per_node, or hardware.gpu_type=null")


def check_tensor_parallel(hw: HardwareConfig, gpus_per_task: int, tp: int, model: str) -> None:
    """vLLM splits one model over `tp` GPUs of a task; the task's GPUs must hold whole replicas."""
    source, key = f"conf/model/{model}.yaml", "model.tensor_parallel_size"
    if tp < 1:
        raise ConfigError(source, key, f"is {tp}", "give 1 or more GPUs per model replica")
    if tp > 1 and gpus_per_task == 0:
        raise ConfigError(source, key, f"is {tp}, but hardware={hw.name} has no GPUs",
                          "use GPU hardware (e.g. hardware=slurm_a100x8) or model.tensor_parallel_size=1")
    if gpus_per_task and gpus_per_task % tp:
        divisors = [d for d in range(1, gpus_per_task + 1) if gpus_per_task % d == 0]
        raise ConfigError(source, key, f"is {tp}, which does not divide the {gpus_per_task} GPUs of a task "
                          f"(hardware={hw.name})", f"use one of {divisors}")


def check_shards(cfg: Config, n_tasks: int | None) -> int:
    shards = cfg.launcher.shards
    if shards < 1:
        raise ConfigError(CONFIG, "launcher.shards", f"is {shards}", "give launcher.shards >= 1")
    if cfg.launcher.max_parallel is not None and cfg.launcher.max_parallel < 1:
        raise ConfigError(CONFIG, "launcher.max_parallel", f"is {cfg.launcher.max_parallel}",
                          "give >= 1, or null for no limit")
    if shards == 1:
        return 1
    if not stage_of(cfg).shardable:
        sharded = [stage.name for stage in STAGES.values() if stage.shardable]
        raise ConfigError(CONFIG, "launcher.shards", f"is {shards}, but stage={cfg.stage.name} is one job",
                          f"shard only {' and '.join(sharded)}; set launcher.shards=1")
    if cfg.eval.num_shards != 1:
        raise ConfigError(CONFIG, "eval.num_shards", f"is {cfg.eval.num_shards} while launcher.shards is {shards}",
                          "give one of them: launcher.shards sets eval.shard/eval.num_shards of each job itself")
    if n_tasks is not None and shards > n_tasks:
        raise ConfigError(CONFIG, "launcher.shards", f"is {shards}, more than the {n_tasks} task(s) of "
                          f"tasks={cfg.tasks.name}", f"give launcher.shards <= {n_tasks}")
    return shards


def check_trainer(cfg: Config, batch: TrainBatch, tasks: int) -> int:
    """The native trainer is one process; verl splits each step's episodes over every GPU of the
    allocation (or every task on CPU). Returns the data-parallel size."""
    hw = cfg.hardware
    if cfg.grpo.trainer == "native":
        if tasks > 1:
            raise _hw_error(hw, "nodes", f"{hw.nodes} node(s) x {hw.tasks_per_node} task(s), but grpo.trainer=native "
                            "trains in one process", "use grpo.trainer=verl for several nodes, or one node and task")
        return 1
    data_parallel = hw.nodes * hw.gpus_per_node if hw.gpus_per_node else tasks
    check_train_batch(hw, batch, data_parallel)
    return data_parallel


def check_train_batch(hw: HardwareConfig, batch: TrainBatch, data_parallel: int) -> None:
    """Each data-parallel rank must get the same number of episodes of a step."""
    if batch.groups < 1 or batch.episodes_per_group < 1:
        raise ConfigError("conf/grpo", "grpo.groups_per_step", f"{batch.groups} groups x {batch.episodes_per_group} "
                          "episodes", "give at least one group (grpo.groups_per_step) of at least one episode "
                          "(grpo.group_size)")
    if batch.episodes % data_parallel:
        fits = [d for d in range(1, batch.episodes + 1) if batch.episodes % d == 0 and d % hw.gpus_per_node == 0] \
            if hw.gpus_per_node else []
        hint = f" (GPU counts that fit: {fits[:6]})" if fits else ""
        raise _hw_error(hw, "nodes", f"{batch.groups} groups x {batch.episodes_per_group} episodes = "
                        f"{batch.episodes} per step do not split over {data_parallel} data-parallel ranks "
                        f"({hw.nodes} node(s) x {hw.gpus_per_node or hw.tasks_per_node})",
                        f"choose hardware.nodes x hardware.gpus_per_node dividing {batch.episodes}{hint}, "
                        "or change grpo.groups_per_step or grpo.group_size")


def plan_notes(cfg: Config, shards: int) -> tuple[str, ...]:
    notes = []
    if shards > 1 and cfg.hardware.executor == "slurm" and not cfg.store.url:
        notes.append("shards share <run folder>/results.sqlite (SQLite WAL): fine on one node; with jobs on "
                     "several nodes give store.url=postgresql+psycopg://... (WAL needs one host's shared memory)")
    if cfg.hardware.executor == "slurm" and not cfg.launcher.wait:
        notes.append("launcher.wait=false: launch.py prints the job ids and returns; the summary lands in the "
                     "run folder")
    return tuple(notes)


def executor_parameters(hw: HardwareConfig, plan: JobPlan, launcher: LauncherConfig, name: str) -> dict[str, Any]:
    """submitit `AutoExecutor.update_parameters` arguments for one job of `plan` (pure)."""
    if plan.executor == "debug":
        return {}
    params: dict[str, Any] = {"name": name, "timeout_min": hw.time_min, "nodes": plan.nodes,
                              "tasks_per_node": plan.tasks_per_node}
    if plan.executor == "local":
        if hw.gpus_per_node:
            params["gpus_per_node"] = hw.gpus_per_node
        return params
    params["cpus_per_task"] = hw.cpus_per_task
    if hw.mem_gb:
        params["mem_gb"] = hw.mem_gb
    if hw.gpus_per_node and hw.gpu_type:
        params["slurm_gres"] = f"gpu:{hw.gpu_type}:{hw.gpus_per_node}"
    elif hw.gpus_per_node:
        params["gpus_per_node"] = hw.gpus_per_node
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(hw, key):
            params[f"slurm_{key}"] = getattr(hw, key)
    if hw.setup:
        params["slurm_setup"] = list(hw.setup)
    if launcher.max_parallel:
        params["slurm_array_parallelism"] = launcher.max_parallel
    return params
