"""Training checkpoints that resume exactly: model (or LoRA adapter) weights, optimizer, the
group sampler's position, every random generator, and the step.

A checkpoint is written to a temporary folder and renamed into place, so a kill mid-write
leaves the previous checkpoint intact; its file, the folder entries and the `latest.json` pointer
are flushed to the disk (fsync) before each rename, so a machine crash cannot leave a pointer to a
checkpoint whose data never reached the disk.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tbx.process.durable import fsync_path, prune_step_folders

LATEST = "latest.json"


# Our own few lines, not accelerate's `save_accelerator_state`: that writes a file set of its own per process
# for an Accelerator's prepared models, where a tbx checkpoint is one state.pt renamed into place.
def rng_state() -> dict[str, Any]:
    """Every generator the run draws from: Python's, numpy's, torch's CPU one and each CUDA device's."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`; CUDA's when the checkpoint has it and this process has CUDA."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    extra: dict[str, Any], keep: int | None = None) -> Path:
    """Write checkpoint `step` under `folder`, point `latest.json` at it, then delete all but the newest `keep`
    checkpoints (None: keep every one)."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step_{step:05d}"
    partial = folder / f".step_{step:05d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    trainable = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    torch.save({"step": step, "trainable": trainable, "optimizer": optimizer.state_dict(), "rng": rng_state(),
                "extra": extra}, partial / "state.pt")
    fsync_path(partial / "state.pt")
    fsync_path(partial)
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    fsync_path(folder)
    pointer = folder / f"{LATEST}.partial"
    pointer.write_text(json.dumps({"step": step, "path": final.name}))
    fsync_path(pointer)
    pointer.replace(folder / LATEST)
    fsync_path(folder)
    if keep is not None:  # only after the pointer has moved, so a kill mid-delete leaves the run resumable
        prune_step_folders(folder, step, keep)
    return final


def latest_checkpoint(folder: Path) -> Path | None:
    pointer = folder / LATEST
    if not pointer.is_file():
        return None
    path = folder / json.loads(pointer.read_text())["path"]
    return path if (path / "state.pt").is_file() else None


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, dict]:
    """Restore weights, optimizer and random generators; return (step, extra)."""
    state = torch.load(path / "state.pt", weights_only=False)
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state["trainable"].items():
            parameters[name].copy_(value)
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    return state["step"], state["extra"]
