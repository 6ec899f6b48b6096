"""The weight folders vLLM is given: what it serves, and what the trainer hands it after each step.

Why this exists: vLLM 0.32 cannot reload the output layer of a model with tied input/output
embeddings in place on CPU. Its CPU build prepacks every linear layer's weight for oneDNN, the
tied `lm_head` included; `reload_weights` loads `embed_tokens` (the one tensor the checkpoint holds
for both), finds no weight for `lm_head` ("ParallelLMHead: Failed to load weights" in its log) and
puts the old packed copy back, so the served model stops following training (the measured drift is
in docs/models.md, "Tied embeddings").

So tbx serves tied models from a *serving copy* whose config says `tie_word_embeddings: false` and
which holds `lm_head.weight` (equal to the embeddings) in a file of its own; the trainer writes that
file beside each step's weights. The served model computes exactly what the tied one does, and both
matrices reload. Untied models are served from their own folder, unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

HEAD_FILE = "lm_head.safetensors"
INDEX = "model.safetensors.index.json"


SAMPLES, SAMPLE_BYTES = 64, 64 << 10  # per weight file: 64 stretches of 64 KiB, spread over the file


def weights_fingerprint(directory: str | Path) -> str:
    """A fingerprint of the weights in `directory`: each weight file's name, size, its first MiB (the
    safetensors header: every tensor's name, dtype and shape) and 64 stretches of 64 KiB spread evenly
    over it. About 5 MiB read per file whatever its size (a 70B model in seconds), and different for
    any trained copy: an update moves every tensor it touches, and the stretches land in every tensor
    larger than the file's 64th part."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.safetensors")) + sorted(Path(directory).glob("*.bin")):
        size = path.stat().st_size
        digest.update(f"{path.name}|{size}|".encode())
        with open(path, "rb") as handle:
            digest.update(handle.read(1 << 20))
            for index in range(SAMPLES):
                handle.seek(size * index // SAMPLES)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:12]


def ties_embeddings(directory: Path) -> bool:
    return config_ties(json.loads((directory / "config.json").read_text()))


def config_ties(config: dict[str, Any]) -> bool:
    """Whether a model config ties its output layer to the input embeddings (at the top level, or in
    the text model's config of a multimodal one)."""
    text = config.get("text_config") or {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def write_head(folder: Path, head: Any) -> None:
    """`lm_head.weight` into its own safetensors file of `folder`, listed in the shard index if any,
    and the config marked untied."""
    from safetensors.torch import save_file

    save_file({"lm_head.weight": head.detach().contiguous().clone()}, str(folder / HEAD_FILE))
    index = folder / INDEX
    if index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"]["lm_head.weight"] = HEAD_FILE
        index.write_text(json.dumps(data, indent=2))
    mark_untied(folder)


def mark_untied(folder: Path) -> None:
    """`folder`'s config says its output layer is a tensor of its own (at the top level and in a
    multimodal model's text config)."""
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    if isinstance(config.get("text_config"), dict):
        config["text_config"]["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def _embeddings(directory: Path) -> Any:
    """The input embedding matrix a tied checkpoint holds (named `*embed_tokens.weight`, or `*wte.weight`)."""
    from safetensors import safe_open

    index = directory / INDEX
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else \
        [p.name for p in sorted(directory.glob("*.safetensors"))]
    for name in files:
        with safe_open(str(directory / name), "pt") as handle:
            found = [k for k in handle.keys() if k.endswith(("embed_tokens.weight", "wte.weight"))]
            if found:
                return handle.get_tensor(found[0])
    raise ValueError(f"{directory}: a tied model without an input embedding tensor (*embed_tokens.weight, *wte.weight)")


def serving_folder(directory: Path, cache: Path, version: str) -> Path:
    """The folder vLLM serves for the model in `directory`: itself when its embeddings are untied,
    else its serving copy under `cache` (made once per weights version; files hard-linked, copied when
    the cache is on another file system)."""
    if not ties_embeddings(directory):
        return directory
    target = cache / version.replace("/", "_").replace("@", "-")
    if (target / HEAD_FILE).is_file():
        return target
    staging = cache / f".{target.name}.{os.getpid()}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for source in directory.iterdir():
        if source.is_file():
            try:
                os.link(source, staging / source.name)
            except OSError:
                shutil.copy2(source, staging / source.name)
    (staging / "config.json").unlink()
    shutil.copy2(directory / "config.json", staging / "config.json")  # a copy: write_head edits it
    write_head(staging, _embeddings(directory))
    try:
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process made it first
    return target


def untied_copy(directory: Path, cache: Path, version: str) -> Path:
    """A Hugging Face folder of the model in `directory` with its output layer as a tensor of its own,
    for a trainer that loads the model itself and syncs every tensor into vLLM (verl on CPU): one
    `model.safetensors` holding `lm_head.weight` beside the rest (a serving copy's separate head file is
    read by vLLM but not by transformers, which would give the model a fresh random head). Made once
    per weights version under `cache`; `directory` itself when its embeddings are untied."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    if not ties_embeddings(directory):
        return directory
    target = cache / version.replace("/", "_").replace("@", "-")
    if (target / "model.safetensors").is_file():
        return target
    staging = cache / f".{target.name}.{os.getpid()}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tensors: dict[str, Any] = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            tensors.update({key: handle.get_tensor(key) for key in handle.keys()})
    tensors["lm_head.weight"] = _embeddings(directory).clone()
    for source in directory.iterdir():
        if source.is_file() and source.suffix != ".safetensors" and source.name != INDEX:
            shutil.copy2(source, staging / source.name)
    save_file(tensors, str(staging / "model.safetensors"))
    mark_untied(staging)
    try:
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process made it first
    return target


def save_for_reload(model: Any, folder: Path) -> None:
    """A trained module's weights as vLLM reloads them: its own save, plus the output layer as a
    tensor of its own when the module ties it to the embeddings."""
    model.save_pretrained(folder, safe_serialization=True)
    if ties_embeddings(folder):
        write_head(folder, model.get_output_embeddings().weight)
