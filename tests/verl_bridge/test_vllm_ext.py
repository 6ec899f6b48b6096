"""The worker extension of verl's LoRA sync on vLLM 0.32 (marker `verl`: .venv-vllm has both)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")
pytest.importorskip("vllm", reason="vLLM is not installed: scripts/test.sh runs these in .venv-vllm")

pytestmark = pytest.mark.verl


def test_verls_lora_loader_finds_the_mapper_method_it_calls():
    """verl 0.9.1's `_load_adapter` calls `get_unstacked_mapper()`, renamed `get_rename_mapper()` in vLLM
    0.29: with the extension imported, the old name gives the new method's mapper (stacked maps dropped,
    renames kept)."""
    from vllm.model_executor.models.utils import WeightsMapper

    import tbx.verl_bridge.vllm_ext as ext

    mapper = WeightsMapper(orig_to_new_prefix={"model.": "language_model."},
                           orig_to_new_stacked={".q_proj.": (".qkv_proj.", "q")})
    assert hasattr(WeightsMapper, "get_unstacked_mapper") and ext.restore_unstacked_mapper() is False  # idempotent
    unstacked = mapper.get_unstacked_mapper()
    assert unstacked == mapper.get_rename_mapper()
    assert unstacked.apply_list(["model.layers.0.self_attn.q_proj.weight"]) == [
        "language_model.layers.0.self_attn.q_proj.weight"]  # q_proj survives, not rewritten to qkv_proj
