"""Episodes: the agent ↔ tools ↔ user loop in its world, ending in a typed outcome and a grade."""

from tbx.episodes.limits import EpisodeLimits, episode_limits
from tbx.episodes.run import run_episode
from tbx.episodes.world import EpisodeWorld
from tbx.records import ERROR_OUTCOMES, EpisodeResult, Outcome

__all__ = ["ERROR_OUTCOMES", "EpisodeLimits", "EpisodeResult", "EpisodeWorld", "Outcome", "episode_limits",
           "run_episode"]
