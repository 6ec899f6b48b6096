"""verifiers' own evaluation command against the embedded model served by tbx's vLLM (examples/verifiers_vllm.py):
vLLM's CPU build from .venv-vllm serves SmolLM2-135M, `vf-eval tbx-tasks` plays tbx's travel sample (one task
of each of its 9 families, at most 3 turns) against its OpenAI-compatible endpoint, and every reward verifiers
recorded is the verdict tbx stored for that episode."""

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers", reason="verifiers is not installed here: scripts/setup_envs.sh builds .venv-envs")
ROOT = Path(__file__).resolve().parents[2]
VF_EVAL = Path(sys.executable).parent / "vf-eval"
pytestmark = [pytest.mark.envs, pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not VF_EVAL.exists() or shutil.which("uv", path=str(VF_EVAL.parent)) is None,
                                 reason="vf-eval or uv missing beside this python: scripts/setup_envs.sh"),
              pytest.mark.skipif(not (ROOT / ".venv-vllm" / "bin" / "python").exists(),
                                 reason="no .venv-vllm in this checkout: scripts/setup_vllm.sh")]


def test_vf_eval_scores_the_served_embedded_model_with_tbx_verdicts(tmp_path):
    from examples.verifiers_vllm import DEFAULT, evaluate
    from tests.envs import overrides

    summary = evaluate([*overrides(tmp_path), *DEFAULT], [])
    print(json.dumps(summary))  # the figures docs/environments.md quotes
    assert summary["returncode"] == 0
    assert summary["engine"]["name"] == "vllm" and summary["model"] == "smollm2_135m"
    episodes = summary["episodes"]
    assert len(episodes) == 9 and summary["stored"] == 9
    assert all(e["output_tokens"] for e in episodes)  # the served model answered every episode
    for episode in episodes:  # verifiers' reward is tbx's stored verdict; a harness error would fail the episode
        assert episode["ok"] and episode["reward"] in (0.0, 1.0)
        assert episode["reward"] == episode["tbx_reward"], episode
