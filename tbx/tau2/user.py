"""τ²'s user simulator, as tbx's LLM user plays it.

τ²'s `UserSimulator` (tau2/user/user_simulator.py) prompts its model with the simulation guidelines
file followed by the task's scenario between `<scenario>` tags, answers the agent's fixed greeting
first, sees the agent's text with the roles flipped (tool traffic hidden), and ends the conversation
when its message holds `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`. tbx's LLM user does the
same from the `Simulation` record made here (tests/tau2/test_user.py compares the two on sample
scenarios). Airline and retail users have no tools, so the guidelines are the no-tools file.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from tbx.tasks.model import Simulation

GREETING = "Hi! How can I help you today?"  # τ²'s DEFAULT_FIRST_AGENT_MESSAGE
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")


@cache
def guidelines() -> str:
    import tau2.utils.utils as tau2_utils

    path = Path(tau2_utils.DATA_DIR) / "tau2" / "user_simulator" / "simulation_guidelines.md"
    return path.read_text(encoding="utf-8")


def user_system_prompt(instructions: str) -> str:
    """τ²'s user system prompt for a scenario's text (its `SYSTEM_PROMPT` template)."""
    return f"{guidelines()}\n\n<scenario>\n{instructions}\n</scenario>".strip()


def simulation_of(record: Any) -> Simulation:
    return Simulation(user_system_prompt(str(record.user_scenario)), GREETING, STOP_TOKENS)
