"""Stages: orchestration (I/O, progress, concurrency) around the pure core. One function each."""

STAGES = {
    "eval": "tbx.stages.eval:run_eval",
    "serve": "tbx.stages.serve:run_serve",
    "serve_model": "tbx.stages.serve_model:run_serve_model",
    "regrade": "tbx.stages.regrade:run_regrade",
    "validate": "tbx.stages.validate:run_validate",
    "probe": "tbx.stages.probe:run_probe",
    "select": "tbx.stages.select:run_select",
    "report": "tbx.stages.report:run_report",
    "view": "tbx.stages.view:run_view",
    "train": "tbx.stages.train:run_train",
    "pipeline": "tbx.stages.pipeline:run_pipeline",
}
