"""Playing a campaign's attempts in one process: claim each in the results store, play it until it is
final (error outcomes re-run up to `eval.max_error_retries` times with the attempt's own seed), store
every try under the claim.

An attempt whose every try ended in an error is played again by a later command, a round of
1 + `eval.max_error_retries` tries each, for at most `eval.resume_error_retries` more rounds
(`try_limit`): an infrastructure failure that has passed does not leave the run short for good, and one
that has not passed costs a bounded number of tries.

`eval.concurrency` consumers take attempts from a source in order; one held by another process (a
worker of this campaign never holds another's: the source hands each attempt to one of them) is set
aside and looked at again once the source is empty, so every attempt is played by one process and
gets one verdict, however many processes run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from tbx.campaign.components import build_policy, episode_cost
from tbx.config import Config
from tbx.episodes import EpisodeWorld, run_episode
from tbx.episodes.seeds import try_seeds
from tbx.runs.identity import record_engine
from tbx.store import ResultStore
from tbx.store.claims import Claim, ClaimLost, describe_owner
from tbx.tools.mcp_server import ToolSessions

CLAIM_POLL_S = 1.0  # how often an attempt held by another process is looked at again

Attempt = tuple[str, int]  # (task id, attempt index)


class HeldNotice:
    """Says once per campaign that another process plays some of this run's attempts."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, owner: str) -> None:
        if not self.said and owner:
            self.said = True
            print(f"note: another process ({describe_owner(owner)}) is playing attempts of this run; this one "
                  "plays the others, then waits for those (nothing runs twice)", file=sys.stderr)


def try_limit(tries: int, max_error_retries: int, resume_error_retries: int) -> int:
    """How many tries an attempt whose `tries` stored tries all ended in errors may have once this command is
    done with it: the rest of its round of 1 + max_error_retries tries (a killed command's round is finished)
    or a new round, and never more than 1 + resume_error_retries rounds in all.

    max_error_retries=2, resume_error_retries=1: 0 tries -> 3; 2 (a killed round) -> 3; 3 -> 6; 6 -> 6 (done).
    """
    per_round = 1 + max_error_retries
    return min(per_round * (1 + resume_error_retries), (tries // per_round + 1) * per_round)


def round_retries(cfg: Config, tries: int) -> int:
    """The re-runs (as `is_final` counts them) an attempt with `tries` stored tries may reach in this command."""
    return try_limit(tries, cfg.eval.max_error_retries, cfg.eval.resume_error_retries) - 1


def final_retries(cfg: Config) -> int:
    """The re-runs (as `is_final` counts them) after which an attempt left in error is final for good."""
    return (1 + cfg.eval.max_error_retries) * (1 + cfg.eval.resume_error_retries) - 1


def pending_attempts(cfg: Config, log: ResultStore, attempts: dict[str, range]) -> list[Attempt]:
    """Every (task, attempt) of `attempts` that is not final in `log` for this command, task by task: not
    played, cut short, or left in error by an earlier command with a round of re-runs still allowed (an
    attempt this command left in error waits for the next command)."""
    return [(task_id, a) for task_id, indices in attempts.items() for a in indices
            if not log.is_final(task_id, a, round_retries(cfg, log.tries_at_open(task_id, a)))]


def say_replayed(cfg: Config, log: ResultStore, pending: list[Attempt]) -> None:
    """One line when this command plays attempts again that an earlier one left in error."""
    again = sum(1 for task_id, a in pending if log.tries(task_id, a) and log.tries(task_id, a) % (
        1 + cfg.eval.max_error_retries) == 0)
    if again:
        print(f"note: playing again {again} attempt(s) whose tries all ended in errors: up to "
              f"{1 + cfg.eval.max_error_retries} more tries each (eval.resume_error_retries="
              f"{cfg.eval.resume_error_retries} bounds how many runs of this command do so)", file=sys.stderr)


async def play_attempts(cfg: Config, world: EpisodeWorld, log: ResultStore,  # noqa: C901 (the play/attempt/consume closures share the campaign state)
                        take: Callable[[], Attempt | None], done: Callable[[], None],
                        run_dir: Path | None = None, retried: Callable[[], None] = lambda: None) -> None:
    """Play the attempts `take` hands out (None: no more) in `world`, `eval.concurrency` at once, with MCP
    sessions kept across its episodes; call `done` after each and `retried` before each error try played
    again. Records what served the policy in `run_dir`'s run.json (when given). The world's connections are
    closed at the end (in this event loop)."""
    policy = build_policy(cfg)
    if run_dir is not None:
        record_engine(run_dir, policy.engine())
    world = dataclasses.replace(world, sessions=ToolSessions())
    notice, waiting, final = HeldNotice(), deque(), final_retries(cfg)

    async def play(task_id: str, index: int) -> None:
        retries = round_retries(cfg, log.tries(task_id, index))  # this command's round (the claim read the tries)
        while not log.is_final(task_id, index, retries):
            if log.tries(task_id, index):
                retried()
            seed, fault_seed = try_seeds(cfg.seed, task_id, index, log.tries(task_id, index))
            result = await run_episode(world, task_id, policy, index, seed, fault_seed=fault_seed)
            log.append(result, episode_cost(cfg, result.usage), retries)

    async def attempt(task_id: str, index: int) -> bool:
        """Play the attempt if this process can claim it; False while another live process holds it."""
        state, owner = log.claim(task_id, index, final)
        if state is Claim.HELD:
            notice(owner)
            return False
        if state is Claim.OURS:
            try:
                await play(task_id, index)
            except ClaimLost as lost:  # taken over while this process looked gone: its result is dropped
                print(f"note: {lost}", file=sys.stderr)
            finally:
                log.release(task_id, index)
        return True

    async def consume() -> None:
        while True:
            item = take()
            if item is None:
                if not waiting:
                    return
                item = waiting.popleft()
                await asyncio.sleep(CLAIM_POLL_S)
            if await attempt(*item):
                done()
            else:
                waiting.append(item)

    try:
        await asyncio.gather(*(consume() for _ in range(cfg.eval.concurrency)))
    finally:
        await world.aclose()
        await policy.aclose()
