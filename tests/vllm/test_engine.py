"""Rollouts against the real vLLM (its CPU build, .venv-vllm): a server's life, token-in/token-out
turns, a crash mid-episode, and weight syncs that make the server answer as the trained model does.

Servers are session fixtures (tests/conftest.py: SmolLM2, and a tiny random llama with LoRA allowed);
the lifecycle test starts its own. Each start takes about a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from pathlib import Path

import pytest

from tbx.config import ModelConfig, ServerConfig
from tbx.llm.parsing import parse_assistant_text
from tbx.messages import Message
from tbx.policies.vllm import VLLMPolicy, folder_version, serve
from tests.helpers.episodes import world_of
from tests.helpers.processes import group_pids
from tests.helpers.prompts import POLICY, REQUESTS, TOOLS
from tests.vllm.servers import attached, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def prompt(policy: VLLMPolicy, request: str) -> tuple[int, ...]:
    return policy.prompt_ids([Message("system", POLICY), Message("user", request)], TOOLS)


def test_seeded_turns_are_reproduced_and_carry_their_weights(smollm2_vllm):
    policy = VLLMPolicy(serve(attached(smollm2_vllm, max_new_tokens=24)))
    ids = prompt(policy, REQUESTS[0])

    async def sample(seed: int):
        return await policy.generate(ids, seed)

    async def main():
        try:
            return await asyncio.gather(sample(7), sample(7), sample(8), sample(9))
        finally:
            await policy.aclose()

    first, again, *others = asyncio.run(main())
    # the same tokens; log-probs to float noise (requests batched together sum in another order)
    assert first.token_ids == again.token_ids and first.logprobs == pytest.approx(again.logprobs, abs=1e-4)
    assert any(other.token_ids != first.token_ids for other in others)  # the seed decides
    assert len(first.logprobs) == len(first.token_ids) and all(lp <= 0 for lp in first.logprobs)
    assert first.weight_versions == (folder_version("smollm2_135m", smollm2_vllm.spec.directory),)
    assert policy.engine()["name"] == "vllm" and policy.engine()["version"] == "0.32.0"


def test_a_greedy_tool_call_is_parsed_and_traced(smollm2_vllm):
    """The shared parser reads vLLM's tokens; the trace holds the very ids (the stop included)."""
    from tbx.policies.base import EpisodeContext

    policy = VLLMPolicy(serve(attached(smollm2_vllm, temperature=0.0, max_new_tokens=48)))
    agent = policy.agent(EpisodeContext(task=None, attempt=0, seed=0))  # type: ignore[arg-type]
    messages = [Message("system", POLICY), Message("user", REQUESTS[2])]
    turn = asyncio.run(agent.act(messages, TOOLS))
    asyncio.run(policy.aclose())
    assert [call.name for call in turn.tool_calls] == ["transfer"] and not turn.malformed
    assert turn.tool_calls[0].arguments["from_account"] == 1 and turn.tool_calls[0].arguments["to_account"] == 2
    (traced,) = agent.trace
    assert traced.prompt_ids == policy.prompt_ids(messages, TOOLS)
    text = policy.tokenizer.decode(traced.completion_ids, skip_special_tokens=True)
    assert text.endswith("</tool_call>") and parse_assistant_text(text).tool_calls == turn.tool_calls
    assert turn.usage.completion_tokens == len(traced.completion_ids)


