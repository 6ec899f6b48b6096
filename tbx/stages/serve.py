"""stage=serve: evaluate an agent outside tbx, which plays each episode through MCP.

`python launch.py stage=serve tasks=travel serve.agent_name=NAME [eval.attempts=K] [serve.port=P]`
serves http://127.0.0.1:P/mcp; each client session is one episode of the next (task, attempt) not
yet recorded, on its own cloned database (`serve.transport=stdio`: one episode per process, over
stdin/stdout). It is stage=eval with the agent on the other side of MCP: the same episode loop,
store, resume, shards (`eval.shard`), summary and report; the run is named by `serve.agent_name`.
The server exits when every attempt is final and writes the summary. docs/serve.md is the guide,
and says why a session that leaves before the user ended the conversation is a 0 (`abandoned`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tbx.campaign import open_run, write_summary
from tbx.campaign.attempts import CLAIM_POLL_S
from tbx.campaign.components import episode_cost
from tbx.config import Config
from tbx.episodes import EpisodeWorld, run_episode
from tbx.episodes.seeds import try_seeds
from tbx.episodes.state import Runtime
from tbx.errors import ConfigError
from tbx.process.preemption import run_loop
from tbx.records import EpisodeResult
from tbx.runs.identity import record_engine
from tbx.runs.results import EvalResult
from tbx.serve.campaign import Campaign, Seat, View
from tbx.serve.episode import ServedEpisode
from tbx.store import ResultStore
from tbx.store.claims import Claim, ClaimLost


def pending_attempts(task_ids: list[str], attempts: int, is_final: Callable[[str, int], bool]) -> list[tuple[str, int]]:
    """The attempts not yet final, attempt 0 of every task first (a run stopped early covers tasks evenly)."""
    return [(task_id, a) for a in range(attempts) for task_id in task_ids if not is_final(task_id, a)]


async def _views(runtimes: Mapping[str, Runtime]) -> dict[str, View]:
    """Each task's view: its policy and its domain's tool listing (one object per distinct view, so
    sessions are matched to attempts by a cheap comparison)."""
    from tbx.serve.server import domain_tools

    listings: dict[tuple, tuple] = {}
    views: dict[tuple, View] = {}
    by_task = {}
    for task_id, runtime in runtimes.items():
        tools = (runtime.task.domain, tuple(spec.name for spec in runtime.tools))
        if tools not in listings:
            listings[tools] = await domain_tools(runtime.task.domain, runtime.tools)
        if (runtime.task.policy, tools) not in views:
            views[(runtime.task.policy, tools)] = View(runtime.task.policy, listings[tools])
        by_task[task_id] = views[(runtime.task.policy, tools)]
    return by_task


def _campaign(cfg: Config, world: EpisodeWorld, views: dict[str, View], log: ResultStore) -> Campaign:
    """The pending attempts, each played by `run_episode` in `world` with the served agent, stored like
    stage=eval's."""
    retries = cfg.eval.max_error_retries

    def open_episode(task_id: str, attempt: int, record: Callable) -> ServedEpisode:
        seed, fault_seed = try_seeds(cfg.seed, task_id, attempt, log.tries(task_id, attempt))  # as in stage=eval

        def play(agent: ServedEpisode) -> Any:
            return run_episode(world, task_id, agent, attempt, seed, fault_seed=fault_seed)

        return ServedEpisode(task_id, attempt, play, record, name=cfg.serve.agent_name or "served")

    def store(result: EpisodeResult) -> bool:
        try:
            log.append(result, episode_cost(cfg, result.usage), retries)  # a final try gives the claim back
        except ClaimLost as lost:  # taken over while this process looked gone: its owner plays it now
            print(f"note: {lost}", file=sys.stderr)
            return True
        return log.is_final(result.task_id, result.attempt, retries)

    def take(task_id: str, attempt: int) -> bool | None:
        state, _ = log.claim(task_id, attempt, retries)  # reads the attempt's tries again
        return None if state is None else state is Claim.OURS

    pending = pending_attempts(list(world.runtimes), cfg.eval.attempts, lambda t, a: log.is_final(t, a, retries))
    return Campaign(pending, views, open_episode, store, take, log.release)


def _token(cfg: Config) -> str | None:
    variable = cfg.serve.token_env
    if not variable:
        return None
    token = os.environ.get(variable, "")
    if not token:
        raise ConfigError("conf/stage/serve.yaml", "serve.token_env", f"names {variable}, which is not set",
                          f"export {variable}=<token>")
    return token


async def serve_campaign(cfg: Config, world: EpisodeWorld, log: ResultStore, run_dir: Path) -> None:
    """Serve every pending attempt in `world` over the configured transport; return when all are final (http)
    or when the one session has ended (stdio)."""
    from tbx.serve.http import serve_http

    record_engine(run_dir, {"name": "mcp", "agent": cfg.serve.agent_name, "transport": cfg.serve.transport})
    campaign = _campaign(cfg, world, await _views(world.runtimes), log)
    try:
        if campaign.done.is_set():
            print(f"serve: every attempt of {run_dir} is recorded; nothing to serve", file=sys.stderr)
        elif cfg.serve.transport == "stdio":
            await _serve_stdio(campaign)
        else:
            def announce(url: str) -> None:
                print(f"serve {cfg.tasks.name} to {cfg.serve.agent_name}: {campaign.pending} attempt(s) at {url} "
                      f"-> {run_dir}", flush=True)

            watching = asyncio.create_task(campaign.watch(CLAIM_POLL_S))  # attempts other processes hold
            try:
                await serve_http(campaign, cfg.serve.host, cfg.serve.port, _token(cfg), cfg.serve.idle_timeout_s,
                                 announce, version=_version())
            finally:
                watching.cancel()
    finally:
        await campaign.aclose()
        await world.aclose()


async def _serve_stdio(campaign: Campaign) -> None:
    """One session over this process's stdin/stdout (the SDK's stdio transport)."""
    from mcp.server.stdio import stdio_server

    from tbx.serve.server import episode_server

    view = campaign.next_view()
    assert view is not None  # the campaign is not done
    seat = Seat(campaign, view)
    server = episode_server(seat, _version())
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        seat.end()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the client may be gone: the rest goes to stderr
    if seat.episode is not None and seat.episode.task is not None:
        await asyncio.shield(seat.episode.task)  # an abandoned episode is graded and stored before we go


def _version() -> str:
    from importlib.metadata import version

    return version("tbx")


def run_serve(cfg: Config) -> EvalResult:
    with open_run(cfg, "serve") as run:
        run_loop(serve_campaign(cfg, run.world, run.log, run.run_dir))
    return write_summary(cfg, run.run_dir, run.log, run.runtimes, cfg.serve.agent_name or "served",
                         f"serve {cfg.tasks.name} to {cfg.serve.agent_name} -> {run.run_dir}",
                         out=sys.stderr if cfg.serve.transport == "stdio" else None)
