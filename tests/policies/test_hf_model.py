"""Finding, converting and loading the model (tbx/policies/hf_model.py): the GGUF conversion cache
(a fake transformers at the seam) and, marked slow, the packaged SmolLM2 loaded offline into the
real cache (~/.cache/tbx/models, or $TBX_CACHE/models; only the first run on a machine converts)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tbx.config import ModelConfig
from tbx.policies import hf_model


class FakePretrained:
    def __init__(self, fail: bool):
        self.fail = fail
        self.config = SimpleNamespace(quantization_config=object())
        self.generation_config = SimpleNamespace()
        self.hf_quantizer = object()

    def save_pretrained(self, folder, **_):
        assert self.hf_quantizer is None and not hasattr(self.config, "quantization_config")
        (Path(folder) / "model.safetensors").write_text("half")
        if self.fail:
            raise KeyboardInterrupt  # killed mid-write
        (Path(folder) / "config.json").write_text("{}")


def test_gguf_conversion_is_atomic(tmp_path, monkeypatch):
    gguf = tmp_path / "pkg" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"gguf")
    fail = {"value": True}
    tokenizer = SimpleNamespace(get_vocab=lambda: {"<|im_end|>": 2}, eos_token_id=2, pad_token_id=2,
                                save_pretrained=lambda folder: (Path(folder) / "tokenizer.json").write_text("{}"))
    fake = SimpleNamespace(
        AutoTokenizer=SimpleNamespace(from_pretrained=lambda *a, **k: tokenizer),
        AutoModelForCausalLM=SimpleNamespace(from_pretrained=lambda *a, **k: FakePretrained(fail["value"])))
    monkeypatch.setattr(hf_model, "_offline_transformers", lambda: fake)
    target = tmp_path / "cache" / "m"
    with pytest.raises(KeyboardInterrupt):
        hf_model.convert_gguf(gguf, target)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no half-written cache
    fail["value"] = False
    hf_model.convert_gguf(gguf, target)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    hf_model.convert_gguf(gguf, target)  # a second converter loses the rename and keeps the first copy
    assert [p.name for p in target.parent.iterdir()] == ["m"]


def test_unresolved_cache_dir_interpolation_is_resolved(monkeypatch):
    monkeypatch.setenv("TBX_CACHE", "/somewhere/tbx")
    assert hf_model.resolve_config_path(ModelConfig().cache_dir) == Path("/somewhere/tbx/models")


def test_missing_package_names_the_fix():
    with pytest.raises(Exception, match="model.package.*pip install"):
        hf_model.find_package_file("no_such_package_tbx", "x.gguf")


@pytest.mark.slow
def test_packaged_model_loads_offline_into_the_cache():
    loaded = hf_model.load_model(ModelConfig())
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert loaded.directory.parent == hf_model.resolve_config_path(ModelConfig().cache_dir)
    assert (loaded.directory / "model.safetensors").is_file()
    assert loaded.tokenizer.eos_token == loaded.tokenizer.pad_token == "<|im_end|>"
    assert not hasattr(loaded.model.config, "quantization_config")
    print(f"convert {loaded.convert_seconds:.1f}s (converted={loaded.converted}), load {loaded.load_seconds:.1f}s")
    again = hf_model.load_model(ModelConfig())
    assert not again.converted and again.directory == loaded.directory
