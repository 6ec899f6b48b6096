"""Kill and resume: eval, probe and training runs SIGKILLed at random points (20 kills, plus two
inside checkpoint writes) and run again until they finish match an uninterrupted run of the same
config: the same stored tries (task, attempt, try, outcome, reward), so nothing is lost or run
twice; a store that passes SQLite's integrity check; for training, every step's checkpoint
(weights, AdamW state, sampler position, torch and numpy RNG) and loss bit for bit. The harness is
`tests/hardening/kill_harness.py`; `benchmarks/kill_resume.py` runs more kills.
"""

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.hardening.kill_harness import (
    COIN,
    checkpoint_states,
    clean_and_killed,
    compare_attempts,
    compare_checkpoints,
    eval_case,
    forkserver_context,
    integrity,
    losses,
    probe_case,
    stop_forkserver,
    stored_rows,
    train_case,
)


# --- tests ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def context():
    ctx = forkserver_context()
    yield ctx
    stop_forkserver()


def check_attempts(root: Path, stage: str) -> dict[str, int]:
    """The killed run's store holds exactly the uninterrupted run's tries, verdicts included."""
    clean, killed = stored_rows(root / f"{stage}-clean"), stored_rows(root / f"{stage}-killed")
    figures = compare_attempts(clean, killed)
    assert clean, "the uninterrupted run stored nothing"
    assert set(Counter(r[:2] for r in clean).values()) == {1}  # no error outcomes here: one try per attempt
    assert figures["lost"] == figures["duplicated"] == figures["verdicts_differ"] == 0, figures
    assert killed == clean
    assert integrity(root / f"{stage}-killed") == "ok"
    return figures


def test_eval_killed_at_random_points_stores_what_an_uninterrupted_run_stores(context, tmp_path):
    log = clean_and_killed(context, eval_case(kills=7), tmp_path, seed=1)
    check_attempts(tmp_path, "eval")
    assert log.kills == 7 and log.in_work >= 3, log
    clean, killed = (json.loads((tmp_path / f"eval-{k}" / "summary.json").read_text()) for k in ("clean", "killed"))
    keys = ("pass_at_1", "pass_at_k", "observed_all", "counts", "episodes")
    assert {k: clean[k] for k in keys} == {k: killed[k] for k in keys}


def test_adaptive_probe_killed_at_random_points_stops_each_task_where_an_uninterrupted_run_does(context, tmp_path):
    log = clean_and_killed(context, probe_case(kills=7), tmp_path, seed=2)
    check_attempts(tmp_path, "probe")
    assert log.kills == 7 and log.in_work >= 3, log
    clean, killed = (json.loads((tmp_path / f"probe-{k}" / "probe.json").read_text()) for k in ("clean", "killed"))
    assert clean["tasks"] == killed["tasks"] and clean["rounds"] == killed["rounds"]


@pytest.mark.vllm
def test_training_killed_at_random_points_takes_the_identical_next_steps(context, tmp_path, tiny_vllm):
    log = clean_and_killed(context, train_case(tmp_path, kills=6, steps=6, server=tiny_vllm), tmp_path, seed=3)
    check_attempts(tmp_path, "train")
    assert log.kills == 6 and log.checkpoint_kills == 2 and log.in_work >= 3, log
    figures = compare_checkpoints(checkpoint_states(tmp_path / "train-clean"),
                                  checkpoint_states(tmp_path / "train-killed"))
    assert figures == {"steps_compared": 6, "steps_differing": 0, "max_weight_difference": 0.0}
    clean_losses = losses(tmp_path / "train-clean")
    assert clean_losses == losses(tmp_path / "train-killed")
    assert sum(loss is not None for loss in clean_losses) >= 3  # real updates, not empty steps


@pytest.mark.vllm
def test_asynchronous_training_killed_at_random_points_stores_each_try_once_and_resumes_every_step(
        context, tmp_path, tiny_vllm):
    """grpo.max_staleness=1: kills land in updates while the next step's groups are playing. Which weights sample
    a turn then depends on timing, so verdicts may differ from the uninterrupted run's; what may not differ is
    which tries exist (no replacement groups and no error re-runs here, so the draws do not depend on verdicts):
    each stored once, none lost, and the run ends with every step trained in order. That a step played ahead is
    replayed with the same tries after a resume is tests/rl/test_async.py's."""
    case = train_case(tmp_path, 4, 4, tiny_vllm, "grpo.max_staleness=1", "grpo.max_replacements=0",
                      "grpo.max_error_reruns=0")
    log = clean_and_killed(context, case, tmp_path, seed=4)
    assert log.kills == 4 and log.checkpoint_kills == 2, log
    clean, killed = (stored_rows(tmp_path / f"train-{k}") for k in ("clean", "killed"))
    keys = [row[:3] for row in killed]
    assert sorted(keys) == sorted(row[:3] for row in clean) and len(set(keys)) == len(keys)
    assert integrity(tmp_path / "train-killed") == "ok"
    clean_history, killed_history = (json.loads((tmp_path / f"train-{k}" / "train.json").read_text())["history"]
                                     for k in ("clean", "killed"))
    for history in (clean_history, killed_history):
        assert [h["train/step"] for h in history] == [1, 2, 3, 4]
        assert all(h.get("train/stale_turns_dropped", 0.0) == 0.0 for h in history)
        assert all("train/staleness_mean" in h for h in history)  # the asynchronous loop trained every step
    # (whether a turn of the tiny model is sampled before the update it overlaps is a matter of milliseconds;
    # tests/rl/test_async.py makes the overlap certain)


def test_a_probe_resumed_mid_round_makes_the_decisions_of_an_uninterrupted_one(tmp_path):
    """The store a kill leaves while the last attempt of each task's last round is still running:
    the resumed probe must not decide at that in-between n (it once stopped such tasks one short)."""
    from tests.helpers.stage import make_cfg, run

    args = ("stage=probe", "tasks=travel", "tasks.limit=12", *COIN, "probe.attempts=10")
    run(make_cfg(tmp_path, *args, f"run_dir={tmp_path / 'clean'}"))
    rows = stored_rows(tmp_path / "clean")
    last: dict[str, int] = {}
    for task, attempt, *_ in rows:
        last[task] = max(attempt, last.get(task, -1))
    cut = {task: attempt for task, attempt in last.items() if attempt >= 5}  # past the first round (n=4)
    (tmp_path / "killed").mkdir()
    source, target = (sqlite3.connect(p / "results.sqlite") for p in (tmp_path / "clean", tmp_path / "killed"))
    source.backup(target)
    target.executemany("DELETE FROM attempts WHERE task_id = ? AND attempt = ?", list(cut.items()))
    target.commit()
    source.close(), target.close()
    run(make_cfg(tmp_path, *args, f"run_dir={tmp_path / 'killed'}"))
    assert len(cut) >= 3 and stored_rows(tmp_path / "killed") == rows
