"""How long an episode may go on: one record, built once from the config and carried by the episode world
every caller of `run_episode` passes (evaluation, probing, validation, serving, `tbx.envs` and both trainers), so a
training episode is bounded exactly as an evaluated one. Nothing defaults to "no limit": `max_turns`
None means the task's own turn limit, and `turn_timeout_s` None (`eval.turn_timeout_s=null`) leaves
the agent's turns to the episode's own deadline."""

from __future__ import annotations

from dataclasses import dataclass

from tbx.config import Config


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int | None  # caps every task's own turn limit; None: the task's own
    turn_timeout_s: float | None  # the agent's turn (past it: `turn_timeout`, graded); None: the episode's deadline
    call_timeout_s: float  # a tool call, DB connection, clone, state dump, user reply or judge call (-> error outcome)
    episode_timeout_s: float  # the conversation: the tool session and every turn (-> infra_error)


def episode_limits(cfg: Config) -> EpisodeLimits:
    """The limits of every episode a run plays (the `eval` group; tbx/config/episodes.py documents each)."""
    e = cfg.eval
    return EpisodeLimits(max_turns=e.max_turns, turn_timeout_s=e.turn_timeout_s, call_timeout_s=e.call_timeout_s,
                         episode_timeout_s=e.episode_timeout_s)
