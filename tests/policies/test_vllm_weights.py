"""The folders vLLM is given (tbx/vllm/weights.py), on a tiny tied llama: no server needed."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from tbx.vllm.weights import (
    HEAD_FILE,
    save_for_reload,
    serving_folder,
    ties_embeddings,
    untied_copy,
    weights_fingerprint,
)


@pytest.fixture
def tied(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    folder = tmp_path / "tied"
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_text("{}")
    return model, folder


def test_a_tied_model_is_served_from_an_untied_copy_with_its_head(tied, tmp_path):
    model, folder = tied
    assert ties_embeddings(folder) and "lm_head.weight" not in load_file(str(folder / "model.safetensors"))
    copy = serving_folder(folder, tmp_path / "cache", "tiny@abc")
    assert copy != folder and not ties_embeddings(copy) and (copy / "tokenizer.json").is_file()
    head = load_file(str(copy / HEAD_FILE))["lm_head.weight"]
    assert torch.equal(head, model.get_input_embeddings().weight.detach())  # the same function as the tied model
    assert ties_embeddings(folder)  # the original config is untouched (the copy's config is its own file)
    assert serving_folder(folder, tmp_path / "cache", "tiny@abc") == copy  # made once
    untied = tmp_path / "untied"
    LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(untied)
    assert serving_folder(untied, tmp_path / "cache", "u@1") == untied  # served as it is


def test_the_untied_copy_a_trainer_loads_keeps_the_models_head(tied, tmp_path):
    """verl loads the model itself with transformers: from the serving copy it would get a fresh random
    head (transformers reads only model.safetensors), train it and sync it into vLLM."""
    model, folder = tied
    loaded = LlamaForCausalLM.from_pretrained(untied_copy(folder, tmp_path / "hf", "tiny@abc"))
    assert not loaded.config.tie_word_embeddings
    assert torch.equal(loaded.get_output_embeddings().weight, model.get_input_embeddings().weight.detach())
    ids = torch.tensor([[1, 5, 7, 9]])
    assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6)  # the same function
    assert untied_copy(folder, tmp_path / "hf", "tiny@abc") == tmp_path / "hf" / "tiny-abc"  # made once


def test_a_trained_tied_module_is_written_with_its_head_and_a_sharded_one_indexed(tied, tmp_path):
    model, _ = tied
    with torch.no_grad():
        model.get_input_embeddings().weight.add_(1.0)  # a trained step moves the tied matrix
    save_for_reload(model, tmp_path / "step_1")
    head = load_file(str(tmp_path / "step_1" / HEAD_FILE))["lm_head.weight"]
    assert torch.equal(head, model.get_input_embeddings().weight.detach())
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" not in index["weight_map"]
    copy = serving_folder(sharded, tmp_path / "cache", "sharded@1")
    assert json.loads((copy / "model.safetensors.index.json").read_text())["weight_map"]["lm_head.weight"] == HEAD_FILE


def test_the_fingerprint_sees_a_change_inside_a_file_not_only_at_its_ends(tmp_path):
    """Three 8 MiB tensors: a step that moves only the middle one changes neither the header nor the
    file's first or last MiB, and still changes the fingerprint."""
    tensors = {name: torch.zeros(2 << 20) for name in ("a", "b", "c")}  # 2M float32 = 8 MiB each
    save_file(tensors, str(tmp_path / "model.safetensors"))
    before = weights_fingerprint(tmp_path)
    assert weights_fingerprint(tmp_path) == before  # deterministic
    tensors["b"] = tensors["b"] + 1e-3
    save_file(tensors, str(tmp_path / "model.safetensors"))
    assert weights_fingerprint(tmp_path) != before
