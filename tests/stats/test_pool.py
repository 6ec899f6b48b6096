"""Pool strategies select exactly the bands they should; the band histogram renders."""

from __future__ import annotations

import pytest

from tbx.errors import ConfigError
from tbx.report.band_histogram import plot_band_histogram
from tbx.stats.difficulty import DEFAULT_BAND_NAMES, DEFAULT_EDGES, describe
from tbx.stats.pool import (
    FULL_PARAM,
    LORA,
    PoolStrategy,
    full_param_strategy,
    kept_bands,
    lora_strategy,
    select_pool,
)

# One task per default band (k of 20; bands hand-checked in test_difficulty):
# 0/20 rarely, 2/20 hard, 10/20 medium, 15/20 often (mean 0.74), 20/20 almost always.
TASKS = {"t00": describe(0, 20), "t02": describe(2, 20), "t10": describe(10, 20),
         "t15": describe(15, 20), "t20": describe(20, 20)}


def test_builtin_strategies_keep_the_reference_bands():
    #                        rarely  hard  medium often  almost always
    assert kept_bands(FULL_PARAM, DEFAULT_EDGES) == (False, True, True, True, False)
    assert kept_bands(LORA, DEFAULT_EDGES) == (False, True, True, False, False)
    assert FULL_PARAM.keep_ranges == ((0.08, 0.90),)
    assert LORA.keep_ranges == ((0.08, 0.60),)


def test_full_param_selects_the_middle_three_bands():
    assert [TASKS[t].band for t in sorted(TASKS)] == [0, 1, 2, 3, 4]
    selection = select_pool(TASKS, FULL_PARAM, DEFAULT_EDGES)
    assert selection.strategy == "full_param"
    assert selection.kept == ("t02", "t10", "t15")
    assert selection.dropped == ("t00", "t20")
    assert selection.band_counts == (1, 1, 1, 1, 1)


def test_lora_also_drops_the_often_solved_band():
    selection = select_pool(TASKS, LORA, DEFAULT_EDGES)
    assert selection.kept == ("t02", "t10")
    assert selection.dropped == ("t00", "t15", "t20")


def test_every_task_is_either_kept_or_dropped_and_ids_are_sorted():
    tasks = {f"task-{k:02d}": describe(k, 20) for k in range(20, -1, -1)}
    selection = select_pool(tasks, FULL_PARAM, DEFAULT_EDGES)
    assert list(selection.kept) == sorted(selection.kept)
    assert set(selection.kept) | set(selection.dropped) == set(tasks)
    assert not set(selection.kept) & set(selection.dropped)
    assert sum(selection.band_counts) == 21
    # bands at n=20 by k: 0-1 rarely, 2-5 hard, then medium/often; 19-20 almost always
    assert selection.kept[0] == "task-02" and selection.kept[-1] == "task-18"


def test_empty_pool():
    selection = select_pool({}, FULL_PARAM, DEFAULT_EDGES)
    assert selection.kept == selection.dropped == ()
    assert selection.band_counts == (0, 0, 0, 0, 0)


def test_configurable_ranges():
    assert full_param_strategy(keep=(0.30, 1.0)).keep_ranges == ((0.30, 1.0),)
    assert kept_bands(full_param_strategy(keep=(0.30, 1.0)), DEFAULT_EDGES) == (False, False, True, True, True)
    split = lora_strategy(keep=(0.08, 0.90), also_drop=(0.30, 0.60))
    assert split.keep_ranges == ((0.08, 0.30), (0.60, 0.90))
    assert kept_bands(split, DEFAULT_EDGES) == (False, True, False, True, False)
    assert select_pool(TASKS, split, DEFAULT_EDGES).kept == ("t02", "t15")


def test_strategy_from_config_lists_is_normalised_and_hashable():
    strategy = PoolStrategy("custom", [[0.6, 0.9], [0.08, 0.3]])  # type: ignore[arg-type]
    assert strategy.keep_ranges == ((0.08, 0.3), (0.6, 0.9))
    assert hash(strategy) == hash(PoolStrategy("custom", ((0.08, 0.3), (0.6, 0.9))))


def test_keep_range_end_off_the_band_edges_names_both():
    with pytest.raises(ConfigError, match=r"range end 0\.1 is not a band edge .*0\.08") as error:
        kept_bands(PoolStrategy("bad", ((0.1, 0.9),)), DEFAULT_EDGES)
    assert "pool strategy 'bad'" in str(error.value)


def test_custom_edges_accept_matching_strategies():
    edges = (0.0, 0.1, 0.9, 1.0)
    assert kept_bands(PoolStrategy("mid", ((0.1, 0.9),)), edges) == (False, True, False)
    with pytest.raises(ConfigError, match="not a band edge"):
        kept_bands(FULL_PARAM, edges)


@pytest.mark.parametrize("ranges,message", [
    (((0.6, 0.3),), "low < high"),
    (((0.0, 1.2),), "inside"),
    (((0.08, 0.6), (0.3, 0.9)), "overlap"),
])
def test_bad_keep_ranges_are_rejected(ranges, message):
    with pytest.raises(ConfigError, match=message):
        PoolStrategy("bad", ranges)


def test_difficulty_computed_with_other_edges_is_rejected():
    tasks = {"two-bands": describe(3, 5, (0.0, 0.5, 1.0))}
    with pytest.raises(ValueError, match="task 'two-bands'.*2 bands"):
        select_pool(tasks, FULL_PARAM, DEFAULT_EDGES)


def test_band_histogram_writes_a_png(tmp_path):
    selection = select_pool(TASKS, FULL_PARAM, DEFAULT_EDGES)
    path = plot_band_histogram(TASKS, DEFAULT_EDGES, DEFAULT_BAND_NAMES, selection.kept,
                               tmp_path / "bands.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(ValueError, match="no difficulty record"):
        plot_band_histogram(TASKS, DEFAULT_EDGES, DEFAULT_BAND_NAMES, ["missing"], tmp_path / "x.png")
    with pytest.raises(ConfigError, match="3 names for 5 bands"):
        plot_band_histogram(TASKS, DEFAULT_EDGES, ("a", "b", "c"), [], tmp_path / "y.png")
