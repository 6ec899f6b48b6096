"""A pool manifest as stage=select writes it, of synthetic travel tasks, for the bridge's planning tests."""

from __future__ import annotations

from tbx.records import PoolManifest, PoolTask


def manifest(finetune: str = "full", kept: int = 100) -> PoolManifest:
    ids = [f"travel/fam{i % 7}/{i}" for i in range(kept)]
    return PoolManifest(hash="0123456789abcdef", pool={"name": f"{finetune}_pool", "finetune": finetune},
                        kept=tuple(ids), tasks=tuple(PoolTask(t, "travel", t.split("/")[1], band="medium", kept=True)
                                                     for t in ids))
