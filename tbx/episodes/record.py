"""The episode record: outcome, transcript, accounting, terminal state, version hashes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tbx.backend.state import State
from tbx.messages import Message, Usage


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    INFRA_ERROR = "infra_error"  # backend, tool server or model endpoint failed
    USER_SIM_ERROR = "user_sim_error"  # the simulated user failed or broke its contract
    VERIFIER_ERROR = "verifier_error"  # the grader or judge could not decide
    EXCLUDED = "excluded"  # judge rules but no judge configured: counted, never passed
    ABANDONED = "abandoned"  # a served agent left before the user ended the conversation: reward 0


ERROR_OUTCOMES = frozenset({Outcome.INFRA_ERROR, Outcome.USER_SIM_ERROR, Outcome.VERIFIER_ERROR})


@dataclass(frozen=True)
class EpisodeResult:
    task_id: str
    domain: str
    family: str
    attempt: int
    seed: int
    outcome: Outcome
    cause: str  # why: the failed checks, or the error
    transcript: tuple[Message, ...]
    usage: dict[str, Usage]  # "agent", "user", "judge"
    counts: dict[str, int]  # turns, tool_calls, tool_errors, malformed_calls
    final_delta: State | None  # tables that changed; with the task's initial state, the terminal dump
    grade: dict[str, Any] | None
    hashes: dict[str, str]  # task, tools, grader, initial state
    timings: dict[str, float]  # seconds: clone, loop, grade, total
    ended_by: str = ""  # user_stop | turn_limit | agent_left | an AgentFault reason | error
    # policy and user names; user_end (why a user_stop: completed | cannot_help | patience | user); faults
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float | None:
        """1/0 for a verdict (abandoned is a 0); None for errors and exclusions (never a 0)."""
        if self.outcome is Outcome.SUCCESS:
            return 1.0
        if self.outcome in (Outcome.FAILURE, Outcome.ABANDONED):
            return 0.0
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "domain": self.domain, "family": self.family, "attempt": self.attempt,
            "seed": self.seed, "outcome": self.outcome.value, "reward": self.reward, "cause": self.cause,
            "ended_by": self.ended_by, "transcript": [m.to_dict() for m in self.transcript],
            "usage": {k: u.to_dict() for k, u in self.usage.items()}, "counts": self.counts,
            "final_delta": self.final_delta, "grade": self.grade, "hashes": self.hashes,
            "timings": self.timings, "extra": self.extra,
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EpisodeResult:
        return EpisodeResult(
            task_id=data["task_id"], domain=data["domain"], family=data["family"], attempt=data["attempt"],
            seed=data["seed"], outcome=Outcome(data["outcome"]), cause=data["cause"],
            transcript=tuple(Message.from_dict(m) for m in data["transcript"]),
            usage={k: Usage(**u) for k, u in data["usage"].items()}, counts=data["counts"],
            final_delta=data["final_delta"], grade=data["grade"], hashes=data["hashes"],
            timings=data["timings"], ended_by=data.get("ended_by", ""), extra=data.get("extra", {}),
        )
