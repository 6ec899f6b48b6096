"""The attempts a serve run still owes, handed to client sessions one at a time.

Sessions get the pending attempts in a fixed order: attempt 0 of every task (in the task set's
order), then attempt 1, and so on, so a run stopped early has covered tasks evenly. A claim is this
process's: it is not in the results store until the episode's result is. An attempt goes back to
the front of the queue when its session ends before the episode started (a client that only listed
the tools), or when its result is an error with retries left (a re-run keeps the attempt's seed, as
in stage=eval). `done` is set once every attempt is final.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable

from tbx.episodes.record import EpisodeResult
from tbx.serve.episode import ServedEpisode

Key = tuple[str, int]  # (task id, attempt)


class Campaign:
    def __init__(self, pending: Iterable[Key], open_episode: Callable[[str, int, Callable], ServedEpisode],
                 store: Callable[[EpisodeResult], bool]):
        """`open_episode(task_id, attempt, record)` builds the episode of a claim; `store(result)` keeps
        a result and says whether its attempt is now final."""
        self._pending: deque[Key] = deque(pending)
        self._open, self._store = open_episode, store
        self.in_flight: dict[Key, ServedEpisode] = {}
        self.episodes: list[ServedEpisode] = []  # every episode handed out, for shutdown
        self.done = asyncio.Event()
        self._check_done()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def claim(self) -> ServedEpisode | None:
        """The next pending attempt's episode, or None when every attempt is final or in flight."""
        if not self._pending:
            return None
        key = self._pending.popleft()
        episode = self._open(key[0], key[1], self._recorded)
        self.in_flight[key] = episode
        self.episodes.append(episode)
        return episode

    def session_ended(self, episode: ServedEpisode) -> None:
        """The episode's client session is over; the attempt goes back if nothing was played."""
        if not episode.leave():
            self._release(episode)

    def _recorded(self, episode: ServedEpisode, result: EpisodeResult | None) -> None:
        if result is None:  # ended without a stored result
            self._release(episode)
            return
        final = self._store(result)
        self._release(episode, requeue=not final)

    def _release(self, episode: ServedEpisode, requeue: bool = True) -> None:
        key = (episode.task_id, episode.attempt)
        if self.in_flight.get(key) is episode:
            del self.in_flight[key]
            if requeue:
                self._pending.appendleft(key)
        self._check_done()

    def _check_done(self) -> None:
        if not self._pending and not self.in_flight:
            self.done.set()

    async def aclose(self) -> None:
        """Cancel the episodes still running (a stopped server): their attempts stay unrecorded and
        run again when the same command resumes."""
        running = [e.task for e in self.episodes if e.task is not None and not e.task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
