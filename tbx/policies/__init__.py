"""Policies: what plays the agent's side of an episode."""

from tbx.policies.base import Agent, EpisodeContext, Policy

__all__ = ["Agent", "EpisodeContext", "Policy"]
