"""`scripts/pg_local.sh start` never leaves a run talking to another program's port: a taken default
port moves the server to the next free one (the URL it prints says which), a taken PG_PORT stops it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg_local.sh"
DEFAULT_PORT = 55432


def script(*args: str, directory: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "PG_PORT"} | {"PG_LOCAL_DIR": str(directory), **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=300)


@pytest.fixture
def squatter():
    """A program listening on the default port (or whoever already does)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", DEFAULT_PORT))
        sock.listen()
    except OSError:
        pass  # taken already: by someone else, which is the case under test too
    yield sock
    sock.close()


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")), reason="PostgreSQL not installed")
def test_a_taken_port_is_never_talked_to(squatter):
    directory = Path("/dev/shm" if os.access("/dev/shm", os.W_OK) else "/tmp") / f"tbx-pgport-test-{os.getpid()}"
    try:
        refused = script("start", directory=directory, PG_PORT=str(DEFAULT_PORT))
        assert refused.returncode != 0 and f"port {DEFAULT_PORT} on 127.0.0.1 is taken" in refused.stderr
        started = script("start", directory=directory)
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1]
        port = int(url.rpartition(":")[2].partition("/")[0])
        assert port != DEFAULT_PORT and f"port {DEFAULT_PORT} is taken" in started.stderr
        assert f"TBX_PG_URL={url}" in script("env", directory=directory).stdout  # env names the port in use
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        script("stop", "--wipe", directory=directory)
        shutil.rmtree(directory, ignore_errors=True)
