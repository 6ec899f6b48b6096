"""The shared core of tbx.envs (no consumer library needed): a task set composed as on the command line,
episodes played by calls with stage=eval's seeds and verdicts, stored like any run so stage=report compares
them with tbx's own, a bad override stopped with the command line's one-line error."""

import pytest

from tbx.envs.episodes import TaskSet
from tbx.errors import ConfigError
from tests.envs import eval_records, overrides, play_reference, same_verdict


@pytest.mark.slow
def test_episodes_played_by_calls_are_stage_eval_s_and_stage_report_compares_the_runs(tmp_path):
    from tbx.config.checks import compose_config, config_object
    from tbx.envs.episodes import CONF
    from tbx.launch import run_stage

    oracle = eval_records(tmp_path, "oracle", "tasks=mock")
    with TaskSet.load("my_trainer", *overrides(tmp_path), "tasks=mock") as tasks:
        for task_id in tasks.task_ids:
            episode = tasks.open(task_id)
            final = play_reference(tasks.task(task_id), lambda n, a, e=episode: e.call_tool(n, a).text,
                                   lambda text, e=episode: e.reply(text).text)
            same_verdict(episode.finish(final), oracle[task_id])
        mine = tasks.run_dir
    assert mine.name.startswith("serve-mock-my_trainer-")
    oracle_run = next((tmp_path / "oracle" / "outputs").glob("eval-mock-*"))
    words = ["stage=report", "logger=none", f"out_root={tmp_path}/outputs", "report.names=[oracle,my_trainer]",
             f"runs=[{oracle_run},{mine}]"]
    dict_cfg, error = compose_config(CONF, "config", words)
    assert error is None, error
    report = run_stage(config_object(dict_cfg))
    text = open(report.markdown).read()
    assert "my_trainer" in text and "oracle" in text


def test_a_bad_override_is_the_command_line_s_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="tasks"):
        TaskSet.load("x", *overrides(tmp_path), "tasks=no_such_task_set")
