"""Every stage, declared once (the stage registry): its run function and the record it returns, the config
groups it uses, what it plays and loads, whether it shards. The run's identity (`tbx/runs/identity.py`), the
config checks (`tbx/config/values.py` STAGE_CHECKS, `tbx/stages/environment.py`), the job plan (`tbx/launch/`)
and dispatch all read a stage's facts from here, so adding a stage is its module in tbx/stages/, one entry
below and its option file `conf/stage/<name>.yaml` (and its value checks, if it has any, in STAGE_CHECKS).
(torchtune keeps one record per recipe the same way, `_recipe_registry.py`.) It lives with the runs, below
the stages' modules, since what a run is made of (its identity) is read from here.

Light to import: a stage's module, and whatever it imports, is imported when the stage runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from tbx.config import values
from tbx.errors import ConfigError
from tbx.runs.results import (
    EvalResult,
    Finished,
    PipelineResult,
    PoolSelection,
    ProbeResult,
    RegradeResult,
    ReportResult,
    ServeModelResult,
    StageResult,
    TrainResult,
    ValidateResult,
    ViewResult,
)

if TYPE_CHECKING:
    from tbx.config import Config

Check = Callable[["Config"], None]
PLAYED = ("user", "judge", "backend", "eval", "faults", "seed")  # where episodes are played and graded
POLICY = ("policy", "model")  # where the configured policy plays them


@dataclass(frozen=True)
class Stage:
    """One stage (`launch.py stage=<name>`)."""

    name: str
    run: str  # "module:function", imported when the stage runs; the function takes the Config
    about: str  # what it does, in a few words (docs/architecture.md's stage table)
    # top-level Config fields whose settings count toward its runs' identity (the groups it uses); a field
    # of tbx/config/ marked STAGE_GROUP counts for the stages that name it here only
    uses: tuple[str, ...] = ()
    plays_episodes: bool = False  # the configured policy plays episodes (its model is checked and counts)
    loads_tasks: bool = False  # it reads the `tasks` group's task set (checked before the run)
    tasks_from_pool: bool = False  # the tasks it plays are the pool manifest's (train.pool), not a task set
    shardable: bool = False  # launcher.shards > 1 splits its tasks over a job array sharing one store
    run_folder: bool = False  # it writes a run folder of its own (`out_root/<run name>`, or `run_dir=`)
    result: type = Finished  # the frozen record `run` returns (tbx/runs/results.py), with its `exit_code`

    def __post_init__(self) -> None:
        if "exit_code" not in {f.name for f in fields(self.result)}:
            raise ValueError(f"stage {self.name}'s result {self.result.__name__} has no exit_code")
        if self.plays_episodes and not {*POLICY, *PLAYED} <= set(self.uses):
            raise ValueError(f"stage {self.name} plays episodes: it uses {POLICY + PLAYED}")
        if self.loads_tasks and "tasks" not in self.uses:
            raise ValueError(f"stage {self.name} loads tasks: it uses the tasks group")

    @property
    def checks(self) -> tuple[Check, ...]:
        """Pure checks of its values, run when the typed config is built (tbx/config/values.py STAGE_CHECKS)."""
        return values.STAGE_CHECKS.get(self.name, ())

    def function(self) -> Callable[[Config], StageResult]:
        module, _, name = self.run.partition(":")
        return getattr(importlib.import_module(module), name)


STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("eval", "tbx.stages.eval:run_eval", "play every task's attempts, grade and store them",
          uses=("tasks", *POLICY, *PLAYED), plays_episodes=True, loads_tasks=True, shardable=True,
          run_folder=True, result=EvalResult),
    Stage("serve", "tbx.stages.serve:run_serve", "serve episodes over MCP to an agent outside tbx",
          uses=("tasks", *PLAYED, "serve"), loads_tasks=True, run_folder=True, result=EvalResult),
    Stage("serve_model", "tbx.stages.serve_model:run_serve_model",
          "start the model's vLLM once and keep it for later commands", uses=("model", "seed"),
          result=ServeModelResult),
    Stage("regrade", "tbx.stages.regrade:run_regrade", "grade a run's stored episodes again",
          uses=("regrade",), result=RegradeResult),
    Stage("validate", "tbx.stages.validate:run_validate", "the admission gate for a task set",
          uses=("tasks", "judge", "backend", "eval", "faults", "seed"), loads_tasks=True, result=ValidateResult),
    Stage("probe", "tbx.stages.probe:run_probe", "measure each task's success rate, adaptively",
          uses=("tasks", *POLICY, *PLAYED, "difficulty", "pool", "probe"), plays_episodes=True,
          loads_tasks=True, shardable=True,
          run_folder=True, result=ProbeResult),
    Stage("select", "tbx.stages.select:run_select", "freeze a probe's kept bands into a pool manifest",
          uses=("difficulty", "pool", "select"), run_folder=True, result=PoolSelection),
    Stage("report", "tbx.stages.report:run_report", "compare stored runs: tables and figures",
          uses=("report", "runs"), run_folder=True, result=ReportResult),
    Stage("view", "tbx.stages.view:run_view", "look at stored runs in the browser", result=ViewResult),
    Stage("train", "tbx.stages.train:run_train", "GRPO on a pool's tasks",
          uses=(*POLICY, *PLAYED, "pool", "grpo", "train"), plays_episodes=True, tasks_from_pool=True,
          run_folder=True, result=TrainResult),
    Stage("pipeline", "tbx.stages.pipeline:run_pipeline", "probe, select, train, evaluate and report",
          uses=("tasks", *POLICY, *PLAYED, "difficulty", "pool", "probe", "grpo", "pipeline"), plays_episodes=True,
          loads_tasks=True, result=PipelineResult),
)}


if not set(values.STAGE_CHECKS) <= set(STAGES):  # the config's table of value checks names stages only
    raise ValueError(f"tbx/config/values.py STAGE_CHECKS names {sorted(set(values.STAGE_CHECKS) - set(STAGES))}, "
                     "not stages")


def stage_named(name: str) -> Stage:
    """The stage called `name`; an unknown name is a ConfigError listing the stages."""
    if name not in STAGES:
        raise ConfigError("conf/stage", "stage.name", f"unknown stage {name!r}", f"use one of {sorted(STAGES)}")
    return STAGES[name]


def stage_of(cfg: Config) -> Stage:
    return stage_named(cfg.stage.name)


def stage_table() -> str:
    """The stages as docs/architecture.md shows them (a Markdown table)."""
    def mark(flag: bool, text: str = "yes") -> str:
        return text if flag else ""

    lines = ["| stage | what it does | groups in its run identity | plays episodes | loads tasks | shards |", "|---" * 6 + "|"]
    for stage in STAGES.values():
        lines.append(f"| `{stage.name}` | {stage.about} | {', '.join(stage.uses) or '(none)'} | "
                     f"{mark(stage.plays_episodes)} | {mark(stage.loads_tasks) or mark(stage.tasks_from_pool, 'its pool')} | "
                     f"{mark(stage.shardable)} |")
    return "\n".join(lines)
