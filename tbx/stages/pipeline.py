"""stage=pipeline: the whole recipe in one run, on whatever model and hardware are configured.

probe the training tasks (`tasks`) → select the pool → train (`grpo`) → evaluate the base and the
trained model on `pipeline.eval_tasks` (the benchmark sample) and on held-out instances of the
training families (`tasks` generated with `pipeline.heldout_seed`: none is in the pool) → one
report per evaluation set. Each step is the ordinary stage with its own run folder, so a killed
pipeline resumes: finished probes and evaluations are read back from their stores and training
continues from its last checkpoint. With `model.kind: vllm` every stage uses this process's one
vLLM server, which loads the base or the trained weights in place.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from tbx.config import (
    Config,
    EvalConfig,
    ModelConfig,
    ReportConfig,
    SelectConfig,
    StageConfig,
    TasksConfig,
    TrainConfig,
)
from tbx.errors import EXIT_NO_UPDATE, ConfigError
from tbx.runs.results import PipelineResult
from tbx.traits import traits_of


def _stage(cfg: Config, name: str, **changes: Any) -> Config:
    return dataclasses.replace(cfg, stage=StageConfig(name), **changes)


def evaluation_sets(cfg: Config) -> list[tuple[str, TasksConfig, EvalConfig]]:
    """(label, tasks, eval settings) of each set the base and trained models are evaluated on (pure)."""
    sets = [("benchmark", cfg.pipeline.eval_tasks, dataclasses.replace(cfg.eval, attempts=cfg.pipeline.eval_attempts))]
    seed = cfg.pipeline.heldout_seed
    if seed is not None:
        if seed == cfg.tasks.seed:
            raise ConfigError("conf/config.yaml", "pipeline.heldout_seed", f"is {seed}, the training tasks' own seed",
                              "give another generator seed (held-out instances must not be pool tasks), or null")
        heldout = dataclasses.replace(cfg.tasks, seed=seed, name=f"{cfg.tasks.name}-heldout-s{seed}", pool=None)
        sets.append(("held-out", heldout, dataclasses.replace(cfg.eval, attempts=cfg.pipeline.heldout_attempts)))
    return sets


def _evaluate(cfg: Config, model: ModelConfig) -> dict[str, str]:
    from tbx.stages.eval import run_eval

    policy = dataclasses.replace(cfg.policy, name=model.name)  # its run folder and header name it
    return {label: run_eval(_stage(cfg, "eval", tasks=tasks, eval=settings, model=model, policy=policy)).run_dir
            for label, tasks, settings in evaluation_sets(cfg)}


class _Clock:
    """Seconds per step of the pipeline, for its last line."""

    def __init__(self) -> None:
        self.started, self.seconds = time.perf_counter(), {}

    def __call__(self, name: str, run: Any, *args: Any) -> Any:
        started = time.perf_counter()
        result = run(*args)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
        return result

    def line(self) -> str:
        parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.seconds.items())
        return f"{time.perf_counter() - self.started:.0f} s ({parts})"


def run_pipeline(cfg: Config) -> PipelineResult:
    from tbx.stages.probe import run_probe
    from tbx.stages.report import run_report
    from tbx.stages.select import run_select
    from tbx.stages.train import run_train

    if traits_of(cfg.policy._target_, "policy").is_reference:
        raise ConfigError("conf/policy", "policy", f"is {cfg.policy.name}: the pipeline trains a model",
                          "use policy=model (the default)")
    evaluation_sets(cfg)  # a bad held-out seed fails before anything runs
    if cfg.logger.group is None:  # every run of the pipeline, its reports too, in one W&B group
        from tbx.runs.identity import run_identity

        cfg = dataclasses.replace(cfg, logger=dataclasses.replace(cfg.logger, group=f"pipeline-{run_identity(cfg)}"))
    clock = _Clock()
    probe = clock("probe", run_probe, _stage(cfg, "probe"))
    select = clock("select", run_select, _stage(cfg, "select", select=SelectConfig(probe_run=probe.run_dir)))
    runs = {label: [run_dir] for label, run_dir in clock("evaluate", _evaluate, cfg, cfg.model).items()}
    names, trained = [cfg.model.name], None
    if select.kept == 0:
        print("the pool is empty (no task in the kept bands for this model): nothing to train")
    else:
        trained = clock("train", run_train, _stage(cfg, "train", train=TrainConfig(pool=select.manifest)))
        if trained.final_model is None:  # no step updated the model: there is no trained model to evaluate
            print("no update ran in training: the base model alone is evaluated and reported")
        else:
            tuned = dataclasses.replace(cfg.model, path=trained.final_model, name=f"{cfg.model.name}-grpo")
            for label, run_dir in clock("evaluate", _evaluate, cfg, tuned).items():
                runs[label].append(run_dir)
            names.append(tuned.name)
    reports = {label: clock("report", run_report, _stage(cfg, "report", runs=dirs, report=ReportConfig(
        names=names, allow_incomplete=True))).markdown for label, dirs in runs.items()}
    steps = {"probe": probe.run_dir, "select": select.manifest} | ({"train": trained.run_dir} if trained else {})
    print("pipeline done: " + ", ".join(f"{k} -> {v}" for k, v in (steps | {"eval": runs, "report": reports}).items()))
    print(f"pipeline took {clock.line()}")
    return PipelineResult(probe=probe.run_dir, select=select.manifest, train=trained.run_dir if trained else None,
                          eval={label: tuple(dirs) for label, dirs in runs.items()}, report=reports,
                          exit_code=EXIT_NO_UPDATE if trained is not None and trained.final_model is None else 0)
