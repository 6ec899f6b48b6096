"""Asynchronous GRPO (grpo.max_staleness): settings."""

from __future__ import annotations

import pytest

from tbx.errors import ConfigError
from tests.launch import compose_cfg


@pytest.mark.parametrize("value", [-1])
def test_a_bad_max_staleness_names_the_file_the_field_and_the_fix(value):
    with pytest.raises(ConfigError) as error:
        compose_cfg("stage=train", f"grpo.max_staleness={value}")
    assert (error.value.source, error.value.field) == ("conf/grpo", "grpo.max_staleness")
    assert "grpo.max_staleness=0" in error.value.fix or "give 0" in error.value.fix
    assert compose_cfg("stage=train").grpo.max_staleness == 0


def test_max_staleness_above_0_is_taken_by_verl_and_refused_by_the_native_trainer():
    assert compose_cfg("stage=train", "grpo.trainer=verl", "grpo.max_staleness=1").grpo.max_staleness == 1
    with pytest.raises(ConfigError) as error:  # the native trainer's asynchronous mode is not built yet
        compose_cfg("stage=train", "grpo.max_staleness=1")
    assert error.value.field == "grpo.max_staleness" and "grpo.max_staleness=0" in error.value.fix
