"""Backends: one isolated SQL database per episode, cloned from a per-task template."""

from tbx.backend.base import Backend, EpisodeDatabase
from tbx.backend.factory import make_backend
from tbx.backend.state import State, dump_state, state_hash

__all__ = ["Backend", "EpisodeDatabase", "State", "dump_state", "make_backend", "state_hash"]
