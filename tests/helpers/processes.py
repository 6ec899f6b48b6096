"""Processes as the tests see them from /proc."""

from __future__ import annotations

from pathlib import Path


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids
