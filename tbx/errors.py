"""The error taxonomy.

An agent's mistake is a *failure* (reward 0). Everything below is not the agent's fault and is
accounted separately: never scored 0, never a success (see SPEC §1, peer-benchmarks §5.4).
"""

from __future__ import annotations


class TbxError(Exception):
    """Base of tbx's own errors."""


class InfraError(TbxError):
    """Backend, tool server or model endpoint failed (episode outcome `infra_error`)."""


class UserSimError(TbxError):
    """The simulated user failed or broke its contract (episode outcome `user_sim_error`)."""


class VerifierError(TbxError):
    """The grader or judge could not decide (episode outcome `verifier_error`)."""


class AgentLeft(TbxError):
    """The agent under test ended its session before the user ended the conversation (an agent served
    over MCP whose client closed or vanished). Not an error: the episode's outcome is `abandoned`,
    counted as a failure (docs/serve.md says why)."""


class InputError(TbxError, ValueError):
    """Bad user input: names the file, the field and the fix."""

    def __init__(self, source: str, field: str, problem: str, fix: str):
        self.source, self.field, self.problem, self.fix = source, field, problem, fix
        super().__init__(f"{source}: field '{field}': {problem}. Fix: {fix}")


class TaskFormatError(InputError):
    """A task file (or generated task) does not follow the task format."""


class ConfigError(InputError):
    """A configuration value is wrong or inconsistent."""
