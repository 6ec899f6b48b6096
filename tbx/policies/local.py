"""The embedded policy: a transformers model in this process, batched across episodes.

Decoding a 135M model on CPU is memory-bound, so batching is the lever (~9 tokens/s at batch 1,
~58 at 16 on 2 cores; shared/notes/machine-facts.md). Every agent submits its prompt to one
`BatchScheduler`, which collects the turns pending from all concurrent episodes and decodes them
together in a worker thread, so the event loop keeps running tools and user simulators.

Decoding (`tbx.policies.decoding`) is seeded per request, gives the same greedy output batched
or alone, and reuses the key/value cache of the prompt prefix every turn shares (system message,
tools, demonstrations). The output is read by the shared parser, the same one every other path uses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence

from tbx.config import Config, ModelConfig
from tbx.errors import InfraError
from tbx.messages import AssistantTurn, Message, ToolSchema, Usage
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.policies.decoding import Decoder, Generation, GenerationRequest
from tbx.policies.hf_model import LoadedModel, load_model
from tbx.policies.parsing import parse_assistant_text
from tbx.policies.prompting import (
    Demonstration,
    build_chat,
    check_tool_format,
    demonstrations_for,
    encode_prompt,
    render_prompt,
)


def _prefix_key(request: GenerationRequest) -> tuple[int, ...]:
    return request.prompt_ids[: request.prefix_len]


class BatchScheduler:
    """Collects requests from concurrent coroutines and runs them as batches in one thread.

    While a batch decodes, new requests queue up; the next batch takes up to `batch_size` of
    them. After the first request of an idle period it waits `gather_s` for company. The worker
    starts on first use and restarts when used from another event loop.
    """

    def __init__(self, run_batch: Callable[[list[GenerationRequest], Callable[[], bool]], list[Generation]],
                 batch_size: int, gather_s: float = 0.02):
        self.run_batch, self.batch_size, self.gather_s = run_batch, max(1, batch_size), gather_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tbx-decode")
        self._closing = threading.Event()
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: list[asyncio.Future] = []  # futures of the batch decoding now
        self.batches: list[int] = []  # size of each batch run, for benchmarks and tests
        self._deferred: list[tuple[GenerationRequest, asyncio.Future]] = []  # other prefixes, waiting

    async def submit(self, request: GenerationRequest) -> Generation:
        if self._closing.is_set():
            raise InfraError("the local model's scheduler is closed")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._loop is not loop:
            self._loop, self._queue, self._deferred = loop, asyncio.Queue(), []
            self._worker = loop.create_task(self._serve())
        future: asyncio.Future[Generation] = loop.create_future()
        self._queue.put_nowait((request, future))
        return await future

    async def _gather(self) -> list[tuple[GenerationRequest, asyncio.Future]]:
        """The next batch: requests that share the first one's cached prefix (same domain and
        tools), so the batch reuses one prefix cache instead of encoding every long prompt;
        requests with another prefix wait for a later batch, in arrival order."""
        first = self._deferred.pop(0) if self._deferred else await self._queue.get()
        key = _prefix_key(first[0])
        batch, kept = [first], []
        for item in self._deferred:
            (batch if _prefix_key(item[0]) == key and len(batch) < self.batch_size else kept).append(item)
        self._deferred = kept
        deadline = time.monotonic() + self.gather_s
        while len(batch) < self.batch_size:
            if self._queue.empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(remaining, 0.005))
                continue
            item = self._queue.get_nowait()
            (batch if _prefix_key(item[0]) == key else self._deferred).append(item)
        return [(request, future) for request, future in batch if not future.done()]

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            if not batch:
                continue
            self.batches.append(len(batch))
            self._running = [future for _, future in batch]
            try:
                results = await loop.run_in_executor(self._executor, self.run_batch,
                                                     [request for request, _ in batch], self._closing.is_set)
            except Exception as exc:  # the model failed: every waiting turn gets an infra error
                for _, future in batch:
                    if not future.done():
                        future.set_exception(InfraError(f"local generation failed: {exc!r}"))
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def aclose(self) -> None:
        """Stop: the running batch ends after its current step; every waiting turn gets InfraError."""
        self._closing.set()
        if self._worker is not None and not self._worker.done() and self._loop is asyncio.get_running_loop():
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        waiting = list(self._running)
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait()[1])
        for future in waiting:
            if not future.done():
                future.set_exception(InfraError("the local model's scheduler was closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)


class LocalPolicy(Policy):
    """A transformers model loaded in-process; agents share its batching scheduler."""

    name = "local"

    def __init__(self, loaded: LoadedModel, model_cfg: ModelConfig, decoder: Decoder | None = None):
        """`decoder`: share one (and its prefix cache) between policies over the same model."""
        import torch

        torch.set_num_threads(max(1, model_cfg.threads))
        self.loaded, self.model_cfg = loaded, model_cfg
        self.model_name = model_cfg.name
        self.price_input_per_mtok = model_cfg.price_input_per_mtok
        self.price_output_per_mtok = model_cfg.price_output_per_mtok
        self.tool_format = check_tool_format(model_cfg.tool_format)
        self.decoder = decoder or Decoder(loaded.model, loaded.tokenizer)
        self.scheduler = BatchScheduler(self.decoder.generate_batch, model_cfg.batch_size)

    @classmethod
    def from_config(cls, cfg: Config) -> LocalPolicy:
        """Load `cfg.model` (converting the packaged GGUF once) and build the policy."""
        return cls(load_model(cfg.model), cfg.model)

    def agent(self, context: EpisodeContext) -> Agent:
        return LocalAgent(self, seed=context.seed)

    def demonstrations(self, tools: Sequence[ToolSchema]) -> tuple[Demonstration, ...]:
        """Worked examples of the episode's first tools (`model.few_shot`), none otherwise."""
        return demonstrations_for(tools) if self.model_cfg.few_shot else ()

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> tuple[int, ...]:
        """The prompt's token ids, fitted into the context window.

        When the prompt leaves less than `max_new_tokens` of the window, the oldest turns after
        the opening user message are dropped (an assistant turn with its tool results); if that
        is not enough, the ids are cut from the left.
        """
        budget = max(1, self.model_cfg.context_length - self.model_cfg.max_new_tokens)
        kept = list(messages)
        while True:
            chat = build_chat(kept, tools, self.demonstrations(tools), tool_format=self.tool_format)
            ids = encode_prompt(self.loaded.tokenizer, render_prompt(self.loaded.tokenizer, chat))
            first_user = next((i for i, m in enumerate(kept) if m.role == "user"), len(kept))
            if len(ids) <= budget or len(kept) - first_user <= 2:
                return tuple(ids[-budget:])
            del kept[first_user + 1]
            while first_user + 1 < len(kept) - 1 and kept[first_user + 1].role == "tool":
                del kept[first_user + 1]

    def prefix_length(self, messages: Sequence[Message], tools: Sequence[ToolSchema],
                      prompt_ids: Sequence[int]) -> int:
        """How many leading ids are the fixed part (system message and demonstrations).

        Every turn of every episode with these tools starts with them, so the decoder caches
        their keys and values. 0 when the fixed part does not tokenize as a prefix of the prompt.
        """
        system = list(messages[:1]) if messages and messages[0].role == "system" else []
        fixed = build_chat(system, tools, self.demonstrations(tools), tool_format=self.tool_format)
        tokenizer = self.loaded.tokenizer
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(fixed, tokenize=False, add_generation_prompt=False)
        else:
            text = render_prompt(tokenizer, fixed).removesuffix("<|im_start|>assistant\n")
        ids = encode_prompt(tokenizer, text)
        return len(ids) if tuple(prompt_ids[:len(ids)]) == tuple(ids) else 0

    async def generate(self, prompt_ids: Sequence[int], seed: int, prefix_len: int = 0) -> Generation:
        room = self.model_cfg.context_length - len(prompt_ids)
        request = GenerationRequest(tuple(prompt_ids), max(1, min(self.model_cfg.max_new_tokens, room)), seed,
                                    prefix_len, self.model_cfg.temperature, self.model_cfg.top_p)
        return await self.scheduler.submit(request)

    async def aclose(self) -> None:
        await self.scheduler.aclose()


class LocalAgent(Agent):
    """One episode's agent: renders the prompt, waits for its batch, parses the reply.

    `trace` keeps each turn's (prompt ids, generated ids) exactly as the model saw and wrote
    them, stop token included, so training uses the very tokens of the rollout.
    """

    def __init__(self, policy: LocalPolicy, seed: int):
        self.policy, self.seed, self.turns = policy, seed, 0
        self.trace: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    async def act(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> AssistantTurn:
        prompt_ids = self.policy.prompt_ids(messages, tools)
        prefix_len = self.policy.prefix_length(messages, tools, prompt_ids)
        turn_seed = (self.seed * 1_000_003 + self.turns) % 2**63  # a fresh, reproducible seed per turn
        self.turns += 1
        generation = await self.policy.generate(prompt_ids, turn_seed, prefix_len)
        self.trace.append((tuple(prompt_ids), tuple(generation.token_ids)))
        parsed = parse_assistant_text(generation.text)
        usage = Usage(prompt_tokens=generation.prompt_tokens, completion_tokens=len(generation.token_ids))
        return AssistantTurn(content=parsed.content, tool_calls=parsed.tool_calls, usage=usage,
                             malformed=parsed.malformed)
