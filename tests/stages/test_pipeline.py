"""stage=pipeline composes the ordinary stages; here each stage is a recorder (the stages
themselves are tested on their own), so what the pipeline hands each one can be read."""

import dataclasses

import pytest

import tbx.stages.eval
import tbx.stages.probe
import tbx.stages.report
import tbx.stages.select
import tbx.stages.train
from tbx.errors import ConfigError
from tbx.records import AttemptTally
from tbx.runs.identity import run_name
from tbx.runs.results import EvalResult, PoolSelection, ProbeResult, ReportResult, TrainResult
from tbx.stages.pipeline import evaluation_sets, run_pipeline
from tbx.stats.metrics import outcome_summary
from tests.launch import compose_cfg


def probed(cfg) -> ProbeResult:
    return ProbeResult(run_dir="probe", n_tasks=3, rounds=1, episodes=0, error_tries=0, episodes_share_of_fixed_n=0.0,
                       bands={}, cost_usd=0.0, tasks={})


def selected(cfg) -> PoolSelection:
    return PoolSelection(run_dir="select", manifest="pool.json", hash="h", plot="bands.png", kept=3, n_tasks=3)


def trained(final_model: str | None, exit_code: int = 0):  # a stage function
    return lambda cfg: TrainResult(run_dir="train", pool_hash="h", steps=1, final_model=final_model,
                                   exit_code=exit_code)


def evaluated(cfg) -> EvalResult:
    """The run folder's name is the run's: what the pipeline passes on to the report."""
    return EvalResult.of(outcome_summary([]), pass_at_k=None, observed_all=None, incomplete_tasks=(), k=1,
                         run_dir=run_name(cfg), policy=cfg.policy.name, tasks=cfg.tasks.name, attempts=1,
                         error_tries=0, cost_usd=0.0, tally=AttemptTally(0, 0, 0, 0, 0, 0))


def reported(cfg) -> ReportResult:
    return ReportResult(run_dir="report", markdown="report.md", figures=(), tables=())


def test_the_trained_model_is_evaluated_under_its_own_name(tmp_path, monkeypatch):
    seen = []

    def record(result):
        def stage(cfg):
            seen.append(cfg)
            return result(cfg)
        return stage

    monkeypatch.setattr(tbx.stages.probe, "run_probe", record(probed))
    monkeypatch.setattr(tbx.stages.select, "run_select", record(selected))
    monkeypatch.setattr(tbx.stages.train, "run_train", record(trained("m")))
    monkeypatch.setattr(tbx.stages.eval, "run_eval", record(evaluated))
    monkeypatch.setattr(tbx.stages.report, "run_report", record(reported))
    cfg = compose_cfg("experiment=embedded_pipeline", f"out_root={tmp_path}")
    steps = run_pipeline(cfg)
    evals = [c for c in seen if c.stage.name == "eval"]
    before, heldout_before, after, heldout_after = evals
    assert after.model.path == "m" and after.model.name == after.policy.name == f"{cfg.model.name}-grpo"
    assert before.policy.name == cfg.model.name and heldout_after.model.path == "m"
    assert steps.eval["benchmark"][1].startswith(f"eval-{cfg.pipeline.eval_tasks.name}-{cfg.model.name}-grpo-")
    # held-out: the training families generated with another seed, never the pool's
    for run in (heldout_before, heldout_after):
        assert run.tasks.seed == cfg.pipeline.heldout_seed != cfg.tasks.seed
        assert (run.tasks.domains, run.tasks.families) == (cfg.tasks.domains, cfg.tasks.families)
        assert run.eval.attempts == cfg.pipeline.heldout_attempts and run.tasks.pool is None
    reports = [c for c in seen if c.stage.name == "report"]
    assert [tuple(r.runs) for r in reports] == [steps.eval["benchmark"], steps.eval["held-out"]]
    assert (steps.probe, steps.select, steps.train, steps.exit_code) == ("probe", "pool.json", "train", 0)
    assert all(list(r.report.names) == [cfg.model.name, f"{cfg.model.name}-grpo"] for r in reports)
    # one W&B group for every run of the pipeline, the reports' too
    groups = {c.logger.group for c in seen}
    assert len(groups) == 1 and groups.pop().startswith("pipeline-")


def test_a_training_run_without_an_update_is_not_evaluated_as_trained(tmp_path, monkeypatch):
    """stage=train saved no model (no step updated it): only the base model is evaluated, the pipeline exits 4."""
    from tbx.errors import EXIT_NO_UPDATE

    played = []
    monkeypatch.setattr(tbx.stages.probe, "run_probe", probed)
    monkeypatch.setattr(tbx.stages.select, "run_select", selected)
    monkeypatch.setattr(tbx.stages.train, "run_train", trained(None, EXIT_NO_UPDATE))
    monkeypatch.setattr(tbx.stages.eval, "run_eval", lambda cfg: played.append(cfg) or evaluated(cfg))
    monkeypatch.setattr(tbx.stages.report, "run_report", reported)
    steps = run_pipeline(compose_cfg("experiment=embedded_pipeline", f"out_root={tmp_path}"))
    assert [c.model.path for c in played] == [played[0].model.path] * 2  # the base model, on both sets
    assert all(len(dirs) == 1 for dirs in steps.eval.values()) and steps.exit_code == EXIT_NO_UPDATE


def test_the_held_out_seed_must_differ_from_the_training_seed(tmp_path):
    cfg = compose_cfg("experiment=embedded_pipeline", f"out_root={tmp_path}", "pipeline.heldout_seed=0")
    with pytest.raises(ConfigError, match="pipeline.heldout_seed"):
        run_pipeline(cfg)
    assert [label for label, _, _ in evaluation_sets(dataclasses.replace(
        cfg, pipeline=dataclasses.replace(cfg.pipeline, heldout_seed=None)))] == ["benchmark"]
