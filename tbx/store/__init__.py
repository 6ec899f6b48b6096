"""The results store: one row per attempt (and try), shared by probe, eval and training."""

from tbx.store.results import ResultStore, open_store

__all__ = ["ResultStore", "open_store"]
