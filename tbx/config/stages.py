"""The stage to run, and the settings that belong to one stage only: report, regrade, serve, serve_model, view."""

from __future__ import annotations

from dataclasses import dataclass, field

from tbx.config.choices import Transport
from tbx.config.markers import CONTENT_PATH, NOT_IDENTITY


@dataclass
class StageConfig:
    name: str = "eval"  # a stage of tbx/runs/stages.py: eval, serve, serve_model, regrade, validate, probe, ...


@dataclass
class ReportConfig:
    names: list[str] = field(default_factory=list)  # labels of the runs (default: their policy/model names)
    allow_incomplete: bool = False  # report although a task has fewer judged attempts than asked
    resamples: int = 2000  # bootstrap resamples for the confidence intervals


@dataclass
class RegradeConfig:
    # the run folder whose stored episodes are graded again
    run_dir: str | None = field(default=None, metadata=CONTENT_PATH)


@dataclass
class ServeConfig:
    """stage=serve: episodes served over MCP to an agent outside tbx (tbx/serve/, docs/serve.md). Each client
    session plays one episode of the next (task, attempt) not yet recorded; results go to the run's store."""

    # Names the served agent in the run's identity and folder (serve-<tasks>-<agent_name>-<hash>): two agents
    # served under one name would share a run and resume each other's results, so it has no default.
    agent_name: str | None = None
    # http (streamable HTTP at http://host:port/mcp, a session per episode) | stdio (one)
    transport: Transport = field(default=Transport.http, metadata=NOT_IDENTITY)
    host: str = field(default="127.0.0.1", metadata=NOT_IDENTITY)  # bind address; any other than loopback needs token_env
    port: int = field(default=8765, metadata=NOT_IDENTITY)  # 0: any free port (the URL is printed)
    # environment variable holding the bearer token clients must send (never the token)
    token_env: str | None = field(default=None, metadata=NOT_IDENTITY)
    # A session with no request in flight for this long is over (a killed client); its episode, if started, is
    # recorded as abandoned. An open GET stream (the SDK clients keep one) counts as a request in flight.
    idle_timeout_s: float = field(default=300.0, metadata=NOT_IDENTITY)


@dataclass
class ServeModelConfig:
    """stage=serve_model: start the `model` group's vLLM once and keep it (tbx/vllm/kept.py, docs/models.md);
    later commands whose server would be started with the same flags attach to it."""

    port: int = 0  # 0: any free port (the URL is printed and recorded)
    stop: bool = False  # stop the kept servers instead (every one recorded in model.server.kept_dir)


@dataclass
class ViewConfig:
    """stage=view: the run and episode viewer over `runs` (tbx/view/, docs/evaluation.md)."""

    host: str = "127.0.0.1"  # bind address; any other than loopback needs token_env
    port: int = 8777  # 0: any free port (the URL is printed)
    # environment variable holding the token a browser must send (?token=..., then a cookie) or a client
    # ('Authorization: Bearer <token>'); never the token itself
    token_env: str | None = None
    export: str | None = None  # write the pages as static HTML into this folder instead of serving them
    page_size: int = 50  # attempts per page
