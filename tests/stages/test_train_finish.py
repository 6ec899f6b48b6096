"""The end of a native training run (tbx/stages/train.py finish_training): a run in which no step updated
the model (every group zero-variance) says so, saves no model and exits EXIT_NO_UPDATE, so the base weights
are never published or evaluated as a trained model; a run with an update publishes its model."""

import json
from pathlib import Path

from tbx.errors import EXIT_NO_UPDATE
from tbx.stages.train import finish_training


class SavingPolicy:
    """The trained policy's end-of-run surface (the served model is the GPU seam): writes a weights file."""

    weights_version = 2

    def __init__(self):
        self.saved = []

    def save_final(self, folder: Path) -> Path:
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        self.saved.append(folder)
        return folder

    def engine(self) -> dict:
        return {"name": "vllm"}


STEP = {"train/step": 1, "train/groups": 2, "train/samples": 0, "train/sampler/zero_variance_rate": 1.0}


def test_no_update_saves_no_model_and_exits_non_zero(tmp_path, capsys):
    policy = SavingPolicy()
    summary = finish_training(tmp_path, policy, "pool", 2, 4, [STEP, STEP | {"train/step": 2}])
    assert summary.final_model is None and summary.updates == 0 and summary.exit_code == EXIT_NO_UPDATE
    assert policy.saved == [] and not (tmp_path / "final_model").exists()
    written = json.loads((tmp_path / "train.json").read_text())
    assert written["final_model"] is None and written["exit_code"] == EXIT_NO_UPDATE  # as train.json has had it
    out = capsys.readouterr()
    assert "no update ran" in out.err and "trained" not in out.out


def test_a_run_with_an_update_publishes_its_model(tmp_path, capsys):
    policy = SavingPolicy()
    history = [STEP, STEP | {"train/step": 2, "train/samples": 8, "train/loss": 0.1}]
    summary = finish_training(tmp_path, policy, "pool", 2, 4, history)
    assert summary.updates == 1 and summary.exit_code == 0
    assert "exit_code" not in json.loads((tmp_path / "train.json").read_text())
    assert (Path(summary.final_model) / "model.safetensors").read_bytes() == b"weights"
    assert "trained 2 steps (1 with a model update)" in capsys.readouterr().out
