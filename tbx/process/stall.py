"""A bound on how long a long-running child may go without progress.

A trainer can wait forever on something that died under it (verl's weight sync on a vLLM server that
Ray's memory monitor killed: docs/training.md). `StallWatch` watches such a run from a thread of its
own: a `probe` is read every `poll_s` seconds, and a changed value is progress (e.g. the number of stored
episodes).
When nothing moved for `limit_s` seconds it calls `on_stall` once and records that it did (`stalled`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


class StallWatch:
    def __init__(self, limit_s: float, on_stall: Callable[[], object], probe: Callable[[], object] = lambda: None,
                 poll_s: float | None = None):
        self.limit_s, self.on_stall, self.probe = limit_s, on_stall, probe
        self.poll_s = poll_s if poll_s is not None else min(30.0, limit_s / 4)
        self.stalled, self._warned = False, False
        self._last = time.monotonic()
        self._seen = self._read()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tbx-stall-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            seen = self._read()
            if seen != self._seen:
                self._seen, self._last = seen, time.monotonic()
            elif time.monotonic() - self._last >= self.limit_s:
                self.stalled = True
                self.on_stall()
                return

    def _read(self) -> object:
        try:
            return self.probe()
        except Exception as exc:  # a probe that fails (a store briefly unreachable, say) shows no progress
            if not self._warned:
                self._warned = True
                print(f"tbx: the progress check failed ({type(exc).__name__}: {exc}); until it works again, "
                      f"the run counts as making no progress", file=sys.stderr, flush=True)
            return getattr(self, "_seen", None)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
