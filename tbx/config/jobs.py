"""Where a stage's jobs run and how they are submitted (hardware, launcher), and where their results and logs
go (store, logger)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tbx.config.choices import Executor, LoggerKind, LoggerMode, RayAuthMode


@dataclass
class LoggerConfig:
    kind: LoggerKind = LoggerKind.wandb  # wandb | none
    mode: LoggerMode = LoggerMode.offline  # offline (sync later with `wandb sync`) | online | disabled
    project: str = "tbx"
    entity: str | None = None
    # the W&B group of the run (null: its identity). Give the runs of one comparison and their report one
    # group (logger.group=NAME) to see them together; stage=pipeline gives all its runs its own.
    group: str | None = None


@dataclass
class StoreConfig:
    url: str | None = None  # results database; null: <run folder>/results.sqlite. PostgreSQL for many jobs
    timeout_s: float = 60.0  # longest wait for one statement or connection of the results store


@dataclass
class HardwareConfig:
    """Where a stage's jobs run and what one job gets (conf/hardware/; see tbx/launch/plan.py)."""

    name: str = "local_cpu"
    executor: Executor = Executor.debug  # debug (in this process) | local (a subprocess per job) | slurm
    partition: str | None = None  # Slurm partition (null: the cluster's default)
    account: str | None = None  # Slurm account to charge
    qos: str | None = None  # Slurm quality of service
    time_min: int = 240  # wall-clock limit of one job in minutes (local and slurm executors)
    nodes: int = 1
    tasks_per_node: int = 1  # processes per node; stage=train: Ray nodes per allocated node
    gpus_per_node: int = 0
    gpu_type: str | None = None  # e.g. a100, h100: requests --gres=gpu:<type>:<gpus_per_node>
    cpus_per_task: int = 2
    mem_gb: int | None = None  # memory per node (null: the partition's default)
    constraint: str | None = None  # Slurm --constraint (node features)
    setup: list[str] = field(default_factory=list)  # shell lines before a Slurm job (module load, conda activate)
    # token (a fresh random token per job) | disabled; set on every Ray process
    ray_auth_mode: RayAuthMode = RayAuthMode.token


@dataclass
class LauncherConfig:
    """How a stage is submitted; the hardware group says where."""

    shards: int = 1  # eval/probe: job-array size; job i runs eval.shard=i eval.num_shards=shards
    max_parallel: int | None = None  # most array jobs running at once (null: no limit)
    folder: str = field(default="${out_root}/jobs", metadata={"path": True})  # submitit scripts, logs and pickles, named by job id
    wait: bool = True  # wait for the jobs and print the summary (false: print the job ids and return)
    wait_timeout_s: float | None = None  # stop waiting after this long (null: no limit)
