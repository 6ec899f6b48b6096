"""Helpers for the tbx.envs tests: the same tasks evaluated by stage=eval, and the reference solution or
the do-nothing agent played through an adapter's calls.

The adapters' own tests carry the `envs` marker and skip when their library is absent (it lives in
.venv-envs, scripts/setup_envs.sh); the shared core's tests (test_episodes.py) run in every venv.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tbx.policies.reference import DONE
from tbx.records import EpisodeResult, StoredTry
from tbx.serve.episode import USER_ENDED
from tbx.store.results import read_records
from tbx.tasks.model import Task

SAMPLE = ("tasks=travel", "tasks.per_family=1")  # one task of each of the travel domain's 9 families


def overrides(tmp_path: Path, *more: str) -> list[str]:
    return [f"out_root={tmp_path}/outputs", f"backend.workdir={tmp_path}/db", *more]


def eval_records(tmp_path: Path, policy: str, *tasks: str) -> dict[str, StoredTry]:
    """stage=eval of `tasks` with `policy` (oracle | null_agent), in process: each task's stored attempt 0."""
    from tbx.config.checks import compose_config, config_object
    from tbx.envs.episodes import CONF
    from tbx.launch import run_stage

    words = ["stage=eval", "logger=none", f"policy={policy}", *overrides(tmp_path / policy), *tasks]
    dict_cfg, error = compose_config(CONF, "config", words)
    assert error is None, error
    summary = run_stage(config_object(dict_cfg))
    return {r.task_id: r for r in read_records(summary.run_dir) if r.attempt == 0}


def play_reference(task: Task, call: Callable[[str, dict], str], reply: Callable[[str], str]) -> str | None:
    """The reference solution a step a call; the final message to deliver at the rollout's end, or None
    when the user ended the conversation on the way."""
    for step in task.reference:
        answer = call(step.tool, dict(step.arguments)) if step.tool is not None else reply(step.say or "")
        if answer.endswith(USER_ENDED):
            return None
    return DONE


def same_verdict(result: EpisodeResult, record: StoredTry) -> None:
    """An adapter's episode has the verdict stage=eval stored for the same task and attempt (as stored)."""
    played, stored = result.to_dict(), record.to_dict()
    assert [played[k] for k in ("outcome", "reward", "grade")] == [stored[k] for k in ("outcome", "reward", "grade")]
    if record.ended_by == "user_stop":  # the same conversation, message for message
        assert played["transcript"] == stored["transcript"]
