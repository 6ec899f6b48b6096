"""Run files are replaced whole or not at all, and synced to the disk (tbx/process/durable.py, tbx/rl/checkpoint.py).

A write that fails half way (here: past a file-size limit set on the process, as a disk that fills) leaves
the previous file byte for byte and no temporary file; a write that succeeds is flushed and its
folder synced before anyone can read the new name."""

import errno
import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tbx.errors import ConfigError
from tbx.process.durable import check_writable, publish_folder, write_text


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes fail (EFBIG) in this process, as on a disk that runs full mid-file."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the error, not the signal that kills
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_write_the_disk_refuses_keeps_the_old_file_and_leaves_no_partial(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_text(path, "old\n" * 1000)
    with file_size_limit(100_000), pytest.raises(ConfigError) as error:
        write_text(path, "new\n" * 100_000)  # 400 KB
    assert (error.value.source, error.value.field) == (str(path), "out_root") and "larger than allowed" in str(error.value)
    assert path.read_text() == "old\n" * 1000 and sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]


def test_a_write_is_synced_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_text(tmp_path / "summary.json", "{}")
    assert events == ["fsync", "replace", "fsync"]  # the file, the rename, the folder


def test_a_published_folder_replaces_the_old_one_whole(tmp_path):
    final, partial = tmp_path / "final_model", tmp_path / ".final_model.partial"
    final.mkdir()
    (final / "weights").write_text("old")
    partial.mkdir()
    (partial / "weights").write_text("new")
    assert publish_folder(partial, final) == final
    assert (final / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["final_model"]


def test_checkpoints_are_synced_before_the_pointer_moves(tmp_path, monkeypatch):
    import torch

    from tbx.rl.checkpoint import latest_checkpoint, save_checkpoint

    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                  real_fsync(fd))[1])
    model = torch.nn.Linear(2, 1)
    save_checkpoint(tmp_path, 3, model, torch.optim.AdamW(model.parameters()), {"sampler": {}})
    names = [Path(p).name for p in synced]
    assert names[:2] == ["state.pt", ".step_00003.partial"] and "latest.json.partial" in names
    assert names.index("latest.json.partial") > names.index(tmp_path.name)  # the folder, after the rename
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00003"


def test_check_writable_names_a_read_only_folder(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ConfigError, match="cannot be written \\(the file system is read-only\\)"):
        check_writable(tmp_path / "out")


def test_pruning_keeps_the_newest_step_folders_up_to_the_step(tmp_path):
    """Checkpoints (`step_00003`) and served weights (`step_3`) are pruned alike: the newest `keep` up to the
    step stay, a killed run's later steps go, and other entries are left."""
    from tbx.process.durable import prune_step_folders

    for name in ("step_00001", "step_00002", "step_00003", "step_00005", ".step_00004.partial"):
        (tmp_path / "ckpt" / name).mkdir(parents=True)
    prune_step_folders(tmp_path / "ckpt", 3, 2)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [".step_00004.partial", "step_00002", "step_00003"]
    for name in ("step_1", "step_2", "step_10"):
        (tmp_path / "weights" / name).mkdir(parents=True)
    prune_step_folders(tmp_path / "weights", 10, 2)
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step_10", "step_2"]
