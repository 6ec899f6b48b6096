"""Synthetic results the report, cost and view tests build from: stored tries from an outcome pattern with
token usage (and the prices to cost them), per-task success counts consistent with the published base
model, and a GRPO training history."""

from __future__ import annotations

import math

from tbx.messages import Usage
from tbx.records import StoredTry
from tbx.stats.cost import Prices
from tests.store.records import stored

PRICES = {"tiny": Prices(0.1, 0.2), "big": Prices(3.0, 15.0), "mid": Prices(1.0, 2.0), "sim": Prices(0.5, 1.0)}
OUTCOME = {"S": "success", "F": "failure", "E": "infra_error"}


def make_records(pattern: dict[str, str], agent: tuple[int, int], user: tuple[int, int] = (0, 0)
                 ) -> list[StoredTry]:
    return [stored(task, a, OUTCOME[letter], domain=task.split("/")[0],
                   usage={"agent": Usage(*agent), "user": Usage(*user), "judge": Usage()})
            for task, letters in pattern.items() for a, letter in enumerate(letters)]


def reference_counts() -> list[int]:
    """Per-task success counts consistent with the published base model (docs/evaluation.md).

    507 tasks: 54 never solved, 38 at 20/20, and 415 in 1..19. 54 + 38 + 415 = 507 and
    507 - 54 = 453 tasks solved at least once. The 415 must hold 5,242 - 38 * 20 = 4,482
    successes: the cycle 1, 2, ..., 19 repeated gives 21 * 190 + (1 + ... + 16) = 4,126, and one
    more success for each of the first 356 of them whose count is below 19 gives 4,482.
    """
    middle = [1 + i % 19 for i in range(415)]
    extra = 356
    for i, count in enumerate(middle):
        if extra and count < 19:
            middle[i], extra = count + 1, extra - 1
    counts = [0] * 54 + [20] * 38 + middle
    assert (len(counts), sum(counts), extra) == (507, 5242, 0)
    assert all(1 <= c <= 19 for c in middle)
    return counts


HISTORY = [
    {"train/step": 1, "train/reward_mean": 0.25, "train/pool_pass_at_1_so_far": 0.25,
     "train/sampler/zero_variance_rate": 1.0},  # every group had equal rewards: no update, no loss
    {"train/step": 2, "train/reward_mean": 0.5, "train/pool_pass_at_1_so_far": 0.375, "train/loss": 0.12,
     "train/grad_norm": 1.5, "train/sampler/zero_variance_rate": 0.5, "train/logprob_gap": math.nan},
    {"train/step": 3, "train/reward_mean": 0.75, "train/pool_pass_at_1_so_far": 0.5, "train/loss": -0.03,
     "train/grad_norm": 0.9, "train/sampler/zero_variance_rate": 0.0, "train/logprob_gap": 0.002},
]
