"""Simulated users: they hold the private facts the agent must ask for."""

from tbx.traits import declare
from tbx.users.base import UserSession, UserSimulator, UserTurn
from tbx.users.llm import LLMUser
from tbx.users.scripted import ScriptedUser

# The bundled users' traits (tbx/traits.py), declared here rather than in their class bodies: their files
# are part of every run's identity (tbx/runs/identity.py CODE_PARTS), and a trait changes no verdict.
declare(ScriptedUser, is_scripted=True)
declare(LLMUser, needs_llm=True)

__all__ = ["UserSession", "UserSimulator", "UserTurn"]
