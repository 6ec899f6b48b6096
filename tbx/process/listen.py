"""Start a uvicorn server on a port and learn where it listens (`stage=serve`, `stage=view`)."""

from __future__ import annotations

import asyncio

import uvicorn

from tbx.errors import ConfigError


async def start_listening(config: uvicorn.Config, conf_file: str,
                          field: str) -> tuple[uvicorn.Server, asyncio.Task, str]:
    """The server, its serving task and its base URL (`http://host:port`) once the port is bound; a port
    it cannot bind is a ConfigError naming `field` of `conf_file` (`field=0` picks any free port)."""
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():
        await asyncio.sleep(0.02)
    if serving.done():  # uvicorn exits (SystemExit) when it cannot bind
        try:
            await serving
        except SystemExit:
            pass
        raise ConfigError(conf_file, field, f"cannot listen on {config.host}:{config.port} (in use?)",
                          f"give a free port, or {field}=0 for any free one")
    host = config.host
    bound = server.servers[0].sockets[0].getsockname()[1]
    return server, serving, f"http://{f'[{host}]' if ':' in host else host}:{bound}"
