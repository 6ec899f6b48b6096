"""The W&B offline-file reader the tests use holds while W&B's writer is still appending: a file cut at
any byte reads as a prefix of its rows, never as an error (CI once read a half-written record)."""

import shutil

import wandb

from tests import wandb_reader


def test_a_file_cut_anywhere_reads_as_a_prefix_of_its_rows(tmp_path):
    run = wandb.init(mode="offline", dir=tmp_path / "whole", project="reader", settings=wandb.Settings(silent=True))
    for step in range(60):
        run.log({"step": step, "text": "x" * (step * 40)})  # rows of growing size cross the 32 KiB blocks
    run.finish()
    wandb_reader.finished(tmp_path / "whole")  # finish() can return before W&B's writer has appended every row
    whole = wandb_reader.history(tmp_path / "whole")
    assert [row["step"] for row in whole] == list(range(60))

    (source,) = (tmp_path / "whole").glob("wandb/offline-run-*/run-*.wandb")
    data = source.read_bytes()
    cut_dir = tmp_path / "cut"
    shutil.copytree(tmp_path / "whole", cut_dir)
    (cut,) = cut_dir.glob("wandb/offline-run-*/run-*.wandb")
    for size in range(0, len(data) + 1, 997):
        cut.write_bytes(data[:size])
        rows = wandb_reader.history(cut_dir)
        assert rows == whole[:len(rows)], size
