"""Our AgentLoop inside verl 0.9.1's own machinery, on CPU.

verl's real config (our overrides composed with its Hydra tree), its real `AgentLoopWorker`
(loads the tokenizer from a model folder, reads our agent-loop YAML, instantiates `tbx_episode`
per trajectory, pads and post-processes the outputs), its real `RLHFDataset` reading our rows;
only the rollout server is a double with the same `generate` signature (vLLM needs a GPU): a
scripted server replaying the mock tasks' reference solutions (reward 1.0), and a tiny randomly
initialised llama that generates real tokens and log-probabilities. Needs verl: skipped without.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest

verl = pytest.importorskip("verl", reason="verl is not installed: scripts/test.sh runs these in .venv-vllm")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from tbx.config import BackendConfig, Config, ModelConfig, TasksConfig  # noqa: E402
from tbx.config import GrpoConfig as GrpoSettings  # noqa: E402
from tbx.domains import get_domain  # noqa: E402
from tbx.errors import UserSimError  # noqa: E402
from tbx.records import PoolManifest, PoolTask  # noqa: E402
from tbx.store.training import STEP_STRIDE  # noqa: E402
from tbx.tasks import load_task  # noqa: E402
from tbx.verl_bridge import VERL_VERSION, HardwareSettings, plan_training, verl_overrides  # noqa: E402
from tbx.verl_bridge.agent_loop import TbxEpisodeLoop  # noqa: E402
from tbx.verl_bridge.data import write_bridge_files  # noqa: E402
from tbx.verl_bridge.episode import EpisodeErrored, world_for  # noqa: E402
from tests.verl_bridge.fakes import ScriptedServer, oracle_texts, tiny_tokenizer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl]
MOCK = get_domain("mock")
TASKS = [load_task(data, "mock", MOCK.policy) for data in MOCK.generate_tasks(0)]
GROUP = 2  # rollout.n


def test_pinned_version():
    assert verl.__version__ == VERL_VERSION


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Model folder (tiny tokenizer + tiny llama), bridge files and verl's composed config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("verl")
    model_dir = root / "model"
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(model_dir)
    llama = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16384,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(llama).save_pretrained(model_dir)
    cfg = Config(tasks=TasksConfig(name="mock", domains=["mock"]),
                 backend=BackendConfig(kind="sqlite", workdir=str(root / "db")),
                 model=ModelConfig(name="tiny", path=str(model_dir), few_shot=True, max_new_tokens=256))
    manifest = PoolManifest(hash="mockpool", pool={"name": "full_param", "finetune": "full"},
                            kept=tuple(t.id for t in TASKS),
                            tasks=tuple(PoolTask(t.id, "mock", t.family, band="medium") for t in TASKS))
    grpo = GrpoSettings(group_size=GROUP, groups_per_step=3, max_prompt_tokens=8192, max_response_tokens=4096)
    plan = plan_training(manifest, str(root / "run"), "test", grpo, HardwareSettings(1, 2, 1), run_id="verltest")
    write_bridge_files(cfg, manifest, plan)
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=verl_overrides(cfg, manifest, plan))
    return {"config": config, "plan": plan, "tokenizer": tokenizer, "model_dir": model_dir}


def scripted_server(tokenizer) -> ScriptedServer:
    return ScriptedServer(tokenizer, {t.user.opening_message: oracle_texts(t) for t in TASKS}, output_cls=TokenOutput)


def batch_from_rows(setup) -> DataProto:
    """The rows as verl's dataset reads them, repeated rollout.n times with a uid per prompt."""
    config, plan = setup["config"], setup["plan"]
    dataset = RLHFDataset(data_files=[plan.paths.train_file], tokenizer=setup["tokenizer"], config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([uuid.uuid4().hex for _ in range(len(batch))], dtype=object)
    batch.meta_info = {"global_steps": 1, "validate": False}
    return batch.repeat(repeat_times=GROUP, interleave=True)


def test_verl_worker_runs_tbx_episodes_and_rewards_the_verdict(setup):
    server = scripted_server(setup["tokenizer"])
    config = setup["config"]

    async def go():
        worker = AgentLoopWorker(config, llm_client=server)  # reads our agent-loop YAML, loads the tokenizer
        return await worker.generate_sequences(batch_from_rows(setup))

    output = asyncio.run(go())
    n, response_length = len(TASKS) * GROUP, config.actor_rollout_ref.rollout.response_length
    assert output.batch["responses"].shape == (n, response_length)
    assert output.batch["prompts"].shape == (n, config.actor_rollout_ref.rollout.prompt_length)
    scores = output.batch["rm_scores"].sum(-1)
    assert scores.tolist() == [1.0] * n  # every oracle episode passed its terminal-state check
    assert output.non_tensor_batch["acc"].tolist() == [1.0] * n
    mask, attention = output.batch["response_mask"], output.batch["attention_mask"][:, -response_length:]
    assert torch.all(mask <= attention)  # padding is never trained on
    assert int(mask.sum()) == sum(len(o) for o in server.outputs)  # 1 exactly on the server's tokens
    logprobs = output.batch["rollout_log_probs"]
    assert torch.allclose(logprobs[mask.bool()], torch.tensor(-0.5)) and torch.all(logprobs[~mask.bool()] == 0)
    tbx_info = list(output.non_tensor_batch["tbx"])
    assert {info["task_id"] for info in tbx_info} == {t.id for t in TASKS}
    assert all(info["outcome"] == "success" and info["ended_by"] == "user_stop" for info in tbx_info)
    assert output.non_tensor_batch["__num_turns__"].min() >= 4
    decoded = setup["tokenizer"].decode(output.batch["responses"][0][mask[0].bool()])
    assert "<tool_response>" not in decoded  # tool results are context, not trained on


def test_loop_output_becomes_verls_reward_tensor(setup):
    """`as_dict` + the V1 worker's TransferQueue record: score on the last response token, and the
    verdict where the zero-variance filter reads it (`extra_fields.reward_extra_info.acc`)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    server = scripted_server(setup["tokenizer"])

    async def go():
        loop = make_loop(setup, server)
        return [await loop.run({"temperature": 1.0, "logprobs": True}, **row_kwargs(TASKS[2].id, session_id=s))
                for s in range(2)]

    outputs = asyncio.run(go())
    out, record = outputs[0], outputs[0].as_dict()
    assert record["rm_scores"][-1] == 1.0 and record["rm_scores"][:-1].abs().sum() == 0
    assert record["responses"].shape == record["response_mask"].shape == record["rollout_log_probs"].shape
    assert out.extra_fields["reward_extra_info"] == {"acc": 1.0, "error_tries": 0.0, "context_limit": 0.0}
    # nickname task: user opening, question, user's answer, call, tool result, "Done.", user's goodbye
    assert out.num_turns == 7 and out.extra_fields["tbx"]["counts"]["tool_calls"] == 1
    fields = [o.as_dict() | row_kwargs(TASKS[2].id, session_id=s) for s, o in enumerate(outputs)]
    stored = list_of_dict_to_tensordict(fields)  # what AgentLoopWorkerTQ puts into TransferQueue
    assert [getattr(v, "data", v)["reward_extra_info"]["acc"] for v in stored["extra_fields"]] == [1.0, 1.0]


def test_outputs_carry_the_weight_versions_verls_v1_trainer_reads(setup):
    """AgentLoopWorkerTQ tags each trajectory with extra_fields' min/max_global_steps, and the V1 trainer
    takes int() of both after the first update (trainer_base.py); None there was a TypeError."""
    server = scripted_server(setup["tokenizer"])
    server.weight_step = 3

    async def go():
        return await make_loop(setup, server).run({"temperature": 1.0}, **row_kwargs(TASKS[0].id, session_id=1))

    out = asyncio.run(go())
    tags = [{"min_global_steps": out.extra_fields.get("min_global_steps"),
             "max_global_steps": out.extra_fields.get("max_global_steps")}]  # as agent_loop_tq.py builds them
    assert np.array([t["min_global_steps"] for t in tags], dtype=int).tolist() == [3]
    assert np.array([t["max_global_steps"] for t in tags], dtype=int).tolist() == [3]


def test_every_episode_is_stored_with_its_verdict(setup):
    from tbx.store import open_store

    server = scripted_server(setup["tokenizer"])
    plan = setup["plan"]

    async def go():
        loop = make_loop(setup, server)
        kwargs = row_kwargs(TASKS[1].id, session_id=1) | {"global_steps": 4, "uid": "u-stored"}
        return await loop.run({"temperature": 1.0}, **kwargs)

    out = asyncio.run(go())
    store = open_store(None, Path(plan.paths.run_dir), plan.run_id, "train")
    try:
        mine = [r for r in store.records if r.task_id == TASKS[1].id and r.attempt >= 3 * STEP_STRIDE]
    finally:
        store.close()
    assert [(r.attempt, r.outcome, r.reward) for r in mine] == [(3 * STEP_STRIDE + 1, "success", 1.0)]
    assert out.reward_score == mine[0].reward and out.extra_fields["tbx"]["seed"] == mine[0].seed


def test_a_session_reissued_after_an_asynchronous_resume_is_stored_once(setup):
    """A group in flight at verl's asynchronous checkpoint is re-issued by the resumed run under its first step
    with the same uid: the session the killed process stored under step 1 is replaced by its replay under step
    3 (the start resumed after step 2), not kept beside it."""
    from tbx.episodes.seeds import rollout_seed
    from tbx.store import open_store

    plan = setup["plan"]
    kwargs = row_kwargs(TASKS[0].id, session_id=2) | {"uid": "u-reissued"}

    async def go(loop, global_steps):
        return await loop.run({"temperature": 1.0}, **kwargs | {"global_steps": global_steps})

    asyncio.run(go(make_loop(setup, scripted_server(setup["tokenizer"])), 1))  # the killed start
    asyncio.run(go(make_loop(setup, scripted_server(setup["tokenizer"]), resumed_after_step=2), 3))
    store = open_store(None, Path(plan.paths.run_dir), plan.run_id, "train")
    try:
        mine = [(r.attempt // STEP_STRIDE, r.attempt % STEP_STRIDE, r.try_index) for r in store.records
                if r.seed == rollout_seed("u-reissued", 2, 0)]  # other tests' episodes have other uids
    finally:
        store.close()
    assert mine == [(2, 2, 0)]


def make_loop(setup, server, resumed_after_step: int = 0) -> TbxEpisodeLoop:
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

    config = setup["config"]
    return TbxEpisodeLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=setup["tokenizer"],
                          processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
                          hf_model_type="llama", tools=ToolListWrap([]),
                          tbx_config_path=setup["plan"].paths.tbx_config, max_error_retries=1,
                          run_dir=setup["plan"].paths.run_dir, run_id=setup["plan"].run_id,
                          resumed_after_step=resumed_after_step)


def row_kwargs(task_id: str, session_id: int = 0) -> dict:
    return {"raw_prompt": [{"role": "user", "content": f"tbx task {task_id}"}], "extra_info": {"task_id": task_id},
            "uid": "u-1", "session_id": session_id, "index": 0, "global_steps": 1}


def test_errored_episode_raises_and_verl_v1_counts_it_as_a_failed_session(setup):
    from verl.trainer.ppo.v1.agent_loop_tq import _settle_session_tasks

    worker = world_for(setup["plan"].paths.tbx_config)
    real, real_user = worker.world, worker.world.user

    class DownUser(type(real_user)):
        def session(self, scenario, seed):
            session = super().session(scenario, seed)

            async def broken(conversation):
                raise UserSimError("user endpoint down")
            session.reply = broken
            return session

    worker.world = dataclasses.replace(real, user=DownUser())
    server = scripted_server(setup["tokenizer"])

    async def go():
        loop = make_loop(setup, server)
        tasks = [asyncio.create_task(loop.run({"temperature": 1.0}, **row_kwargs(TASKS[0].id)))]
        return await _settle_session_tasks(tasks)  # what AgentLoopWorkerTQ._run_prompt does with sessions

    try:
        errors = asyncio.run(go())
    finally:
        worker.world = real
    assert len(errors) == 1 and isinstance(errors[0], EpisodeErrored)  # -> prompt status "failure", no sample
    assert [r.outcome.value for r in errors[0].tries] == ["user_sim_error", "user_sim_error"]  # 1 + 1 retry


class TinyModelServer:
    """A randomly initialised tiny llama behind verl's `generate` signature (real tokens, real log-probs)."""

    def __init__(self, model_dir: Path):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        torch.manual_seed(self.calls)
        self.calls += 1
        with torch.no_grad():
            out = self.model.generate(torch.tensor([prompt_ids]), do_sample=True, temperature=1.0, top_k=0,
                                      max_new_tokens=min(sampling_params["max_tokens"], 12),
                                      output_scores=True, return_dict_in_generate=True)
        tokens = out.sequences[0, len(prompt_ids):].tolist()
        logprobs = [torch.log_softmax(score[0], -1)[t].item() for score, t in zip(out.scores, tokens, strict=True)]
        return TokenOutput(token_ids=tokens, log_probs=logprobs, stop_reason="completed")


def test_tiny_random_model_episode_is_scored_and_consistent(setup):
    server = TinyModelServer(setup["model_dir"])

    async def go():
        loop = make_loop(setup, server)
        return await loop.run({"temperature": 1.0, "logprobs": True}, **row_kwargs(TASKS[1].id))

    out = asyncio.run(go())
    assert out.reward_score == 0.0  # random tokens make no transfer: a failure, graded, not an error
    assert out.extra_fields["tbx"]["outcome"] == "failure"
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    assert sum(out.response_mask) == sum(1 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True)
                                         if m and lp <= 0.0) > 0  # real log-probs on every generated token
    assert server.calls == out.extra_fields["tbx"]["counts"]["turns"]
