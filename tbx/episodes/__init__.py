"""Episodes: the agent ↔ tools ↔ user loop, ending in a typed outcome and a grade."""

from tbx.episodes.record import ERROR_OUTCOMES, EpisodeResult, Outcome
from tbx.episodes.run import run_episode

__all__ = ["ERROR_OUTCOMES", "EpisodeResult", "Outcome", "run_episode"]
