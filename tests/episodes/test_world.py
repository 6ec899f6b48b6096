"""The episode world: one record every caller of `run_episode` passes, its faults checked when it is built, and
the seeds of every episode derived in one module (their values are part of stored runs, so they are pinned)."""

from __future__ import annotations

import inspect

import pytest

from tbx.config import FaultsConfig
from tbx.episodes import EpisodeWorld, run_episode
from tbx.episodes.seeds import episode_seed, rollout_seed, training_seed, try_seeds, verl_fault_seed
from tbx.errors import ConfigError
from tbx.users.scripted import ScriptedUser
from tests.helpers.episodes import LIMITS


def test_seeds_keep_the_values_stored_runs_hold():
    # sha256("0|mock/transfer/5|0|0")[:4] little-endian, and so on: the values the derivations gave when they
    # lived in tbx/campaign/attempts.py and tbx/verl_bridge/episode.py
    assert episode_seed(0, "mock/transfer/5", 0, 0) == 4293463885
    assert episode_seed(7, "mock/transfer/5", 2, 1) == 3622989953
    assert try_seeds(7, "mock/transfer/5", 2, 1) == (episode_seed(7, "mock/transfer/5", 2, 0), 3622989953)
    assert training_seed(0, "mock/transfer/5", 3, 1) == 1453919965  # "mock/transfer/5@step3", attempt 1
    assert rollout_seed("uid-1", 3, 0) == 3446199685
    assert verl_fault_seed("mock/transfer/5", 12, 1) == 2280701455  # "mock/transfer/5@12|0|1"


def test_bad_faults_stop_the_world_being_built():
    with pytest.raises(ConfigError, match=r"conf/faults/chaos.yaml: field 'faults.user': is 1.5"):
        EpisodeWorld(backend=None, runtimes={}, user=ScriptedUser(), judge=None, limits=LIMITS,
                     faults=FaultsConfig(name="chaos", user=1.5))


def test_run_episode_takes_the_world_not_its_pieces():
    parameters = list(inspect.signature(run_episode).parameters)
    assert parameters == ["world", "task_or_runtime", "policy", "attempt", "seed", "fault_seed"]
