"""The attempts a serve run still owes, and each session's seat in it.

Pending attempts are handed out in a fixed order: attempt 0 of every task (in the task set's
order), then attempt 1, and so on, so a run stopped early has covered its tasks evenly.

A session is shown its `View` (the instructions and the tool listing) when it opens: the view of
the first pending attempt. It claims an attempt only with its first episode call (reading the
user's message, a tool call, a reply): the first pending attempt with the view it was shown. So a
client that only lists the tools (an inspector, an IDE probing the server) holds nothing, however
long it keeps its session. A claim is also taken in the results store (`take`), as stage=eval's
processes take theirs, so several serve processes on one run (stdio clients that start one server per
episode, say) never play the same attempt: one another live process holds is passed over for the next
one with the same view, and looked at again (`recheck`, every few seconds while `watch` runs) until
that process has made it final or given it back. An attempt goes back to the front of the queue, its
claim given back, when its episode ends without a result (the server stopped, the store failed) or
with an error with retries left (re-run with the attempt's seed, as in stage=eval). `done` is set once
every attempt is final.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tbx.records import EpisodeResult
from tbx.serve.episode import ServedEpisode

Key = tuple[str, int]  # (task id, attempt)
Take = Callable[[str, int], "bool | None"]  # claim in the store: True ours, False held by another process, None final


@dataclass(frozen=True)
class View:
    """What a session sees before its episode starts."""

    instructions: str  # the task's agent-facing policy (the server's `instructions`)
    tools: tuple[Any, ...]  # the task's domain tools as their MCP listing shows them (mcp.types.Tool)


class Campaign:
    def __init__(self, pending: Iterable[Key], views: Mapping[str, View],
                 open_episode: Callable[[str, int, Callable], ServedEpisode], store: Callable[[EpisodeResult], bool],
                 take: Take | None = None, give_back: Callable[[str, int], None] | None = None):
        """`views`: each task's view; `open_episode(task_id, attempt, record)` builds a claim's episode;
        `store(result)` keeps a result and says whether its attempt is now final; `take(task_id, attempt)`
        claims it in the store and `give_back` returns that claim (without them: this process alone)."""
        self._pending: deque[Key] = deque(pending)
        self._views, self._open, self._store = views, open_episode, store
        self._take: Take = take or (lambda task_id, attempt: True)
        self._give_back = give_back or (lambda task_id, attempt: None)
        self.in_flight: dict[Key, ServedEpisode] = {}  # claimed, until stored or given back
        self.elsewhere: set[Key] = set()  # pending, but last seen held by another process
        self.done = asyncio.Event()
        self._check_done()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def next_view(self) -> View | None:
        """What a session opened now is shown; None when nothing is pending."""
        return self._views[self._pending[0][0]] if self._pending else None

    def claim(self, view: View) -> ServedEpisode | None:
        """The episode of the first pending attempt with `view` that this process can claim; None when
        there is none (attempts other processes made final meanwhile are dropped on the way)."""
        for key in [k for k in self._pending if self._views[k[0]] == view]:
            taken = self._take(*key)
            if taken is False:
                self.elsewhere.add(key)
                continue
            self._pending.remove(key)
            self.elsewhere.discard(key)
            if taken:
                episode = self._open(key[0], key[1], self._recorded)
                self.in_flight[key] = episode
                return episode
        self._check_done()
        return None

    def recheck(self) -> None:
        """Look again at the attempts other processes held: drop those they made final, and hand out
        again those they gave back (or left by dying) to the next session."""
        for key in list(self.elsewhere):
            taken = self._take(*key)
            if taken is False:
                continue
            self.elsewhere.discard(key)
            if taken is None:
                self._pending.remove(key)
            else:
                self._give_back(*key)  # claimed only to look: the next session claims it again
        self._check_done()

    async def watch(self, every_s: float) -> None:
        """`recheck` every `every_s` seconds while attempts are held elsewhere, until `done`."""
        while not self.done.is_set():
            await asyncio.sleep(every_s)
            if self.elsewhere:
                self.recheck()

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
            self._give_back(*key)  # (nothing to do when the stored try made it final: given back with it)
            if requeue:
                self._pending.appendleft(key)
        self._check_done()

    def _check_done(self) -> None:
        if not self._pending and not self.in_flight:
            self.done.set()

    async def aclose(self) -> None:
        """Cancel the episodes still running (a stopped server): their attempts stay unrecorded and
        run again when the same command resumes."""
        running = [e.task for e in self.in_flight.values() if e.task is not None and not e.task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


class Seat:
    """One session's place in the campaign: the view it was shown, and the episode it claims with its
    first episode call."""

    def __init__(self, campaign: Campaign, view: View):
        self.campaign, self.view = campaign, view
        self.episode: ServedEpisode | None = None

    def take(self) -> ServedEpisode | None:
        if self.episode is None:
            self.episode = self.campaign.claim(self.view)
        return self.episode

    def end(self) -> None:
        if self.episode is not None:
            self.campaign.session_ended(self.episode)
