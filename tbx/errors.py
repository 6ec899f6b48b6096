"""The error taxonomy.

An agent's mistake is a *failure* (reward 0). Everything below is not the agent's fault and is
accounted separately: never scored 0, never a success, and left out of every rate's denominator, so
an outage cannot pass for a weak agent (docs/guarantees.md, "How an episode ends").
"""

from __future__ import annotations

# Exit statuses of launch.py (docs/guarantees.md): 0 done; 1 a bug (a traceback); 2 bad input or an
# environment to fix (one line: file, field, fix; nothing of an earlier run changed); 3 the run ended
# but no attempt reached a verdict (every one errored): its summary is written, pass@1 is undefined;
# 4 a training run ended without a single model update (every group zero-variance): no trained model;
# 5 a service failed for good while the run was going (after its own retries: a model server, the backend,
# verl's trainer, a Ray cluster): one line, what finished is stored, the same command resumes once the
# service is back (a scheduler may retry on 5 and not on 2);
# 130 interrupted by Ctrl-C (SIGINT) or a campaign worker killed by a signal (the out-of-memory killer), one
# line, what finished is stored, the same command resumes.
EXIT_INPUT = 2
EXIT_NO_VERDICT = 3
EXIT_NO_UPDATE = 4
EXIT_INFRA = 5
EXIT_INTERRUPTED = 130


class TbxError(Exception):
    """Base of tbx's own errors."""


class InfraError(TbxError):
    """Backend, tool server or model endpoint failed (episode outcome `infra_error`)."""


class UserSimError(TbxError):
    """The simulated user failed or broke its contract (episode outcome `user_sim_error`)."""


class VerifierError(TbxError):
    """The grader or judge could not decide (episode outcome `verifier_error`)."""


class AgentFault(TbxError):
    """The agent's own turn ended the conversation: its conversation outgrew the model's context window,
    the endpoint refused a request the agent's messages made, the provider's filter refused it, or
    the turn ran past `eval.turn_timeout_s`, or the consumer's rollout ended (`tbx.envs`: a trainer's
    conversation ended without the user ending it, e.g. its token budget ran out). Not an error of the harness: the conversation stops like
    at the turn limit and the terminal state is graded (a failure unless the work was already done).
    `reason` is the episode's `ended_by`; see `docs/guarantees.md` for every way an episode ends."""

    REASONS = ("context_overflow", "request_refused", "content_filter", "turn_timeout", "rollout_end")

    def __init__(self, reason: str, detail: str):
        if reason not in self.REASONS:
            raise ValueError(f"unknown reason {reason!r}; one of {self.REASONS}")
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


class AgentLeft(TbxError):
    """The agent under test ended its session before the user ended the conversation (an agent served
    over MCP whose client closed or vanished). Not an error: the episode's outcome is `abandoned`,
    counted as a failure (docs/serve.md says why)."""


class RunInterrupted(TbxError):
    """The run was stopped from outside before it ended (a campaign worker killed by a signal: what the
    kernel's out-of-memory killer does). Nothing stored is lost: launch.py prints one line and exits with
    EXIT_INTERRUPTED, as after Ctrl-C, and the same command resumes the run."""


class InputError(TbxError, ValueError):
    """Bad user input: names the file, the field and the fix."""

    def __init__(self, source: str, field: str, problem: str, fix: str):
        self.source, self.field, self.problem, self.fix = source, field, problem, fix
        super().__init__(f"{source}: field '{field}': {problem}. Fix: {fix}")


class TaskFormatError(InputError):
    """A task file (or generated task) does not follow the task format."""


class ConfigError(InputError):
    """A configuration value is wrong or inconsistent."""


class ServiceStopped(InputError):
    """A service failed for good while the run was going (an InfraError outside any episode): one line in
    an InputError's shape, but exit status EXIT_INFRA, since nothing in the input needs changing."""


def exit_status(error: InputError) -> int:
    """launch.py's exit status for a one-line error: EXIT_INFRA for a failed service, else EXIT_INPUT."""
    return EXIT_INFRA if isinstance(error, ServiceStopped) else EXIT_INPUT
