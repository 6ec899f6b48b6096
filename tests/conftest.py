"""Shared fixtures: a throwaway PostgreSQL server, a `backend` over SQLite and PostgreSQL, vLLM servers, and a
single-node Slurm cluster (`slurm`: the one that answers `sinfo`, or one scripts/slurm_local.sh starts).

The PostgreSQL server is started by the project's own `scripts/pg_local.sh` (installing the
Debian packages if needed), once per test session, in its own directory and on a free port, so
two test sessions on one machine never share or stop each other's server. Tests needing it skip
with the script's reason when it cannot start; `TBX_REQUIRE_PG=1` turns that skip into a failure
(for CI), and `TBX_TEST_PG_URL` points the tests at a server that is already running instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbx.backend import Backend, make_backend
from tests.vllm.servers import vllm_server

ROOT = Path(__file__).resolve().parents[1]
PG_SCRIPT = ROOT / "scripts" / "pg_local.sh"
SLURM_START, SLURM_STOP = ROOT / "scripts" / "slurm_local.sh", ROOT / "scripts" / "slurm_stop.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pg_dir() -> Path:
    """A per-session cluster directory, on tmpfs when there is one (clones are ~10x faster)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path("/tmp")
    return base / f"tbx-pytest-pg-{os.getpid()}"


def _script(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(PG_SCRIPT), *command], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Admin URL of a PostgreSQL server for this session: postgresql+psycopg://postgres@127.0.0.1:PORT/postgres."""
    external = os.environ.get("TBX_TEST_PG_URL")
    if external:
        yield external
        return
    env = {**os.environ, "PG_LOCAL_DIR": str(_pg_dir()), "PG_PORT": str(_free_port())}
    started = _script(["start"], env)
    if started.returncode != 0:
        _script(["stop", "--wipe"], env)
        lines = started.stderr.strip().splitlines() or ["no output"]
        detail = next((line for line in lines if "error:" in line), lines[-1])
        reason = f"PostgreSQL could not start (scripts/pg_local.sh start exited {started.returncode}: {detail})"
        if os.environ.get("TBX_REQUIRE_PG") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        _script(["stop", "--wipe"], env)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh Backend of each kind: SQLite under tmp_path, PostgreSQL on the session server."""
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    made = make_backend(request.param, url, str(tmp_path))
    try:
        yield made
    finally:
        made.close()


# --- vLLM's CPU build (.venv-vllm, scripts/setup_vllm.sh) ---------------------------------------

def _require_vllm() -> None:
    """vLLM tests run wherever set-up installed vLLM; they skip only where set-up was told to skip it."""
    from tbx.config import ServerConfig
    from tbx.errors import ConfigError
    from tbx.vllm.spec import vllm_python

    try:
        vllm_python(ServerConfig())
    except ConfigError as exc:
        if os.environ.get("TBX_SKIP_VLLM") == "1":
            pytest.skip(f"TBX_SKIP_VLLM=1 and {exc.problem}")
        raise


@pytest.fixture(scope="session")
def smollm2_directory() -> Path:
    """The embedded SmolLM2's folder (converted from the packaged GGUF on first use): tied embeddings."""
    from tbx.config import ModelConfig
    from tbx.policies.hf_model import model_directory

    return model_directory(ModelConfig())[0]


@pytest.fixture(scope="session")
def smollm2_vllm(smollm2_directory: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """vLLM serving the embedded SmolLM2 for this session (started once: about a minute on 2 cores), from
    the serving copy production serves (tbx/vllm/weights.py). Tests that change its weights put the base
    weights back."""
    from tbx.config import ModelConfig
    from tbx.policies.hf_model import resolve_config_path
    from tbx.policies.vllm import folder_version
    from tbx.vllm.weights import serving_folder

    _require_vllm()
    version = folder_version("smollm2_135m", smollm2_directory)
    served = serving_folder(smollm2_directory, resolve_config_path(ModelConfig().cache_dir) / "served", version)
    # the window conf/model/smollm2_135m.yaml gives (a τ² policy with its tools is ~2,700 tokens)
    with vllm_server("smollm2_135m", served, tmp_path_factory.mktemp("vllm"), context_length=4096) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random llama whose replies are whole mock-task actions (tests/hardening/kill_harness.py)."""
    from tests.hardening.kill_harness import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_vllm(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """vLLM serving the tiny llama as `tiny`, with LoRA adapters allowed (rank <= 8)."""
    _require_vllm()
    with vllm_server("tiny", tiny_model, tmp_path_factory.mktemp("vllm-tiny"), lora_rank=8) as server:
        yield server


def _cluster_answers() -> bool:
    """A controller answers: use that cluster as it is (and never stop what we did not start)."""
    if not shutil.which("sinfo"):
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30, check=False).returncode == 0


def _skip(reason: str) -> None:
    if os.environ.get("TBX_REQUIRE_SLURM") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm():
    """A Slurm cluster for this session: the running one, or one started (and stopped) here."""
    if _cluster_answers():
        yield
        return
    if os.geteuid() != 0:
        _skip("no Slurm cluster answers sinfo, and scripts/slurm_local.sh needs root to start one")
    env = {**os.environ, "SLURM_CPUS": "4"}  # 3 array jobs and a final one side by side on 2 cores
    started = subprocess.run(["bash", str(SLURM_START)], env=env, capture_output=True, text=True, timeout=600,
                             check=False)
    if started.returncode != 0:
        subprocess.run(["bash", str(SLURM_STOP), "--wipe"], capture_output=True, timeout=120, check=False)
        lines = (started.stdout + started.stderr).strip().splitlines() or ["no output"]
        detail = next((line for line in lines if "ERROR" in line), lines[-1])
        _skip(f"Slurm could not start (scripts/slurm_local.sh exited {started.returncode}: {detail})")
    try:
        yield
    finally:
        subprocess.run(["bash", str(SLURM_STOP), "--wipe"], capture_output=True, timeout=120, check=False)