def test_a_shared_server_starts_is_reused_its_engine_dies_mid_episode_and_stop_leaves_nothing(tiny_model,
                                                                                              tmp_path):
    """The path `stage=eval` takes: `serve()` without an endpoint starts this process's server (health
    checked, the weights labelled), a second model of the same architecture reuses it (loaded in place,
    no new process). Its engine process is killed while an episode runs: the episode ends as
    `infra_error` (never a failure). `stop_shared` then ends the API server still running (SIGTERM to
    its group): no process of the group is left and the port is closed."""
    import shutil
    import socket

    import httpx
    from safetensors.torch import load_file, save_file

    from tbx.backend import make_backend
    from tbx.catalog import prepare_task
    from tbx.domains import get_domain
    from tbx.episodes import Outcome, run_episode
    from tbx.tasks import load_task
    from tbx.users.base import UserSession, UserSimulator, UserTurn
    from tbx.vllm.server import stop_shared

    model = ModelConfig(name="tiny", path=str(tiny_model), max_new_tokens=4, cache_dir=str(tmp_path / "cache"),
                        server=ServerConfig(kv_cache_gib=1.0, max_num_seqs=8))
    first = serve(model)
    server = first.server
    try:
        pgid, port = server.process.pid, server.port
        assert httpx.get(f"{server.root_url}/health").status_code == 200
        assert server.engine() == {"name": "vllm", "version": "0.32.0"}
        assert server.weight_version() == first.version == folder_version("tiny", tiny_model)
        other = tmp_path / "tiny-other"  # the same architecture, other weights
        shutil.copytree(tiny_model, other)
        weights = {k: v + 0.01 for k, v in load_file(str(other / "model.safetensors")).items()}
        save_file({k: v.contiguous() for k, v in weights.items()}, str(other / "model.safetensors"))
        second = serve(dataclasses.replace(model, path=str(other)))
        assert second.server is server and server.process.pid == pgid  # reused, not restarted
        assert server.weight_version() == second.version != first.version
        engines = [pid for pid in group_pids(pgid) if pid != pgid]
        assert engines  # the engine core runs beside the API server
        policy = VLLMPolicy(second)

        class KillingUser(UserSimulator):
            """Answers the agent's first turn after killing the server's engine processes."""

            def session(self, scenario, seed):
                class Session(UserSession):
                    def opening(self) -> str:
                        return scenario.opening_message

                    async def reply(self, conversation) -> UserTurn:
                        for pid in engines:
                            os.kill(pid, signal.SIGKILL)
                        return UserTurn("Please go on.", False)
                return Session()

        mock = get_domain("mock")
        task = load_task(dict(mock.generate_tasks(0)[0]), "mock-test", mock.policy)
        backend = make_backend("sqlite", None, str(tmp_path / "db"))
        try:
            runtime = prepare_task(task, backend)
            result = asyncio.run(run_episode(world_of(backend, KillingUser()), runtime, policy, 0, 0))
        finally:
            backend.close()
        assert result.counts["turns"] >= 1  # the first turn was played before the engine died
        assert result.outcome is Outcome.INFRA_ERROR and result.reward is None, (result.outcome, result.cause)
    finally:
        stop_shared()
    assert group_pids(pgid) == [] and server.process.returncode is not None
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_an_eval_records_the_engine_and_the_weights_in_run_json(smollm2_vllm, tmp_path):
    import json

    from tests.helpers.stage import make_cfg, run

    summary = run(make_cfg(tmp_path, "stage=eval", "tasks=mock", "tasks.limit=1", "policy=model",
                           "eval.max_turns=1", f"model.path={smollm2_vllm.spec.directory}",
                           f"model.endpoint.base_url={smollm2_vllm.base_url}", "model.endpoint.model=smollm2_135m",
                           "model.max_new_tokens=16"))
    engine = json.loads((Path(summary.run_dir) / "run.json").read_text())["engine"]
    assert engine == {"name": "vllm", "version": "0.32.0", "served_model": "smollm2_135m",
                      "weights": folder_version("smollm2_135m", smollm2_vllm.spec.directory)}


def test_a_start_that_fails_reports_the_exit_code_and_the_log_tail(tiny_model, tmp_path):
    """A folder vLLM cannot load: the start fails fast (not at the ready timeout) with vLLM's own words."""
    import json
    import shutil
    import time

    from tbx.errors import InfraError

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config | {"model_type": "no_such_architecture"}))
    server = vllm_server("broken", broken, tmp_path)
    started = time.monotonic()
    with pytest.raises(InfraError, match=r"(?s)exited with code \d+ before it was ready.*no_such_architecture"):
        with server:
            pytest.fail("the body must not run")
    assert time.monotonic() - started < server.ready_timeout_s / 2 and group_pids(server.process.pid) == []
