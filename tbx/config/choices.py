"""The enumerated settings of the config schema, and `plain`, which writes a config back as YAML/JSON data.

Enumerations: OmegaConf refuses any other value at compose time, naming the key and the choices. Members are
named as they are spelled in YAML and on the command line (OmegaConf looks a value up by member name), and
they are strings, so `cfg.model.kind == "vllm"` holds and JSON writes the spelling.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any


class ModelKind(StrEnum):
    vllm = "vllm"  # tbx starts vLLM (or uses model.endpoint) and sends token ids from its own prompt renderer
    openai = "openai"  # chat-completions with tools (hosted providers)


class ToolFormat(StrEnum):
    json = "json"  # hermes schema lines
    compact = "compact"  # one signature line per tool


class BackendKind(StrEnum):
    sqlite = "sqlite"  # embedded, a file per episode
    postgres = "postgres"  # a database per episode


class LoggerKind(StrEnum):
    wandb = "wandb"
    none = "none"


class LoggerMode(StrEnum):
    offline = "offline"  # sync later with `wandb sync`
    online = "online"
    disabled = "disabled"


class Trainer(StrEnum):
    native = "native"  # transformers in-process
    verl = "verl"  # Ray + vLLM on clusters


class Finetune(StrEnum):
    full = "full"
    lora = "lora"


# How the token losses of a batch become one number (tbx/rl/grpo.py `aggregate`, verl's `agg_loss`). The names
# hold hyphens, which a class body cannot spell, hence the functional form (members are still looked up by name).
LossAggMode = StrEnum("LossAggMode", [(mode, mode) for mode in
                                      ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum")])


class StoppingRule(StrEnum):
    predictive = "predictive"  # posterior predictive flip probability
    band_mass = "band_mass"  # naive: the mass of the leading band


class Executor(StrEnum):
    debug = "debug"  # in this process
    local = "local"  # a subprocess per job
    slurm = "slurm"


class RayAuthMode(StrEnum):
    token = "token"  # a fresh random token per job
    disabled = "disabled"


class Transport(StrEnum):
    http = "http"  # streamable HTTP, a session per episode
    stdio = "stdio"  # one session over stdin/stdout


def plain(value: Any) -> Any:
    """A config (or any part of it) as plain YAML/JSON data: dataclasses as dicts, enumerations as their values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value.value if isinstance(value, StrEnum) else value
