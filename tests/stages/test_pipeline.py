"""stage=pipeline composes the ordinary stages; here each stage is a recorder (the stages
themselves are tested on their own), so what the pipeline hands each one can be read."""

import tbx.stages.eval
import tbx.stages.probe
import tbx.stages.report
import tbx.stages.select
import tbx.stages.train
from tbx.runs import run_name
from tbx.stages.pipeline import run_pipeline
from tests.launch import compose_cfg


def test_the_trained_model_is_evaluated_under_its_own_name(tmp_path, monkeypatch):
    seen = []

    def record(result):
        def stage(cfg):
            seen.append(cfg)
            return result(cfg)
        return stage

    monkeypatch.setattr(tbx.stages.probe, "run_probe", record(lambda cfg: {"run_dir": "probe"}))
    monkeypatch.setattr(tbx.stages.select, "run_select", record(lambda cfg: {"manifest": "pool.json", "kept": 3}))
    monkeypatch.setattr(tbx.stages.train, "run_train", record(lambda cfg: {"run_dir": "train", "final_model": "m"}))
    monkeypatch.setattr(tbx.stages.eval, "run_eval", record(lambda cfg: {"run_dir": run_name(cfg)}))
    monkeypatch.setattr(tbx.stages.report, "run_report", record(lambda cfg: {"markdown": "report.md"}))
    cfg = compose_cfg("experiment=embedded_pipeline", f"out_root={tmp_path}")
    steps = run_pipeline(cfg)
    before, after = (c for c in seen if c.stage.name == "eval")
    assert after.model.path == "m" and after.model.name == after.policy.name == f"{cfg.model.name}-grpo"
    assert before.policy.name == cfg.model.name
    assert steps["eval"][1].startswith(f"eval-{cfg.pipeline.eval_tasks.name}-{cfg.model.name}-grpo-")
    report = next(c for c in seen if c.stage.name == "report")
    assert list(report.report.names) == [cfg.model.name, f"{cfg.model.name}-grpo"]
