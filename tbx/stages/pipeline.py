"""stage=pipeline: the whole recipe in one run, on whatever model and hardware are configured.

probe the training tasks (`tasks`) → select the pool → train (`grpo`) → evaluate the base and the
trained model on `pipeline.eval_tasks` → report. Each step is the ordinary stage with its own run
folder, so a killed pipeline resumes: finished probes and evaluations are read back from their
stores and training continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tbx.config import Config, ReportConfig, SelectConfig, StageConfig, TrainConfig
from tbx.errors import ConfigError


def _stage(cfg: Config, name: str, **changes: Any) -> Config:
    return dataclasses.replace(cfg, stage=StageConfig(name), **changes)


def run_pipeline(cfg: Config) -> dict[str, Any]:
    from tbx.stages.eval import run_eval
    from tbx.stages.probe import run_probe
    from tbx.stages.report import run_report
    from tbx.stages.select import run_select
    from tbx.stages.train import run_train

    if "reference" in cfg.policy._target_:
        raise ConfigError("conf/policy", "policy", f"is {cfg.policy.name}: the pipeline trains a model",
                          "use policy=model (the default)")
    probe = run_probe(_stage(cfg, "probe"))
    select = run_select(_stage(cfg, "select", select=SelectConfig(probe_run=probe["run_dir"])))
    steps = {"probe": probe["run_dir"], "select": select["manifest"]}
    evaluation = dataclasses.replace(cfg.eval, attempts=cfg.pipeline.eval_attempts)
    base = run_eval(_stage(cfg, "eval", tasks=cfg.pipeline.eval_tasks, eval=evaluation))
    runs, names = [base["run_dir"]], [cfg.model.name]
    if select["kept"] == 0:
        print("the pool is empty (no task in the kept bands for this model): nothing to train")
    else:
        trained = run_train(_stage(cfg, "train", train=TrainConfig(pool=select["manifest"])))
        tuned = dataclasses.replace(cfg.model, path=trained["final_model"], name=f"{cfg.model.name}-grpo")
        after = run_eval(_stage(cfg, "eval", tasks=cfg.pipeline.eval_tasks, eval=evaluation, model=tuned,
                                policy=dataclasses.replace(cfg.policy, name=tuned.name)))  # its run folder and header name it
        runs.append(after["run_dir"])
        names.append(tuned.name)
        steps["train"] = trained["run_dir"]
    report = run_report(_stage(cfg, "report", runs=runs, report=ReportConfig(names=names, allow_incomplete=True)))
    steps |= {"eval": runs, "report": report["markdown"]}
    print("pipeline done: " + ", ".join(f"{k} -> {v}" for k, v in steps.items()))
    return steps
