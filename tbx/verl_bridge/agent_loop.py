"""verl's AgentLoop for tbx: one trajectory = one tbx episode, rewarded by its terminal-state verdict.

Registered as `tbx_episode` by the YAML at `actor_rollout_ref.rollout.agent.agent_loop_config_path`
(written by `tbx.verl_bridge.data.write_bridge_files`; its entry passes `tbx_config_path`, the run
and the retry and prompt settings to `__init__`). Not with verl's `@register` as well: the worker
imports this module at the first instantiation, after it read the YAML, and the decorator would
then replace the YAML's entry by a bare one, so every later episode lost its arguments. verl makes
one loop object per trajectory; the episode world (backend, user simulator, judge, prepared tasks)
is built once per worker process.

How an episode maps onto verl 0.9.1's `AgentLoopOutput`:
- `prompt_ids`: the first prompt (system policy, tools, demonstrations, the user's opening);
  `response_ids`/`response_mask`: every later token, 1 on tokens the policy generated, 0 on tool
  results, user replies and chat-template boundaries; `response_logprobs`: the rollout's
  log-probabilities (0.0 on mask-0 tokens), or None when the server returned none.
- `reward_score`: the verdict, 1.0 or 0.0. verl then skips its reward workers and puts the score
  on the last response token (`rm_scores`).
- `extra_fields["reward_extra_info"]`: numbers only — `acc` (the verdict, the metric the V1
  sampler's zero-variance filter reads), `error_tries`, `context_limit`; verl averages these
  (strings would break `np.mean` in its validation metrics), so the outcome, cause and task id
  go to `extra_fields["tbx"]`.
- `extra_fields["min_global_steps"]` / `["max_global_steps"]`: the weight versions that generated
  the episode (the first turn's earliest, the last turn's latest, as verl's server reports them per
  call). verl's V1 trainer reads both from every output to measure staleness and fails without them.
- Every try is stored in the run's results store (`EpisodeRecorder`) as a `train` row.
- Error outcomes (infra_error, user_sim_error, verifier_error) never become a reward: the episode
  is re-run inside the loop (`max_error_retries`); if every try errors, `run` raises
  `EpisodeErrored`. verl's V1 worker then marks the prompt group `failure` and writes no
  trajectory for this session: the group trains on its remaining episodes, and with
  `trainer.v1.sampler.sync_refill_failed_groups=True` a group left with none is replaced by a
  fresh task. (Returning `reward_score=None` instead would hand the episode to verl's reward
  function, which would score it.) Setup errors the same for every episode (prompt too long,
  a template that rewrites history, a task missing from the task set) raise `ConfigError`.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from tbx.episodes.seeds import rollout_seed
from tbx.errors import ConfigError
from tbx.verl_bridge.episode import TrainingEpisode, WorkerWorld, run_training_episode, world_for
from tbx.verl_bridge.recorder import EpisodeRecorder
from tbx.verl_bridge.token_agent import PromptRenderer, TokenAgent, TokenLimits

logger = logging.getLogger(__name__)


class TbxEpisodeLoop(AgentLoopBase):
    """Runs one tbx episode per trajectory through verl's rollout server."""

    def __init__(self, *args: Any, tbx_config_path: str | None = None, max_error_retries: int = 2,
                 prompt_style: str = "tbx", stop_after_tool_call: bool = True, max_new_tokens: int | None = None,
                 run_dir: str | None = None, run_id: str | None = None, resumed_after_step: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for name, value in (("tbx_config_path", tbx_config_path), ("run_dir", run_dir), ("run_id", run_id)):
            if not value:
                raise ConfigError("agent loop config", name, "is not set",
                                  "write the agent loop YAML with tbx.verl_bridge.data.write_bridge_files")
        self.tbx_config_path, self.max_error_retries = str(tbx_config_path), max_error_retries
        self.run_dir, self.run_id = str(run_dir), str(run_id)
        self.prompt_style, self.stop_after_tool_call = prompt_style, stop_after_tool_call
        self.max_new_tokens = max_new_tokens
        self.resumed_after_step = int(resumed_after_step)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        world = world_for(self.tbx_config_path)
        task_id = (kwargs.get("extra_info") or {}).get("task_id")
        if not task_id:
            raise ConfigError("verl dataset row", "extra_info.task_id", "is missing",
                              "write the rows with tbx.verl_bridge.data.pool_rows")
        style = self.prompt_style
        renderer = PromptRenderer(self.tokenizer, style, world.cfg.model.few_shot,  # type: ignore[arg-type]
                                  world.cfg.model.tool_format, world.cfg.model.chat_template_kwargs)
        limits = TokenLimits(prompt=int(self.rollout_config.prompt_length),
                             response=int(self.rollout_config.response_length),
                             new_tokens=self.max_new_tokens or world.cfg.model.max_new_tokens)

        def make_agent() -> TokenAgent:  # a fresh agent (and sticky request id) per try
            return TokenAgent(self.server_manager.generate, renderer, limits, uuid.uuid4().hex, sampling_params,
                              self.stop_after_tool_call)

        uid = str(kwargs.get("uid", f"{kwargs.get('index', 0)}-{uuid.uuid4().hex}"))
        session = int(kwargs.get("session_id", 0))
        recorder = self._recorder(world)
        step = int(kwargs.get("global_steps", 1)) - 1
        recorder.discard_interrupted(str(task_id), step, rollout_seed(uid, session, 0))  # a re-issued session
        stored = recorder.claim_slot(str(task_id), step, session)
        try:
            episode = await run_training_episode(world, str(task_id), make_agent, uid=uid, attempt=session,
                                                 max_error_retries=self.max_error_retries, stored_attempt=stored,
                                                 on_try=lambda result: recorder.record(result, stored))
        except Exception:
            recorder.release(str(task_id), stored)  # nothing if its last try was stored already
            logger.exception("tbx episode of task %s failed; verl marks its group as failed", task_id)
            raise
        return episode_output(episode)

    def _recorder(self, world: WorkerWorld) -> EpisodeRecorder:
        """This process's store writer for the run (one per process, as the world)."""
        key = (self.run_dir, self.run_id, self.resumed_after_step)
        if key not in _RECORDERS:
            _RECORDERS[key] = EpisodeRecorder.open(world.cfg, self.run_dir, self.run_id,
                                                   int(self.rollout_config.n), self.max_error_retries,
                                                   self.resumed_after_step)
        return _RECORDERS[key]


_RECORDERS: dict[tuple[str, str, int], EpisodeRecorder] = {}


def episode_output(episode: TrainingEpisode) -> AgentLoopOutput:
    """The verl record of a finished training episode (success or failure only)."""
    trace, result = episode.trace, episode.result
    return AgentLoopOutput(
        prompt_ids=list(trace.prompt_ids),
        response_ids=list(trace.response_ids),
        response_mask=list(trace.response_mask),
        response_logprobs=None if trace.logprobs is None else list(trace.logprobs),
        reward_score=episode.reward,
        num_turns=sum(message.role != "system" for message in result.transcript),
        metrics=AgentLoopMetrics(generate_sequences=trace.generate_seconds,
                                 tool_calls=result.timings.get("tools", 0.0),
                                 compute_score=result.timings.get("grade", 0.0),
                                 num_preempted=trace.num_preempted),
        extra_fields={
            "min_global_steps": trace.min_weight_step,
            "max_global_steps": trace.max_weight_step,
            "reward_extra_info": {"acc": episode.reward, "error_tries": float(len(episode.error_tries)),
                                  "context_limit": float(trace.exhausted)},
            "tbx": {"task_id": result.task_id, "outcome": result.outcome.value, "cause": result.cause[:500],
                    "ended_by": episode.ended_by, "seed": result.seed, "counts": dict(result.counts),
                    "error_outcomes": [r.outcome.value for r in episode.error_tries],
                    "usage": {role: usage.to_dict() for role, usage in result.usage.items()}},
        },
    )
