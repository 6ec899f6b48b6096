"""Episodes: the agent ↔ tools ↔ user loop, ending in a typed outcome and a grade."""

from tbx.episodes.run import run_episode
from tbx.records import ERROR_OUTCOMES, EpisodeResult, Outcome

__all__ = ["ERROR_OUTCOMES", "EpisodeResult", "Outcome", "run_episode"]
