"""The group sampler with a fake episode runner: outcomes are a table of (task, attempt) -> reward."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tbx.errors import ConfigError
from tbx.rl.sampler import GroupSampler, StepBatch

ERROR = None  # an error outcome: backend, simulated user or verifier failed


@dataclass(frozen=True)
class FakeOutcome:
    task_id: str
    attempt: int
    reward: float | None


def mixed(attempt: int) -> float:
    """Alternating 1, 0, 1, 0, ...: every group of 2+ has variance."""
    return float(attempt % 2 == 0)


class FakeRunner:
    """Looks rewards up in `table[task](attempt)`; records every call and the peak concurrency."""

    def __init__(self, table: dict[str, Callable[[int], float | None]],
                 delay: Callable[[str, int], float] = lambda task, attempt: 0.0):
        self.table, self.delay = table, delay
        self.calls: list[tuple[str, int]] = []
        self.running = self.peak = 0

    async def __call__(self, task_id: str, attempt: int) -> FakeOutcome:
        self.calls.append((task_id, attempt))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.delay(task_id, attempt))
        finally:
            self.running -= 1
        return FakeOutcome(task_id, attempt, self.table.get(task_id, mixed)(attempt))


def make_sampler(pool, group_size=4, groups_per_step=2, seed=0, max_replacements=3, max_error_reruns=2,
                 **kwargs) -> GroupSampler:
    return GroupSampler(pool, group_size, groups_per_step, np.random.default_rng(seed), max_replacements,
                        max_error_reruns, **kwargs)


def step(sampler: GroupSampler, runner: FakeRunner) -> StepBatch:
    """One step, failing (not hanging) if a loop in the sampler were unbounded."""
    return asyncio.run(asyncio.wait_for(sampler.sample_step(runner), timeout=10))


def summary(batch: StepBatch) -> list[tuple[str, list[int], list[float]]]:
    return [(g.task_id, [e.attempt for e in g.episodes], list(g.rewards)) for g in batch.groups]


POOL = [f"t{i}" for i in range(5)]


def test_plain_step_fills_groups_from_distinct_tasks():
    sampler, runner = make_sampler(POOL), FakeRunner({})
    batch = step(sampler, runner)
    assert len(batch.groups) == 2 and len({g.task_id for g in batch.groups}) == 2
    for group in batch.groups:  # attempts 0..3 in slot order, rewards 1, 0, 1, 0
        assert [e.attempt for e in group.episodes] == [0, 1, 2, 3]
        assert group.rewards == (1.0, 0.0, 1.0, 0.0)
    s = batch.stats
    assert (s.tasks_drawn, s.groups_filled, s.episodes_run, s.missing_groups) == (2, 2, 8, 0)
    assert (s.zero_variance_groups, s.error_episodes, s.dropped_groups) == (0, 0, 0)
    assert batch.discarded == ()


def test_epochs_draw_without_replacement_and_reshuffle():
    sampler = make_sampler(POOL, seed=1)
    draws = [sampler.draw_task() for _ in range(15)]
    epochs = [draws[0:5], draws[5:10], draws[10:15]]
    assert all(sorted(e) == POOL for e in epochs)  # each epoch is a permutation of the pool
    assert len({tuple(e) for e in epochs}) > 1  # and the order changes between epochs
    assert sampler.epoch == 3


def test_zero_variance_groups_are_replaced_by_fresh_tasks():
    # The pool order decides which tasks are drawn; make the first two drawn tasks zero-variance.
    order = [t for t in _peek_order(POOL, seed=0)]
    table = {order[0]: lambda a: 1.0, order[1]: lambda a: 0.0}  # all solved / all failed
    sampler = make_sampler(POOL, seed=0)
    batch = step(sampler, FakeRunner(table))
    assert [g.task_id for g in batch.groups] == [order[2], order[3]]
    s = batch.stats
    assert (s.tasks_drawn, s.zero_variance_groups, s.replaced_zero_variance, s.groups_filled) == (4, 2, 2, 4)
    assert s.zero_variance_rate == pytest.approx(0.5)  # 2 of 4 filled groups
    assert s.missing_groups == 0 and s.episodes_run == 16
    # The zero-variance groups' 8 episodes were run and must be billable.
    assert sorted({e.task_id for e in batch.discarded}) == sorted(order[:2]) and len(batch.discarded) == 8


def test_replacement_budget_bounds_an_all_easy_pool():
    sampler = make_sampler(POOL, groups_per_step=2, max_replacements=3)
    runner = FakeRunner({t: (lambda a: 1.0) for t in POOL})
    batch = step(sampler, runner)
    s = batch.stats
    assert batch.groups == () and s.missing_groups == 2
    # 2 tasks + 3 replacements drawn, all zero-variance
    assert (s.tasks_drawn, s.zero_variance_groups, s.replaced_zero_variance) == (5, 5, 3)
    assert s.zero_variance_rate == 1.0 and len(runner.calls) == 20


def test_error_episodes_are_rerun_with_their_own_attempt_index():
    # t0's attempt 1 errors; slot 1 re-runs as attempt 1 + 4 = 5, which succeeds (reward 0 as 5 is odd).
    table = {t: (lambda a: ERROR if a == 1 else mixed(a)) for t in POOL}
    sampler = make_sampler(POOL, groups_per_step=1)
    batch = step(sampler, FakeRunner(table))
    (group,) = batch.groups
    assert [e.attempt for e in group.episodes] == [0, 5, 2, 3]
    assert group.rewards == (1.0, 0.0, 1.0, 0.0)
    s = batch.stats
    assert (s.error_episodes, s.error_reruns, s.dropped_groups, s.episodes_run) == (1, 1, 0, 5)
    assert [(e.attempt, e.reward) for e in batch.discarded] == [(1, None)]  # the error's cost is counted


def test_slot_reruns_until_the_group_budget_is_spent():
    # Slot 0 errors on attempts 0 and 4, succeeds on 8: two re-runs, within max_error_reruns=2.
    table = {t: (lambda a: ERROR if a in (0, 4) else mixed(a)) for t in POOL}
    batch = step(make_sampler(POOL, groups_per_step=1, max_error_reruns=2), FakeRunner(table))
    assert [e.attempt for e in batch.groups[0].episodes] == [8, 1, 2, 3]
    assert batch.stats.error_reruns == 2


def test_unfillable_group_is_dropped_never_trained_partially(caplog):
    order = _peek_order(POOL, seed=0)
    table = {order[0]: lambda a: ERROR if a % 4 == 0 else mixed(a)}  # slot 0 never succeeds
    sampler = make_sampler(POOL, groups_per_step=1, max_error_reruns=2)
    runner = FakeRunner(table)
    with caplog.at_level(logging.WARNING, logger="tbx.rl.sampler"):
        batch = step(sampler, runner)
    assert [g.task_id for g in batch.groups] == [order[1]]  # the replacement task
    s = batch.stats
    assert (s.dropped_groups, s.replaced_dropped, s.error_reruns, s.error_episodes) == (1, 1, 2, 3)
    assert all(len(g.episodes) == 4 for g in batch.groups)
    assert sum(1 for t, _ in runner.calls if t == order[0] and _ % 4 == 0) == 3  # attempts 0, 4, 8 only
    assert any("dropped group" in r.message and order[0] in r.message for r in caplog.records)
    # Every finished episode of the dropped group is billable: 3 errors + its finished scored ones.
    assert len(batch.discarded) == s.episodes_run - 4


def test_bounded_loops_terminate_when_everything_errors():
    runner = FakeRunner({t: (lambda a: ERROR) for t in POOL})
    sampler = make_sampler(POOL, group_size=3, groups_per_step=2, max_replacements=4, max_error_reruns=1)
    batch = step(sampler, runner)
    s = batch.stats
    assert batch.groups == () and s.missing_groups == 2
    assert (s.tasks_drawn, s.dropped_groups, s.replaced_dropped) == (6, 6, 4)
    assert s.error_reruns == 6  # one re-run per group, never more
    assert s.groups_filled == 0 and s.zero_variance_rate == 0.0


def test_zero_budgets_give_a_short_step_without_retries():
    table = {t: (lambda a: ERROR if a == 0 else mixed(a)) for t in POOL}
    sampler = make_sampler(POOL, groups_per_step=2, max_replacements=0, max_error_reruns=0)
    batch = step(sampler, FakeRunner(table))
    assert batch.groups == () and batch.stats.tasks_drawn == 2 and batch.stats.error_reruns == 0


def test_resume_gives_the_identical_next_draws():
    table = {"t1": lambda a: 1.0, "t3": lambda a: ERROR if a == 2 else mixed(a)}
    first = make_sampler(POOL, groups_per_step=2, seed=7)
    for _ in range(3):  # a replacement and a partly used epoch make the saved position non-trivial
        step(first, FakeRunner(table))
    saved = json.loads(json.dumps(first.state_dict()))  # must survive a JSON round trip
    expected = [summary(step(first, FakeRunner(table))) for _ in range(3)]
    resumed = make_sampler(POOL, groups_per_step=2, seed=12345)  # a different seed: state must override it
    resumed.load_state_dict(saved)
    assert [summary(step(resumed, FakeRunner(table))) for _ in range(3)] == expected
    assert resumed.state_dict() == first.state_dict()


def test_resume_rejects_another_pool():
    saved = make_sampler(POOL).state_dict()
    with pytest.raises(ConfigError, match="pool_task_ids"):
        make_sampler(POOL[:4]).load_state_dict(saved)


def test_result_does_not_depend_on_finishing_order():
    table = {"t0": lambda a: ERROR if a in (1, 6) else mixed(a), "t2": lambda a: 1.0,
             "t4": lambda a: ERROR if a % 4 == 3 else mixed(a)}
    # Opposite finishing orders, across tasks and across attempts within a task.
    fast_first = FakeRunner(table, delay=lambda task, attempt: 0.001 * attempt + 0.004 * int(task[1:]))
    slow_first = FakeRunner(table,
                            delay=lambda task, attempt: 0.001 * (20 - attempt) + 0.004 * (9 - int(task[1:])))
    a = step(make_sampler(POOL, groups_per_step=3, seed=3), fast_first)
    b = step(make_sampler(POOL, groups_per_step=3, seed=3), slow_first)
    assert summary(a) == summary(b)
    # With no replacements the groups come back in draw order, whichever finishes first.
    for delay in (fast_first.delay, slow_first.delay):
        batch = step(make_sampler(POOL, groups_per_step=3, seed=3), FakeRunner({}, delay=delay))
        assert [g.task_id for g in batch.groups] == _peek_order(POOL, seed=3)[:3]
    assert (a.stats.tasks_drawn, a.stats.dropped_groups, a.stats.zero_variance_groups) == \
           (b.stats.tasks_drawn, b.stats.dropped_groups, b.stats.zero_variance_groups)


def test_concurrency_limit_is_respected():
    runner = FakeRunner({}, delay=lambda task, attempt: 0.005)
    step(make_sampler(POOL, groups_per_step=3, max_concurrent_episodes=5), runner)
    assert runner.peak == 5
    unlimited = FakeRunner({}, delay=lambda task, attempt: 0.005)
    step(make_sampler(POOL, groups_per_step=3), unlimited)
    assert unlimited.peak == 12  # all 3 x 4 episodes at once


def test_runner_exception_propagates_as_itself():
    async def broken(task_id: str, attempt: int) -> FakeOutcome:
        if attempt == 2:
            raise RuntimeError("bug in the episode loop")
        return FakeOutcome(task_id, attempt, 1.0)

    with pytest.raises(RuntimeError, match="bug in the episode loop"):
        asyncio.run(make_sampler(POOL).sample_step(broken))


def test_non_finite_reward_is_rejected():
    with pytest.raises(ValueError, match="not finite"):
        step(make_sampler(POOL), FakeRunner({t: (lambda a: float("nan")) for t in POOL}))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pool": []}, "pool_task_ids"), ({"pool": ["a", "a"]}, "pool_task_ids"),
    ({"group_size": 1}, "group_size"), ({"groups_per_step": 0}, "groups_per_step"),
    ({"max_replacements": -1}, "max_replacements"), ({"max_error_reruns": -1}, "max_error_reruns"),
    ({"max_concurrent_episodes": 0}, "max_concurrent_episodes"),
])
def test_bad_settings_name_the_field(kwargs, field):
    pool = kwargs.pop("pool", POOL)
    with pytest.raises(ConfigError, match=field):
        make_sampler(pool, **kwargs)


def _peek_order(pool: list[str], seed: int) -> list[str]:
    """The first epoch's order for a sampler built with `seed` (drawn from a throwaway twin)."""
    twin = make_sampler(pool, seed=seed)
    return [twin.draw_task() for _ in pool]


def test_a_task_drawn_twice_in_one_step_runs_other_attempts():
    # a one-task pool wraps into the next epoch within the step: both groups are of t0
    sampler, runner = make_sampler(["t0"], group_size=2, groups_per_step=2, max_error_reruns=1), FakeRunner({})
    batch = step(sampler, runner)
    assert [g.task_id for g in batch.groups] == ["t0", "t0"]
    assert len(runner.calls) == len(set(runner.calls)) == 4  # no (task, attempt) ran twice
    assert sorted(e.attempt for g in batch.groups for e in g.episodes) == [0, 1, 4, 5]  # 2nd draw: from 2 * (1 + 1)
