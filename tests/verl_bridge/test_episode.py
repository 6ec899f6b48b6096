"""A tbx episode played token-in/token-out (no verl needed): token stream, masks, retries, budget.

The policy is a scripted server that plays the mock task's reference solution, so the verdict is
known (success); the checks are on what verl would train on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading

import pytest

from tbx.config import BackendConfig, Config, EvalConfig, FaultsConfig, ModelConfig, TasksConfig
from tbx.episodes import Outcome
from tbx.episodes.faults import draw
from tbx.episodes.seeds import verl_fault_seed as fault_seed
from tbx.errors import ConfigError, UserSimError
from tbx.llm.parsing import render_assistant_text
from tbx.messages import Message, ToolCall
from tbx.policies.prompting import build_chat, demonstrations_for, render_prompt
from tbx.users.scripted import ScriptedUser
from tbx.verl_bridge.episode import (
    EpisodeErrored,
    TrainingEpisode,
    WorkerWorld,
    check_pool_prompts,
    run_training_episode,
    worker_world,
)
from tbx.verl_bridge.token_agent import SENTINEL, PromptRenderer, TokenAgent, TokenLimits, _mark_turns
from tests.helpers.episodes import blocking, released, with_tool
from tests.verl_bridge.fakes import END_OF_TURN, SHIFTING, ScriptedServer, oracle_texts, tiny_tokenizer

TASK = "mock/transfer/5"
LIMITS = TokenLimits(prompt=8192, response=4096, new_tokens=256)


@pytest.fixture
def world(tmp_path) -> WorkerWorld:
    cfg = Config(tasks=TasksConfig(name="mock", domains=["mock"]),
                 backend=BackendConfig(kind="sqlite", workdir=str(tmp_path / "db")),
                 model=ModelConfig(name="tiny", few_shot=True))
    made = worker_world(cfg)
    yield made
    made.world.backend.close()


def with_parts(worker: WorkerWorld, **parts) -> WorkerWorld:
    """`worker` whose episode world has other parts (a user simulator, faults)."""
    return dataclasses.replace(worker, world=dataclasses.replace(worker.world, **parts))


class RecordingRenderer(PromptRenderer):
    """The real renderer, remembering the tool schemas it was given (for the parity check)."""

    tools: list = []

    def text(self, messages, tools):
        RecordingRenderer.tools = list(tools)
        return super().text(messages, tools)


def oracle_server(world, tokenizer=None, **kw) -> ScriptedServer:
    task = world.tasks[TASK]
    return ScriptedServer(tokenizer or tiny_tokenizer(), {task.user.opening_message: oracle_texts(task)}, **kw)


def play(world, server, limits=LIMITS, style="tbx", retries=2, renderer_cls=PromptRenderer,
         tokenizer=None, uid="uid-1", stored_attempt=None) -> TrainingEpisode:
    renderer = renderer_cls(tokenizer or tiny_tokenizer(), style, few_shot=True)
    ids = itertools.count()

    def make_agent():
        return TokenAgent(server.generate, renderer, limits, f"req-{next(ids)}", {"temperature": 1.0, "logprobs": True})

    return asyncio.run(run_training_episode(world, TASK, make_agent, uid=uid, attempt=3, max_error_retries=retries,
                                            stored_attempt=stored_attempt))


def test_oracle_episode_is_rewarded_and_its_token_stream_is_what_verl_needs(world):
    server = oracle_server(world)
    episode = play(world, server, renderer_cls=RecordingRenderer)
    trace, tok = episode.trace, tiny_tokenizer()
    assert episode.result.outcome is Outcome.SUCCESS and episode.reward == 1.0, episode.result.cause
    assert episode.ended_by == "user_stop" and not episode.error_tries
    # 4 reference steps -> 4 generations; each request is the stream so far (append-only)
    assert len(server.requests) == 4 == trace.generations
    mask = [0] * len(trace.response_ids)
    for request, output in zip(server.requests, server.outputs, strict=True):
        sent = request["prompt_ids"]
        assert sent[:len(trace.prompt_ids)] == trace.prompt_ids
        start = len(sent) - len(trace.prompt_ids)
        assert trace.response_ids[start:start + len(output)] == output  # generated tokens sit where sent
        mask[start:start + len(output)] = [1] * len(output)
        assert request["params"]["stop"] == ["</tool_call>"] and request["params"]["max_tokens"] <= 256
    assert trace.response_mask == mask  # 1 exactly on generated tokens, 0 on everything else
    assert len(trace.logprobs) == len(trace.response_ids)
    assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(trace.logprobs, mask, strict=True))
    context = tok.decode([t for t, m in zip(trace.response_ids, mask, strict=True) if m == 0])
    generated = tok.decode([t for t, m in zip(trace.response_ids, mask, strict=True) if m == 1])
    assert "<tool_response>" in context and "My owner name is Ada." in context  # tool result, user reply: 0
    assert "<tool_response>" not in generated and "Ada." not in generated
    assert '"name": "transfer"' in generated and '"name": "transfer"' not in context
    # Parity with evaluation: the stream is exactly the eval prompt builder's rendering of the episode.
    transcript = list(episode.result.transcript)
    last_assistant = max(i for i, m in enumerate(transcript) if m.role == "assistant")
    tools = RecordingRenderer.tools
    expected = render_prompt(tok, build_chat(transcript[:last_assistant + 1], tools, demonstrations_for(tools)))
    assert tok.decode(trace.prompt_ids + trace.response_ids) + "\n<|im_start|>assistant\n" == expected


def test_the_trace_keeps_the_weight_versions_that_generated_it(world):
    # verl's V1 trainer reads min/max_global_steps of every trajectory (trainer_base.py: int(...) of each);
    # a multi-turn episode spans the versions of its first and its last generate call
    server = oracle_server(world)
    original = server.generate

    async def newer_weights_each_turn(*args, **kwargs):
        output = await original(*args, **kwargs)
        server.weight_step += 1
        return output

    server.generate = newer_weights_each_turn
    server.weight_step = 5
    trace = play(world, server).trace
    assert (trace.min_weight_step, trace.max_weight_step) == (5, 8)  # 4 turns at versions 5, 6, 7, 8


def test_generated_end_of_turn_is_not_repeated_by_the_context(world):
    episode = play(world, oracle_server(world))
    eot = tiny_tokenizer().convert_tokens_to_ids(END_OF_TURN)
    ids, mask = episode.trace.response_ids, episode.trace.response_mask
    generated_eot = [i for i, (t, m) in enumerate(zip(ids, mask, strict=True)) if t == eot and m == 1]
    assert generated_eot  # text turns end with a generated end-of-turn...
    for i in generated_eot[:-1]:
        assert ids[i + 1] != eot and mask[i + 1] == 0  # ...that the template's copy does not double
    # a turn cut by the </tool_call> stop string gets the template's end-of-turn as context (mask 0)
    assert any(t == eot and m == 0 for t, m in zip(ids, mask, strict=True))


def test_error_outcome_is_rerun_not_scored(world):
    class FlakyUser(ScriptedUser):
        sessions = 0

        def session(self, scenario, seed):
            FlakyUser.sessions += 1
            inner = super().session(scenario, seed)
            if FlakyUser.sessions == 1:
                async def broken(conversation):
                    raise UserSimError("user endpoint down")
                inner.reply = broken
            return inner

    world = with_parts(world, user=FlakyUser())
    episode = play(world, oracle_server(world))
    assert [r.outcome for r in episode.error_tries] == [Outcome.USER_SIM_ERROR]
    assert episode.result.outcome is Outcome.SUCCESS and episode.reward == 1.0
    assert episode.result.seed != episode.error_tries[0].seed  # a fresh try, not a replay
    assert episode.trace.generations == 4  # the trace is the successful try's own


def test_injected_faults_follow_the_stored_attempt_not_verls_random_uid(world):
    """The faults of a training try are drawn from its task and stored attempt (fault_seed), so a run and its
    replayed step inject the same ones, whatever uid verl gives the prompt."""
    faults = FaultsConfig(name="test", db=0.5, hang=0.0)
    world = with_parts(world, faults=faults)
    clone_fails = [draw(faults, fault_seed(TASK, attempt, 0), "db", 0) == "fail" for attempt in range(40)]
    stored = next(a for a in range(40) if clone_fails[a] and draw(faults, fault_seed(TASK, a, 1), "db", 0) is None
                  and draw(faults, fault_seed(TASK, a, 1), "db", 1) is None)
    for uid in ("uid-1", "uid-2"):
        episode = play(world, oracle_server(world), uid=uid, stored_attempt=stored)
        assert [r.cause for r in episode.error_tries] == [
            "could not clone the task database: injected fault: db call 0 failed"]
        assert episode.result.outcome is Outcome.SUCCESS


def test_episode_that_always_errors_raises_instead_of_reward_zero(world):
    class DownUser(ScriptedUser):
        def session(self, scenario, seed):
            inner = super().session(scenario, seed)

            async def broken(conversation):
                raise UserSimError("user endpoint down")
            inner.reply = broken
            return inner

    world = with_parts(world, user=DownUser())
    with pytest.raises(EpisodeErrored) as caught:
        play(world, oracle_server(world), retries=2)
    assert len(caught.value.tries) == 3 and all(r.outcome is Outcome.USER_SIM_ERROR for r in caught.value.tries)
    assert all(r.reward is None for r in caught.value.tries)


def test_response_budget_ends_the_episode_and_it_is_graded(world):
    class CountingUser(ScriptedUser):
        replies = 0

        def session(self, scenario, seed):
            inner = super().session(scenario, seed)
            original = inner.reply

            async def reply(conversation):
                CountingUser.replies += 1
                return await original(conversation)
            inner.reply = reply
            return inner

    world = with_parts(world, user=CountingUser())
    limits = TokenLimits(prompt=8192, response=80, new_tokens=256)
    episode = play(world, oracle_server(world), limits=limits)
    trace = episode.trace
    assert trace.exhausted and episode.ended_by == "context_limit"
    assert len(trace.response_ids) <= 80 == limits.response
    assert len(trace.response_mask) == len(trace.response_ids) == len(trace.logprobs)
    assert episode.result.outcome is Outcome.FAILURE and episode.reward == 0.0  # graded as left
    assert CountingUser.replies == 1  # the real user only answered before the budget ran out


def test_prompt_longer_than_the_limit_is_a_config_error(world):
    with pytest.raises(ConfigError, match="max_prompt_tokens"):
        play(world, oracle_server(world), limits=TokenLimits(prompt=50, response=4096))


def test_template_that_rewrites_history_is_refused(world):
    shifting = tiny_tokenizer(SHIFTING)
    with pytest.raises(ConfigError, match="renders earlier turns differently"):
        play(world, oracle_server(world, tokenizer=shifting), tokenizer=shifting)


def test_native_template_style_plays_the_same_episode(world):
    episode = play(world, oracle_server(world), style="native")
    assert episode.result.outcome is Outcome.SUCCESS
    text = tiny_tokenizer().decode(episode.trace.prompt_ids + episode.trace.response_ids)
    assert "<|im_start|>tool\n" in text  # the template's own tool role, not tbx's <tool_response>


def test_unparseable_call_is_context_and_logprobs_may_be_absent(world):
    task = world.tasks[TASK]
    server = ScriptedServer(tiny_tokenizer(), {task.user.opening_message: ['<tool_call>{"name": oops</tool_call>',
                                                                           "Sorry, I cannot do that."]})

    async def no_logprobs(request_id, **kwargs):
        output = await ScriptedServer.generate(server, request_id, **kwargs)
        output.log_probs = None
        return output

    server_generate = server.generate
    server.generate = no_logprobs
    episode = play(world, server)
    server.generate = server_generate
    trace, tok = episode.trace, tiny_tokenizer()
    assert episode.result.counts["malformed_calls"] == 1 and episode.result.outcome is Outcome.FAILURE
    context = tok.decode([t for t, m in zip(trace.response_ids, trace.response_mask, strict=True) if m == 0])
    assert "could not parse this tool call" in context
    assert trace.logprobs is None


def test_only_the_agents_own_turns_become_sentinels():
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "demo"},
            {"role": "assistant", "content": "demo call"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "mine 0"}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "mine 1"}]
    marked = _mark_turns(chat, own_turns=2)
    assert [m["content"] for m in marked if m["role"] == "assistant"] == ["demo call", SENTINEL.format(0),
                                                                        SENTINEL.format(1)]
    assert _mark_turns(chat, own_turns=0) == chat


def test_renderer_refuses_unknown_style():
    with pytest.raises(ConfigError, match="prompt_style"):
        PromptRenderer(tiny_tokenizer(), "chatml")  # type: ignore[arg-type]
    assert PromptRenderer(tiny_tokenizer()).text([Message("system", "p"), Message("user", "hi")], []).endswith(
        "<|im_start|>assistant\n")


def test_launch_check_measures_the_first_prompt_the_episode_will_send(world):
    ids = sorted(world.tasks)
    lengths = check_pool_prompts(world.cfg, ids, tiny_tokenizer(), max_prompt_tokens=8192)
    assert set(lengths) == set(ids) and min(lengths.values()) > 100
    episode = play(world, oracle_server(world))
    assert lengths[TASK] == len(episode.trace.prompt_ids)  # the same prompt the episode starts from
    longest = max(lengths.values())
    with pytest.raises(ConfigError, match=f"at least {longest}") as caught:
        check_pool_prompts(world.cfg, ids, tiny_tokenizer(), max_prompt_tokens=longest - 1)
    assert caught.value.field == "max_prompt_tokens"
    with pytest.raises(ConfigError, match="differently once turns are appended"):
        check_pool_prompts(world.cfg, ids, tiny_tokenizer(SHIFTING), max_prompt_tokens=8192)


def _cached_smollm2_tokenizer():
    import glob
    import os

    root = os.environ.get("TBX_CACHE") or os.path.expanduser("~/.cache/tbx")
    found = sorted(glob.glob(os.path.join(root, "models", "smollm2*", "tokenizer.json")))
    if not found:
        pytest.skip("no converted SmolLM2 in the tbx model cache (run any local-model stage once to make it)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(found[0]))


@pytest.mark.parametrize("task_id", ["mock/transfer/20", "mock/nickname/1"])
def test_real_tokenizer_stream_equals_tokenizing_the_eval_prompt(world, task_id):
    """With SmolLM2's own tokenizer and template the stream is token-for-token what tokenizing the
    evaluation prompt of the same conversation gives: no drift at turn boundaries."""
    tokenizer = _cached_smollm2_tokenizer()
    task = world.tasks[task_id]
    server = ScriptedServer(tokenizer, {task.user.opening_message: oracle_texts(task)})
    renderer = RecordingRenderer(tokenizer, "tbx", few_shot=True)
    ids = itertools.count()

    def make():
        return TokenAgent(server.generate, renderer, LIMITS, f"r{next(ids)}", {})

    episode = asyncio.run(run_training_episode(world, task_id, make, uid="u", attempt=0, max_error_retries=0))
    assert episode.reward == 1.0
    transcript = list(episode.result.transcript)
    last_assistant = max(i for i, m in enumerate(transcript) if m.role == "assistant")
    tools = RecordingRenderer.tools
    text = render_prompt(tokenizer, build_chat(transcript[:last_assistant + 1], tools, demonstrations_for(tools)))
    stream = episode.trace.prompt_ids + episode.trace.response_ids
    assert tokenizer(text, add_special_tokens=False)["input_ids"][:len(stream)] == stream


def test_a_tool_that_never_returns_ends_a_training_episode_as_an_error(tmp_path):
    # the episode plays within the run's EpisodeLimits: the tool call is cut at eval.call_timeout_s, and
    # every try ends as an infra_error (never a reward) in bounded time
    cfg = Config(tasks=TasksConfig(name="mock", domains=["mock"]), eval=EvalConfig(call_timeout_s=0.5),
                 backend=BackendConfig(kind="sqlite", workdir=str(tmp_path / "db")),
                 model=ModelConfig(name="tiny", few_shot=True))
    world, caught = worker_world(cfg), []
    released.clear()
    try:
        runtimes = world.world.runtimes
        runtimes._prepared[TASK] = with_tool(runtimes[TASK], blocking.__tbx_tool__)
        call = render_assistant_text("", [ToolCall("blocking", {})])
        server = ScriptedServer(tiny_tokenizer(), {world.tasks[TASK].user.opening_message: [call]})

        def episode() -> None:
            try:
                play(world, server, retries=1)
            except EpisodeErrored as exc:
                caught.append(exc)

        worker = threading.Thread(target=episode, daemon=True)
        worker.start()
        worker.join(30)  # two tries whose calls are cut at 0.5 s end in about a second
        assert not worker.is_alive(), "the training episode never ended: it waited on the tool for ever"
        assert caught and [r.outcome for r in caught[0].tries] == [Outcome.INFRA_ERROR] * 2, caught
        assert all("did not answer within 0.5 s" in r.cause for r in caught[0].tries)
    finally:
        released.set()
        world.world.backend.close()


class _AbortOnceServer:
    """verl's rollout server as verl's asynchronous client calls it (`generate.remote(...)` → TokenOutput, the
    weight version in `extra_fields["global_steps"]`), over a scripted server: the episode's first request is
    aborted halfway by a weight sync (version 0 → 1), and the resubmitted request (prompt + the tokens so far)
    gets the rest, generated on version 1."""

    def __init__(self, scripted: ScriptedServer):
        self.scripted, self.version, self.rest, self.resumed_with = scripted, 0, None, None
        self.generate = self  # verl calls `server.generate.remote(...)`

    async def remote(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_):
        from verl.workers.rollout.replica import TokenOutput

        if self.rest is not None:  # the resubmission after the sync
            (partial, rest), self.rest = self.rest, None
            self.resumed_with = list(prompt_ids)
            assert prompt_ids[-len(partial):] == partial
            return TokenOutput(token_ids=rest, log_probs=[-0.5] * len(rest), stop_reason="completed",
                               extra_fields={"global_steps": self.version})
        out = await self.scripted.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        if self.version == 0:
            half = len(out.token_ids) // 2
            self.rest, self.version = (out.token_ids[:half], out.token_ids[half:]), 1  # the sync happens here
            return TokenOutput(token_ids=out.token_ids[:half], log_probs=[-0.5] * half, stop_reason="aborted",
                               extra_fields={"global_steps": 0})
        return TokenOutput(token_ids=out.token_ids, log_probs=out.log_probs, stop_reason="completed",
                           extra_fields={"global_steps": self.version})


@pytest.mark.verl
def test_an_episode_interrupted_at_a_weight_sync_resumes_on_the_new_weights_in_one_try(world):
    """grpo.max_staleness >= 1 (verl's colocate_async): verl aborts the requests in flight at a weight sync and its
    asynchronous client resubmits each with the tokens so far (partial rollout). The tbx episode sees one
    generate call: the same token stream as an uninterrupted one, one try, its versions spanning the sync."""
    pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")
    from omegaconf import OmegaConf
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    class Client(FullyAsyncLLMServerClient):  # one server, no load balancer actor
        async def _acquire_server(self, request_id, **extra):
            return "server-0", self.server

        def _release_server(self, server_id, request_id=None):
            return None

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "response_length": 4096,
                                                                 "full_determinism": True}}})
    client = Client(config=config)
    client.server = _AbortOnceServer(oracle_server(world))
    interrupted = play(world, client, retries=0)
    plain = play(world, oracle_server(world), retries=0)
    assert client.server.resumed_with is not None  # the abort happened and the request was resubmitted
    assert interrupted.result.outcome is Outcome.SUCCESS and not interrupted.error_tries
    assert (interrupted.trace.response_ids, interrupted.trace.response_mask) == \
        (plain.trace.response_ids, plain.trace.response_mask)
    assert interrupted.trace.prompt_ids == plain.trace.prompt_ids
    assert (interrupted.trace.min_weight_step, interrupted.trace.max_weight_step) == (0, 1)  # spans the sync
