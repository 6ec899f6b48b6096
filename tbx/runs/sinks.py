"""Where metrics, tables and images go: W&B (offline by default) or nowhere.

One interface with a no-op twin, so stages log without caring whether W&B is on. Keys are
namespaced (`eval/pass_at_1`, `eval/travel/pass_at_1`, `pool/kept`, `train/reward_mean`). Only
this module imports wandb. The API key is read by wandb from its environment or netrc; it never
passes through our config, and `safe_config` drops any key that looks like a secret.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tbx.config import Config, LoggerConfig, plain

SECRET = re.compile(r"(api[_-]?key|token|secret|password)$", re.IGNORECASE)


def safe_config(value: Any) -> Any:
    """The config as plain data with secret-looking values removed (names of env vars are kept)."""
    value = plain(value)
    if isinstance(value, Mapping):
        return {k: ("<redacted>" if SECRET.search(str(k)) else safe_config(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_config(v) for v in value]
    return value


class Sink(ABC):
    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    @abstractmethod
    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...

    @abstractmethod
    def image(self, key: str, path: str | Path) -> None: ...

    @abstractmethod
    def lines(self, key: str, xs: Sequence[float], series: Mapping[str, Sequence[float]], title: str,
              xname: str) -> None:
        """A line plot: one line per name in `series`, all over the same `xs`."""

    @abstractmethod
    def finish(self) -> None: ...


class NullSink(Sink):
    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        pass

    def image(self, key: str, path: str | Path) -> None:
        pass

    def lines(self, key: str, xs: Sequence[float], series: Mapping[str, Sequence[float]], title: str,
              xname: str) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbSink(Sink):
    """A W&B run: `name` and `group` as W&B shows them, `job_type` the stage, `config` the run's settings as
    plain data (secrets already dropped: `safe_config`)."""

    def __init__(self, logger: LoggerConfig, run_dir: Path, name: str, group: str, job_type: str,
                 config: Mapping[str, Any]):
        import wandb

        self._wandb = wandb
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(project=logger.project, entity=logger.entity or None, mode=str(logger.mode),
                              dir=str(run_dir), name=name, group=group, config=dict(config), job_type=job_type,
                              reinit="finish_previous")

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.run.log(dict(metrics), step=step)

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.run.log({key: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def image(self, key: str, path: str | Path) -> None:
        self.run.log({key: self._wandb.Image(str(path))})

    def lines(self, key: str, xs: Sequence[float], series: Mapping[str, Sequence[float]], title: str,
              xname: str) -> None:
        chart = self._wandb.plot.line_series(xs=list(xs), ys=[list(v) for v in series.values()], keys=list(series),
                                             title=title, xname=xname)
        self.run.log({key: chart})

    def finish(self) -> None:
        self.run.finish()


def open_sink(logger: LoggerConfig, run_dir: Path, name: str, group: str, job_type: str,
              config: Mapping[str, Any]) -> Sink:
    """The sink `logger` names (its kind is an enumeration of the schema: wandb or none)."""
    if logger.kind == "wandb":
        return WandbSink(logger, run_dir, name, group, job_type, config)
    return NullSink()


@contextmanager
def stage_sink(cfg: Config, run_dir: Path) -> Iterator[Sink]:
    """The run's sink, named like its folder, grouped by `logger.group` (by default its identity); finished in
    every case."""
    from tbx.runs.identity import run_identity, run_name

    group = cfg.logger.group or run_identity(cfg)
    sink = open_sink(cfg.logger, run_dir, run_name(cfg), group, cfg.stage.name, safe_config(cfg))
    try:
        yield sink
    finally:
        sink.finish()
