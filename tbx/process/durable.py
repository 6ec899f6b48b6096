"""Run files written whole or not at all, and a full or read-only disk reported as one line.

A run folder is what a later run resumes from and what reports read, so a file in it is never
half written: `write_text` writes a temporary sibling, flushes it to the disk (fsync), and renames
it over the target (atomic on POSIX), then syncs the folder so the rename itself survives a crash.
A kill or a full disk leaves the previous version in place. `publish_folder` does the same for a
folder (the trained model). `fsync_path` is for writers that must keep their own calls (the
checkpoint code, whose kill tests hook `Path.write_text`).

A write that the disk refuses (full, read-only, no permission) raises `ConfigError` naming the
file, `out_root` and the fix, so launch.py prints one line and exits 2 instead of a traceback.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

from tbx.errors import ConfigError

# The errors a user fixes by freeing space or pointing the run elsewhere; any other OSError is a bug.
DISK_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
               errno.EPERM: "not permitted", errno.EFBIG: "the file is larger than allowed"}


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def unwritable(path: str | Path, exc: OSError, field: str = "out_root") -> ConfigError:
    """The one-line error for a write the disk refused."""
    why = DISK_ERRNOS.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    fix = ("free space on that disk, or give out_root=DIR on another disk, and run the same command again"
           if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else
           "give out_root=DIR (or run_dir=DIR) on a writable disk")
    return ConfigError(str(path), field, f"cannot be written ({why})", fix)


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str, field: str = "out_root") -> None:
    """Replace `path` by `text` atomically and durably; the disk's refusal becomes a `ConfigError`."""
    write_bytes(path, text.encode("utf-8"), field)


def write_bytes(path: str | Path, data: bytes, field: str = "out_root") -> None:
    """Replace `path` by `data` atomically and durably (as write_text)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
        fsync_path(path.parent)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        if is_disk_error(exc):
            raise unwritable(path, exc, field) from None
        raise


def publish_folder(partial: Path, final: Path) -> Path:
    """Move a finished folder into place: its files synced, the old one replaced only once the new one
    is whole (a kill in between leaves `final` as it was, or absent, never half written)."""
    try:
        for item in sorted(partial.rglob("*")):
            if item.is_file():
                fsync_path(item)
        fsync_path(partial)
        retired = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.old")
        if final.exists():
            final.rename(retired)
        partial.rename(final)
        fsync_path(final.parent)
        shutil.rmtree(retired, ignore_errors=True)
    except OSError as exc:
        if is_disk_error(exc):
            raise unwritable(final, exc) from None
        raise
    return final


def check_folder_path(folder: Path, field: str) -> None:
    """Refuse a folder setting that names a file, or a path below one (no folder can be made there), by
    `stat` alone: nothing is made or written."""
    taken = next((part for part in (folder, *folder.parents) if part.exists() and not part.is_dir()), None)
    if taken is not None:
        below = "" if taken == folder else f" (the setting names {folder}, below it)"
        raise ConfigError(str(taken), field, f"is a file, not a folder{below}", f"give {field}=DIR (a folder, or "
                          "a path where one can be made), or move that file away")


def check_writable(folder: Path, field: str = "out_root", probe_bytes: int = 65536) -> None:
    """Make `folder`, then write, sync and remove a small file in it: a full or read-only disk is found
    before anything writes there (Hydra makes its own run folder under out_root before tbx runs)."""
    probe = folder / f".tbx-write-check-{os.getpid()}"
    check_folder_path(folder, field)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as handle:
            handle.write(b"\0" * probe_bytes)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if is_disk_error(exc):
            raise unwritable(folder, exc, field) from None
        raise
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:  # a read-only folder had no probe to remove
            pass


def ensure_folder(path: Path, field: str = "out_root") -> Path:
    """`mkdir -p`, with the disk's refusal as a `ConfigError`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_disk_error(exc):
            raise unwritable(path, exc, field) from None
        raise
    return path


def prune_step_folders(folder: Path, step: int, keep: int) -> None:
    """Delete the `step_<n>` folders under `folder` but the newest `keep` with n <= `step`. Folders of later
    steps are a killed run's, which a resumed run replays: they go too."""
    found = {int(path.name.removeprefix("step_")): path for path in folder.glob("step_*") if path.is_dir()}
    kept = set(sorted(n for n in found if n <= step)[-keep:])
    for n, path in sorted(found.items()):
        if n not in kept:
            shutil.rmtree(path, ignore_errors=True)
