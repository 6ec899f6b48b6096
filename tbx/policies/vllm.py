"""`model.kind: vllm`: the agent is a model served by vLLM, token ids in, token ids out.

tbx renders the prompt itself (`tbx.policies.prompting`: policy, tools, few-shot demonstrations,
the conversation; the renderer the native trainer and the verl bridge use) and sends its token ids
to vLLM's `/inference/v1/generate`. The server answers with the sampled token ids (the stop token
included), their log-probs and the version of the weights that sampled them. The text is decoded
here and read by the shared parser, so evaluation and training read tool calls the same way, and
the trainer learns from exactly the tokens that were sampled (`VLLMAgent.trace`).

The server is the process's shared one (`tbx.vllm.server.shared_server`: a kept server of the same
flags when `stage=serve_model` left one, tbx/vllm/kept.py, else one this process starts), or the
running vLLM at `model.endpoint.base_url`. Before the first turn the policy makes sure the server
answers with the configured weights, by their label (`<model>@<fingerprint>`): a server that answers
with other weights of the same architecture (the base model after the trained one in a pipeline, a
kept server a training run left at `<run>:step_N`) loads them in place. Hosted providers keep chat-completions
with tools (`model.kind: openai`, tbx.policies.openai_compat).

An endpoint failure, a dead server included, raises `InfraError`; the episode becomes `infra_error`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tbx.config import ModelConfig
from tbx.errors import InfraError
from tbx.llm.client import ChatClient, _RetryableError
from tbx.llm.parsing import CALL_CLOSE, parse_assistant_text
from tbx.messages import AssistantTurn, Message, ToolSchema, Usage
from tbx.policies.base import Agent, EpisodeContext, Policy, PolicySetup
from tbx.policies.prompting import Demonstration, check_tool_format, demonstrations_for, fit_prompt
from tbx.vllm.server import VLLMServer, shared_server
from tbx.vllm.spec import spec_for
from tbx.vllm.weights import serving_folder, weights_fingerprint

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")  # end a turn wherever the vocabulary has them
GENERATE_PATH = "/inference/v1/generate"


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # sampled, the stop token included
    logprobs: tuple[float, ...]  # of each sampled token under the serving weights (raw, before temperature)
    text: str  # decoded without special tokens, cut after the first `</tool_call>`
    prompt_tokens: int
    weight_versions: tuple[str, ...]  # of the weights that sampled the tokens: one, unless a swap fell mid-turn
    finish_reason: str


@dataclass(frozen=True)
class Turn:
    """One turn as the trainer needs it."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    weight_versions: tuple[str, ...]


def folder_version(name: str, directory: str | Path) -> str:
    """A label for the weights in `directory`: the model's name and their fingerprint."""
    return f"{name}@{weights_fingerprint(directory)}"


class TokenClient(ChatClient):
    """`/inference/v1/generate` with the retry, timeout and concurrency rules of every tbx endpoint."""

    def __init__(self, base_url: str, model: ModelConfig, concurrency: int):
        endpoint = dataclasses.replace(model.endpoint, base_url=base_url, api_key_env=None,
                                       concurrency=max(model.endpoint.concurrency, concurrency))
        super().__init__(endpoint, role="model")
        self.url = base_url.rstrip("/").removesuffix("/v1") + GENERATE_PATH

    async def generate(self, token_ids: Sequence[int], sampling: dict[str, Any], served: str) -> dict[str, Any]:
        """The first choice of one request, with the usage and weight versions."""
        return await self._post_with_retries({"token_ids": list(token_ids), "model": served,
                                              "sampling_params": sampling})

    def _read_result(self, response: httpx.Response) -> Any:
        try:
            choice = response.json()["choices"][0]
            tokens = [int(t) for t in choice["token_ids"]]
            logprobs = [float(entry["logprob"]) for entry in (choice.get("logprobs") or {}).get("content") or []]
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise _RetryableError(f"unreadable response body ({error}): {self._snippet(response.text)}",
                                  status=response.status_code) from None
        versions = tuple(dict.fromkeys(span["version"] for span in choice.get("weight_versions") or []))
        return {"token_ids": tokens, "logprobs": logprobs, "versions": versions,
                "finish_reason": choice.get("finish_reason") or ""}


class VLLMPolicy(Policy):
    """A model served by vLLM; agents render their prompts with tbx's renderer."""

    name = "vllm"
    plays_model = True

    def __init__(self, served: Served):
        model_cfg, tokenizer, server = served.model, served.tokenizer, served.server
        self.model_cfg, self.tokenizer, self.server = model_cfg, tokenizer, server
        self.model_name = model_cfg.name
        self.price_input_per_mtok = model_cfg.price_input_per_mtok
        self.price_output_per_mtok = model_cfg.price_output_per_mtok
        self.tool_format = check_tool_format(model_cfg.tool_format)
        self.weights_version = served.version  # what the server answers with now
        self.served_model = server.spec.served_name  # a LoRA adapter's name while the trainer serves one
        self.client = TokenClient(server.base_url, model_cfg, server.spec.max_num_seqs)
        vocab = tokenizer.get_vocab()
        self.stop_ids = sorted({tokenizer.eos_token_id} | {vocab[t] for t in STOP_TOKENS if t in vocab})

    @classmethod
    def from_config(cls, setup: PolicySetup) -> VLLMPolicy:
        return cls(serve(setup.model, seed=setup.seed))

    def agent(self, context: EpisodeContext) -> Agent:
        return VLLMAgent(self, seed=context.seed)

    def engine(self) -> dict[str, Any]:
        return self.server.engine() | {"weights": self.weights_version, "served_model": self.served_model}

    def demonstrations(self, tools: Sequence[ToolSchema]) -> tuple[Demonstration, ...]:
        """Worked examples of the episode's first tools (`model.few_shot`), none otherwise."""
        return demonstrations_for(tools) if self.model_cfg.few_shot else ()

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> tuple[int, ...]:
        """The prompt's token ids, leaving `max_new_tokens` of the context window free."""
        budget = self.model_cfg.context_length - self.model_cfg.max_new_tokens
        return fit_prompt(self.tokenizer, messages, tools, self.demonstrations(tools), budget,
                          tool_format=self.tool_format, template_kwargs=self.model_cfg.chat_template_kwargs)

    def accepts_versions(self, versions: tuple[str, ...]) -> bool:
        """Whether a turn sampled by `versions` came from the weights this policy serves (a trainer that
        plays while it updates also accepts its recent versions)."""
        return versions == (self.weights_version,)

    async def generate(self, prompt_ids: Sequence[int], seed: int) -> Generation:
        room = self.model_cfg.context_length - len(prompt_ids)
        sampling = {"max_tokens": max(1, min(self.model_cfg.max_new_tokens, room)),
                    "temperature": self.model_cfg.temperature, "top_p": self.model_cfg.top_p, "seed": seed,
                    "logprobs": 0, "stop_token_ids": self.stop_ids, "stop": [CALL_CLOSE],
                    "include_stop_str_in_output": True}
        result = await self.client.generate(prompt_ids, sampling, self.served_model)
        if result["versions"] and not self.accepts_versions(result["versions"]):
            raise InfraError(f"the turn was sampled by weights {list(result['versions'])}, not {self.weights_version}: "
                             "another process changed what the vLLM server serves (one run per server at a time)")
        text = self.tokenizer.decode(result["token_ids"], skip_special_tokens=True)
        if CALL_CLOSE in text:
            text = text[:text.index(CALL_CLOSE) + len(CALL_CLOSE)]
        return Generation(tuple(result["token_ids"]), tuple(result["logprobs"]), text, len(prompt_ids),
                          result["versions"], result["finish_reason"])

    async def aclose(self) -> None:
        await self.client.aclose()


class VLLMAgent(Agent):
    """One episode's agent: renders the prompt, samples a turn, parses it; `trace` keeps each turn's
    ids exactly as the model saw and wrote them."""

    def __init__(self, policy: VLLMPolicy, seed: int):
        self.policy, self.seed, self.turns = policy, seed, 0
        self.trace: list[Turn] = []

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        prompt_ids = self.policy.prompt_ids(messages, tools)
        turn_seed = (self.seed * 1_000_003 + self.turns) % 2**63  # a fresh, reproducible seed per turn
        self.turns += 1
        generation = await self.policy.generate(prompt_ids, turn_seed)
        self.trace.append(Turn(prompt_ids, generation.token_ids, generation.logprobs, generation.weight_versions))
        parsed = parse_assistant_text(generation.text)
        usage = Usage(prompt_tokens=generation.prompt_tokens, completion_tokens=len(generation.token_ids))
        return AssistantTurn(content=parsed.content, tool_calls=parsed.tool_calls, usage=usage,
                             malformed=parsed.malformed)


@dataclass(frozen=True)
class Served:
    """A model being served: its config, its tokenizer, the server, and the label of the weights
    answering now."""

    model: ModelConfig
    tokenizer: Any
    server: VLLMServer
    version: str


def serve(model: ModelConfig, *, lora_rank: int = 0, seed: int = 0, directory: Path | None = None,
          tokenizer: Any = None) -> Served:
    """The model's folder served (started, reused or attached) with its own weights answering: what
    `VLLMPolicy` is built from. Tied-embedding models are served from their serving copy
    (tbx/vllm/weights.py)."""
    from tbx.policies.hf_model import load_tokenizer, model_directory, resolve_config_path

    directory = directory or model_directory(model)[0]
    version = folder_version(model.name, directory)
    served = serving_folder(directory, resolve_config_path(model.cache_dir) / "served", version)
    attach = bool(model.endpoint.base_url)
    spec = spec_for(model, served, lora_rank=lora_rank, seed=seed, attach=attach)
    if attach:
        server = VLLMServer.attach(model.endpoint.base_url, spec)
    else:
        kept_dir = resolve_config_path(model.server.kept_dir) if model.server.attach_kept else None
        server = shared_server(spec, ready_timeout_s=model.server.ready_timeout_s, kept_dir=kept_dir)
    server.resume()  # a process killed in the middle of a weight swap may have left it paused
    current = server.weight_version()
    if current == "default" and server.process is not None and server.weights == str(served):
        server.label_weights(version)  # just started with these weights
    elif current != version:
        seconds = server.load_weights(served, version)
        print(f"vLLM at {server.base_url} answered with weights {current}: loaded {version} in place ({seconds:.1f} s)",
              file=sys.stderr, flush=True)
    return Served(model, tokenizer if tokenizer is not None else load_tokenizer(directory), server, version)
