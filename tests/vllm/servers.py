"""Real vLLM servers for tests and benchmarks (its CPU build from .venv-vllm): small KV cache, few sequences."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tbx.config import EndpointConfig, ModelConfig
from tbx.vllm.server import VLLMServer
from tbx.vllm.spec import spec_for


def vllm_server(name: str, directory: Path, log_dir: Path, **spec_changes: Any) -> VLLMServer:
    """A server for `directory`, served as `name` (enter it to start; leaving stops it)."""
    model = ModelConfig(name=name, path=str(directory), endpoint=EndpointConfig(model=name))
    spec = dataclasses.replace(spec_for(model, directory), kv_cache_gib=1.0, max_num_seqs=32, **spec_changes)
    return VLLMServer(spec, log_path=Path(log_dir) / f"vllm-{name}.log", ready_timeout_s=600)


def attached(server, **changes) -> ModelConfig:
    """The model config of `server`'s model, pointed at it (tbx starts nothing)."""
    model = ModelConfig(name=server.spec.served_name, path=server.spec.directory, few_shot=True,
                        endpoint=EndpointConfig(base_url=server.base_url, model=server.spec.served_name))
    return dataclasses.replace(model, **changes)
