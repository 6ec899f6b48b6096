"""Append-only JSONL log of episode results: the run folder's record, read back to resume.

Each line is written and flushed whole, so a killed run leaves complete lines only (a torn last
line is ignored on reading and the episode runs again). An attempt is final when it reached a
verdict or used up its error retries.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from tbx.episodes.record import ERROR_OUTCOMES, EpisodeResult

ERROR_VALUES = {o.value for o in ERROR_OUTCOMES}


class EpisodeLog:
    def __init__(self, path: Path):
        self.path = path
        self.records: list[dict[str, Any]] = []
        if path.exists():
            text = path.read_text()
            if text and not text.endswith("\n"):  # torn by a kill: cut it so the next line starts clean
                text = text[: text.rfind("\n") + 1]
                path.write_text(text)
            for line in text.splitlines():
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line torn by a kill: that try runs again
        self._tries: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for record in self.records:
            self._tries[(record["task_id"], record["attempt"])].append(record)

    def tries(self, task_id: str, attempt: int) -> int:
        return len(self._tries[(task_id, attempt)])

    def is_final(self, task_id: str, attempt: int, max_error_retries: int) -> bool:
        tries = self._tries[(task_id, attempt)]
        if not tries:
            return False
        return tries[-1]["outcome"] not in ERROR_VALUES or len(tries) > max_error_retries

    def append(self, result: EpisodeResult) -> None:
        record = result.to_dict()
        record["try"] = self.tries(result.task_id, result.attempt)
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.records.append(record)
        self._tries[(result.task_id, result.attempt)].append(record)

    def final_records(self) -> list[dict[str, Any]]:
        """The last try of every attempt, in task/attempt order."""
        return [tries[-1] for _, tries in sorted(self._tries.items())]

    def error_tries(self) -> int:
        return sum(1 for r in self.records if r["outcome"] in ERROR_VALUES)


