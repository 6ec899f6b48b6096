"""The embedded policy: a transformers model in this process, batched across episodes.

Decoding a 135M model on CPU is memory-bound, so batching is the lever (~13 tokens/s at batch 1,
~75 at 16 on 2 cores behind a 1,100-token prompt prefix). Every agent submits its prompt to one
`BatchScheduler`, which decodes the turns of all concurrent episodes together in a worker thread
(continuous batching: finished turns go back at once, new turns join between steps), so the
event loop keeps running tools and user simulators.

Decoding (`tbx.policies.decoding`) is seeded per request, gives the same greedy output batched
or alone, and reuses the key/value cache of each domain's prompt prefix (system message, tools,
demonstrations), which rows of different domains read side by side. The output is read by the shared parser, the same one every other path uses.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence

from tbx.config import Config, ModelConfig
from tbx.errors import InfraError
from tbx.messages import AssistantTurn, Message, ToolSchema, Usage
from tbx.policies.base import Agent, EpisodeContext, Policy
from tbx.policies.decoding import Decoder, Generation, GenerationRequest
from tbx.policies.hf_model import LoadedModel, load_model, product_plans
from tbx.policies.parsing import parse_assistant_text
from tbx.policies.prompting import (
    Demonstration,
    build_chat,
    check_tool_format,
    demonstrations_for,
    encode_prompt,
    render_prompt,
)

Item = tuple[asyncio.Future, GenerationRequest]
# run(items, deliver, more, should_stop): decode `items`, `deliver(future, generation)` as each
# finishes, take further items from `more(rows decoding now)` between steps (Decoder.decode).
RunStream = Callable[[list[Item], Callable[[asyncio.Future, Generation], None], Callable[[int], list[Item]],
                      Callable[[], bool]], None]


def _settle(future: asyncio.Future, generation: Generation) -> None:
    if not future.done():
        future.set_result(generation)


class BatchScheduler:
    """Collects requests from concurrent coroutines and decodes them together in one thread.

    Continuous batching: a stream starts with up to `batch_size` waiting requests (after the first
    request of an idle period it waits `gather_s` for company); each finished turn is delivered at
    once, so its episode goes on to its tools while the others decode; requests that arrive while
    the stream runs join it between steps, up to `batch_size` rows. The worker starts on first use
    and restarts when used from another event loop.
    """

    def __init__(self, run: RunStream, batch_size: int, gather_s: float = 0.02):
        self.run, self.batch_size, self.gather_s = run, max(1, batch_size), gather_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tbx-decode")
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._pending: collections.deque[Item] = collections.deque()
        self._running: set[asyncio.Future] = set()  # taken by the decoder, not yet delivered
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches: list[int] = []  # requests admitted together (one prefill each), for benchmarks and tests

    async def submit(self, request: GenerationRequest) -> Generation:
        if self._closing.is_set():
            raise InfraError("the local model's scheduler is closed")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._loop is not loop:
            with self._lock:
                self._pending.clear()  # left by an event loop that is gone
            self._loop, self._wake = loop, asyncio.Event()
            self._worker = loop.create_task(self._serve())
        future: asyncio.Future[Generation] = loop.create_future()
        with self._lock:
            self._pending.append((future, request))
        self._wake.set()
        return await future

    def _take(self, rows: int) -> list[Item]:
        """Waiting requests to fill the stream up to `batch_size` rows (called from the decoder's thread)."""
        taken: list[Item] = []
        with self._lock:
            while self._pending and rows + len(taken) < self.batch_size:
                future, request = self._pending.popleft()
                if not future.done():  # a cancelled turn is not decoded
                    taken.append((future, request))
            self._running.update(future for future, _ in taken)
        if taken:
            self.batches.append(len(taken))
        return taken

    def _deliver(self, future: asyncio.Future, generation: Generation) -> None:
        with self._lock:
            self._running.discard(future)
        try:
            future.get_loop().call_soon_threadsafe(_settle, future, generation)
        except RuntimeError:  # its event loop is closed: nobody waits for it
            pass

    def _stream(self) -> None:
        items = self._take(0)
        if items:
            self.run(items, self._deliver, self._take, self._closing.is_set)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            await asyncio.sleep(self.gather_s)
            try:
                await loop.run_in_executor(self._executor, self._stream)
            except Exception as exc:  # the model failed: every turn it held gets an infra error
                with self._lock:
                    failed, self._running = list(self._running), set()
                for future in failed:
                    if not future.done():
                        future.set_exception(InfraError(f"local generation failed: {exc!r}"))
            if self._pending:
                self._wake.set()

    async def aclose(self) -> None:
        """Stop: the running stream ends after its current step; every waiting turn gets InfraError."""
        self._closing.set()
        if self._worker is not None and not self._worker.done() and self._loop is asyncio.get_running_loop():
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        with self._lock:
            waiting = list(self._running) + [future for future, _ in self._pending]
            self._running, self._pending = set(), collections.deque()
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
        # One weight-product plan for every process on the machine (a resumed run decodes as the
        # uninterrupted one did), kept beside the converted models.
        self.decoder = decoder or Decoder(loaded.model, loaded.tokenizer, product_plans(model_cfg),
                                          pack_weights=model_cfg.pack_weights)
        self.scheduler = BatchScheduler(self.decoder.decode, model_cfg.batch_size)

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
            ids = encode_prompt(self.loaded.tokenizer, render_prompt(self.loaded.tokenizer, chat,
                                                                     self.model_cfg.chat_template_kwargs))
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
        text = render_prompt(tokenizer, fixed, self.model_cfg.chat_template_kwargs, generation_prompt=False)
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
