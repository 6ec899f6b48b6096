"""The README's quick starts hold: the example task passes the gate and the oracle, and the reference
recipe's experiments compose into the recipe (docs/training.md) on the hardware the README names."""

from tests.helpers.stage import ROOT, make_cfg, run
from tests.launch import compose_cfg


def test_the_example_task_is_admitted_and_the_oracle_passes_it(tmp_path):
    example = ROOT / "examples" / "task.yaml"
    gate = run(make_cfg(tmp_path, "stage=validate", "tasks=files", f"tasks.path={example}"))
    assert (gate.n_tasks, gate.admitted, gate.rejected) == (1, 1, ())
    played = run(make_cfg(tmp_path, "stage=eval", "tasks=files", f"tasks.path={example}", "policy=oracle"))
    assert played.pass_at_1 == 1.0 and played.episodes == 1


def test_the_reference_recipe_experiments_are_the_recipe():
    probe = compose_cfg("experiment=reference_probe", "model.path=/models/base")
    assert (probe.stage.name, probe.tasks.name, probe.probe.attempts, probe.launcher.shards) == ("probe", "train", 20, 8)
    assert (probe.hardware.gpus_per_node, probe.hardware.gpu_type, probe.model.kind) == (8, "a100", "vllm")
    train = compose_cfg("experiment=reference_train", "model.path=/models/base", "train.pool=pool.json")
    g = train.grpo
    assert (g.trainer, g.group_size, g.groups_per_step, g.steps, g.lr, g.weight_decay, g.loss_agg_mode) == \
        ("verl", 8, 18, 50, 1e-6, 0.0, "token-mean")
    assert (train.hardware.nodes, train.hardware.gpus_per_node, train.hardware.gpu_type, train.pool.finetune) == \
        (3, 8, "h100", "full")
    evaluation = compose_cfg("experiment=reference_eval", "model.path=/models/trained")
    assert (evaluation.stage.name, evaluation.tasks.name, evaluation.eval.attempts) == ("eval", "bench", 20)
    assert evaluation.model.dtype == train.model.dtype == probe.model.dtype == "bfloat16"


def test_show_prints_the_plan_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=eval", "policy=oracle", "tasks=mock",
                          "show=true", f"out_root={tmp_path}/out"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0 and "# plan: stage=eval" in out.stdout, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # no run folder, no Hydra folder, no .hydra/, no log file
