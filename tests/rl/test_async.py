"""Asynchronous GRPO (grpo.max_staleness): settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tbx.errors import ConfigError
from tbx.rl.staleness import BusyClock, fresh_turns, turn_staleness, version_step
from tests.launch import compose_cfg


@pytest.mark.parametrize("value", [-1])
def test_a_bad_max_staleness_names_the_file_the_field_and_the_fix(value):
    with pytest.raises(ConfigError) as error:
        compose_cfg("stage=train", f"grpo.max_staleness={value}")
    assert (error.value.source, error.value.field) == ("conf/grpo", "grpo.max_staleness")
    assert "grpo.max_staleness=0" in error.value.fix or "give 0" in error.value.fix
    assert compose_cfg("stage=train").grpo.max_staleness == 0


# --- staleness: hand-worked -------------------------------------------------------------------------
@dataclass(frozen=True)
class T:
    name: str
    weight_versions: tuple[str, ...]


def test_a_version_label_names_its_step_and_the_base_model_is_step_zero():
    assert version_step("run-3:step_12") == 12
    assert version_step("smollm2_135m@3f2a") == 0
    assert version_step("reloading:run-3:step_4") == 4


def test_a_turn_two_versions_old_is_dropped_at_staleness_one_and_counted():
    """The trainer holds step 5. Turns by step 5 (age 0) and step 4 (age 1) are trained; a turn by step 3 is
    two versions old: dropped, and an episode left with no turn is counted as dropped too."""
    episodes = [[T("a", ("r:step_5",)), T("b", ("r:step_4",))],
                [T("c", ("r:step_3",))],
                [T("d", ("r:step_4", "r:step_5")), T("e", ("r:step_3",)), T("f", ())]]
    kept, stats = fresh_turns(episodes, current_step=5, max_staleness=1)
    assert [[t.name for t in turns] for turns in kept] == [["a", "b"], [], ["d", "f"]]
    assert stats.turns_by_staleness == {0: 2, 1: 2}  # "d" is as old as its oldest weights; "f" is unlabelled
    assert (stats.dropped_turns, stats.dropped_episodes) == (2, 1)
    assert stats.as_metrics() == {"staleness/0": 2.0, "staleness/1": 2.0, "staleness_mean": 0.5,
                                  "stale_turns_dropped": 2.0, "stale_episodes_dropped": 1.0}
    assert fresh_turns(episodes, current_step=5, max_staleness=2)[1].dropped_turns == 0
    assert turn_staleness(T("x", ("r:step_3",)), 5) == 2


def test_the_busy_clock_counts_overlapping_work_once_and_clips_to_a_window():
    now = [0.0]
    clock = BusyClock(clock=lambda: now[0])
    clock.start()          # t=0: one episode
    now[0] = 1.0
    clock.start()          # t=1: a second one overlaps
    now[0] = 3.0
    clock.stop()
    now[0] = 4.0
    clock.stop()           # busy 0..4
    now[0] = 6.0
    clock.start()          # busy again from 6, still open
    assert clock.busy_between(0.0, 10.0) == 8.0
    assert clock.busy_between(2.0, 7.0) == 3.0
