"""A served episode in process: one MCP session, over the SDK's in-memory transport, on a campaign of one
attempt, for the serve tests (and the adapters' tests that compare their calls with it)."""

from __future__ import annotations

import mcp

from tbx.episodes import run_episode
from tbx.serve.campaign import Campaign, Seat, View
from tbx.serve.episode import ServedEpisode
from tbx.serve.server import domain_tools, episode_server
from tests.helpers.episodes import world_of


async def serve_one(runtime, backend, client_script):
    """One session on a campaign of one attempt: `client_script(client)` is the agent; returns (what it
    returned, the stored results, the session's episode or None)."""
    stored = []

    def open_episode(task_id, attempt, record):
        def play(agent):
            return run_episode(world_of(backend), runtime, agent, attempt, 0)

        return ServedEpisode(task_id, attempt, play, record)

    view = View(runtime.task.policy, await domain_tools(runtime.task.domain, runtime.tools))
    campaign = Campaign([(runtime.task.id, 0)], {runtime.task.id: view}, open_episode,
                        lambda result: stored.append(result) or True)
    seat = Seat(campaign, campaign.next_view())
    async with mcp.Client(episode_server(seat)) as client:
        returned = await client_script(client)
    seat.end()
    if seat.episode is not None:
        await seat.episode.task
    assert campaign.done.is_set() == bool(stored)  # an episode never started leaves its attempt pending
    return returned, stored, seat.episode
