"""Simulated users: they hold the private facts the agent must ask for."""

from tbx.users.base import UserSession, UserSimulator, UserTurn

__all__ = ["UserSession", "UserSimulator", "UserTurn"]
