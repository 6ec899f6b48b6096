"""Typed schema of every config group, registered with Hydra's ConfigStore.

A typo in a key or a wrong type fails at compose time. `launch.py` converts the composed config
once with `OmegaConf.to_object`; below it, code receives these dataclasses only. Each field is
documented once, in the module of its group: players (model, endpoint, server, policy, user, judge),
episodes (tasks, backend, eval, faults), training (difficulty, pool, probe, grpo, pipeline, train,
select), stages (stage, report, regrade, serve, serve_model, view) and jobs (hardware, launcher,
store, logger); choices holds the enumerations, markers the identity and path metadata. Everything
is imported from here: `from tbx.config import Config, ModelConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tbx.config.choices import (
    BackendKind,
    Executor,
    Finetune,
    LoggerKind,
    LoggerMode,
    LossAggMode,
    ModelKind,
    RayAuthMode,
    StoppingRule,
    ToolFormat,
    Trainer,
    Transport,
    plain,
)
from tbx.config.episodes import BackendConfig, EvalConfig, FaultsConfig, TasksConfig
from tbx.config.jobs import HardwareConfig, LauncherConfig, LoggerConfig, StoreConfig
from tbx.config.markers import CONTENT, CONTENT_PATH, NOT_IDENTITY, NOT_IDENTITY_PATH, STAGE_GROUP
from tbx.config.players import (
    EndpointConfig,
    JudgeConfig,
    ModelConfig,
    PolicyConfig,
    ServerConfig,
    UserConfig,
)
from tbx.config.stages import (
    RegradeConfig,
    ReportConfig,
    ServeConfig,
    ServeModelConfig,
    StageConfig,
    ViewConfig,
)
from tbx.config.training import (
    DifficultyConfig,
    GrpoConfig,
    PipelineConfig,
    PoolConfig,
    ProbeConfig,
    SelectConfig,
    TrainConfig,
)

__all__ = [
    "CONTENT", "CONTENT_PATH", "GROUPS", "NOT_IDENTITY", "NOT_IDENTITY_PATH", "STAGE_GROUP",
    "BackendConfig", "BackendKind", "Config", "DifficultyConfig", "EndpointConfig", "EvalConfig", "Executor",
    "FaultsConfig", "Finetune", "GrpoConfig", "HardwareConfig", "JudgeConfig", "LauncherConfig", "LoggerConfig",
    "LoggerKind", "LoggerMode", "LossAggMode", "ModelConfig", "ModelKind", "PipelineConfig", "PolicyConfig",
    "PoolConfig", "ProbeConfig", "RayAuthMode", "RegradeConfig", "ReportConfig", "SelectConfig", "ServeConfig",
    "ServeModelConfig", "ServerConfig", "StageConfig", "StoppingRule", "StoreConfig", "TasksConfig", "ToolFormat",
    "TrainConfig", "Trainer", "Transport", "UserConfig", "ViewConfig", "plain", "register_configs",
]


@dataclass
class Config:
    stage: StageConfig = field(default_factory=StageConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig, metadata=STAGE_GROUP)
    policy: PolicyConfig = field(default_factory=PolicyConfig, metadata=STAGE_GROUP)
    model: ModelConfig = field(default_factory=ModelConfig, metadata=STAGE_GROUP)
    user: UserConfig = field(default_factory=UserConfig, metadata=STAGE_GROUP)
    judge: JudgeConfig = field(default_factory=JudgeConfig, metadata=STAGE_GROUP)
    backend: BackendConfig = field(default_factory=BackendConfig, metadata=STAGE_GROUP)
    eval: EvalConfig = field(default_factory=EvalConfig, metadata=STAGE_GROUP)
    faults: FaultsConfig = field(default_factory=FaultsConfig, metadata=STAGE_GROUP)
    regrade: RegradeConfig = field(default_factory=RegradeConfig, metadata=STAGE_GROUP)
    serve: ServeConfig = field(default_factory=ServeConfig, metadata=STAGE_GROUP)
    serve_model: ServeModelConfig = field(default_factory=ServeModelConfig, metadata=NOT_IDENTITY)
    view: ViewConfig = field(default_factory=ViewConfig, metadata=NOT_IDENTITY)
    store: StoreConfig = field(default_factory=StoreConfig, metadata=NOT_IDENTITY)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig, metadata=STAGE_GROUP)
    pool: PoolConfig = field(default_factory=PoolConfig, metadata=STAGE_GROUP)
    probe: ProbeConfig = field(default_factory=ProbeConfig, metadata=STAGE_GROUP)
    select: SelectConfig = field(default_factory=SelectConfig, metadata=STAGE_GROUP)
    grpo: GrpoConfig = field(default_factory=GrpoConfig, metadata=STAGE_GROUP)
    train: TrainConfig = field(default_factory=TrainConfig, metadata=STAGE_GROUP)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig, metadata=STAGE_GROUP)
    report: ReportConfig = field(default_factory=ReportConfig, metadata=STAGE_GROUP)
    logger: LoggerConfig = field(default_factory=LoggerConfig, metadata=NOT_IDENTITY)
    hardware: HardwareConfig = field(default_factory=HardwareConfig, metadata=NOT_IDENTITY)
    launcher: LauncherConfig = field(default_factory=LauncherConfig, metadata=NOT_IDENTITY)
    # stage=report and stage=view: the run folders to compare, base first
    runs: list[str] = field(default_factory=list, metadata={**STAGE_GROUP, "path": True})
    seed: int = field(default=0, metadata=STAGE_GROUP)
    # run folders live under it, named by stage and run hash
    out_root: str = field(default="outputs", metadata=NOT_IDENTITY_PATH)
    # set to pin the run folder (default: derived from the run hash)
    run_dir: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)
    summary_path: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)  # also write the summary JSON here
    show: bool = field(default=False, metadata=NOT_IDENTITY)  # print the resolved config and plan, then exit
    # free-form notes kept with the run
    extra: dict[str, Any] = field(default_factory=dict, metadata=NOT_IDENTITY)

    def __post_init__(self) -> None:
        from tbx.config.values import check_values, expand_paths

        expand_paths(self)
        check_values(self)


GROUPS = {
    "stage": StageConfig,
    "tasks": TasksConfig,
    "policy": PolicyConfig,
    "model": ModelConfig,
    "user": UserConfig,
    "judge": JudgeConfig,
    "backend": BackendConfig,
    "faults": FaultsConfig,
    "difficulty": DifficultyConfig,
    "pool": PoolConfig,
    "logger": LoggerConfig,
    "hardware": HardwareConfig,
}


def register_configs() -> None:
    # imported here: the schema itself is plain dataclasses, cheap to import for the code below launch.py
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="tbx_schema", node=Config)
    for group, schema in GROUPS.items():
        store.store(group=group, name=f"{group}_schema", node=schema)

