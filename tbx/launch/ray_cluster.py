"""A Ray cluster over the tasks of one job: head on rank 0, a worker on every other rank.

Every task of the job calls `run_on_ray_cluster`. Rank 0 starts `ray start --head --block`,
publishes the address in the job's rendezvous folder (a shared file system on a cluster), waits
until every rank's node has joined, runs the function (with RAY_ADDRESS set, so `ray.init()` in it
joins this cluster) and, whatever happens, marks the cluster done and stops its node. The other
ranks start a worker node, wait for the mark and stop theirs. `--block` makes each `ray start`
own its daemons: terminating it tears them down, so nothing outlives the job, and we never run
`ray stop`, which would kill every Ray process of the user on the node.

Auth (the trap in machine-facts): `ray start --head` turns token auth on while a client without
the setting connects without a token (`InvalidAuthToken`). RAY_AUTH_MODE is therefore set
explicitly and identically on every process: `token` (default) with a fresh random token in a
0600 file in the rendezvous folder, which RAY_AUTH_TOKEN_PATH names, or `disabled`.

Shared nodes (Ray clusters colliding, RLinf#463): the GCS port, the client-server port and the
dashboard-agent port are picked free instead of Ray's fixed defaults (6379, 10001, 52365), and the
session lives in a temp folder of its own. This module imports ray only inside `wait_for_nodes`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tbx.errors import InfraError
from tbx.process.owner import die_with_parent

POLL_S = 0.5


@dataclass(frozen=True)
class RaySpec:
    """One job's Ray cluster: a node per task."""

    num_nodes: int
    cpus: int  # per node
    gpus: int  # per node
    auth_mode: str  # token | disabled
    rendezvous: Path  # shared by all tasks of this run of the job
    hosts: int = 1  # nodes of the allocation (several Ray nodes may share one host)
    timeout_s: float = 600.0  # for the head to come up and every worker to join
    # `gpus` are fake (verl on a machine without GPUs, tbx/verl_bridge/cpu.py): Ray refuses to advertise
    # GPUs while CUDA_VISIBLE_DEVICES is empty, as job schedulers set it on CPU jobs, so it is dropped
    fake_gpus: bool = False
    object_store_bytes: int | None = None  # Ray's default (30 % of memory) when None

    @property
    def temp_dir(self) -> str:
        """Ray's session folder: short (unix socket paths are limited to ~107 bytes) and per job."""
        return f"/tmp/tbx-ray-{hashlib.sha256(str(self.rendezvous).encode()).hexdigest()[:10]}"


def ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise InfraError("ray is not installed in this environment: pip install -e '.[cluster]'")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def node_ip(hosts: int = 1) -> str:
    """This node's address as the other nodes reach it: its host name, resolved. Where that gives a
    loopback address (Debian maps the host name to 127.0.1.1) and the job spans several hosts, the
    address of the interface that routes outwards instead (a UDP connect sends no packet)."""
    ip = socket.gethostbyname(socket.gethostname())
    if ip.startswith("127.") and hosts > 1:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(("10.255.255.255", 1))
                ip = sock.getsockname()[0]
            except OSError:
                pass
    return ip


def head_command(spec: RaySpec, ip: str, port: int, client_server: bool = False) -> list[str]:
    """`client_server`: also start Ray's client server (for `ray://` drivers; it needs the `ray[client]`
    dependencies, grpc). tbx's drivers join the cluster at its GCS address, so it is off: one port less
    picked ahead of time (a port picked free can be taken before Ray binds it, and a head whose client server
    cannot bind stops every process it started)."""
    client = [f"--ray-client-server-port={free_port()}"] if client_server else []
    return [ray_executable(), "start", "--head", "--block", f"--node-ip-address={ip}", f"--port={port}",
            *client, "--include-dashboard=false", *_node_flags(spec)]


def worker_command(spec: RaySpec, address: str, ip: str) -> list[str]:
    return [ray_executable(), "start", "--block", f"--address={address}", f"--node-ip-address={ip}",
            *_node_flags(spec)]


def _node_flags(spec: RaySpec) -> list[str]:
    store = [f"--object-store-memory={spec.object_store_bytes}"] if spec.object_store_bytes else []
    return [f"--num-cpus={spec.cpus}", f"--num-gpus={spec.gpus}", f"--temp-dir={spec.temp_dir}",
            f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats", *store]


def auth_env(spec: RaySpec, token_path: Path | None) -> dict[str, str]:
    env = {"RAY_AUTH_MODE": spec.auth_mode, "RAY_USAGE_STATS_ENABLED": "0"}
    if spec.fake_gpus:  # verl on CPU nodes: its workers at the normal niceness (tbx/verl_bridge/cpu.py)
        from tbx.verl_bridge.cpu import RAY_NODE_ENVIRONMENT

        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(spec.gpus))
        env |= RAY_NODE_ENVIRONMENT
    if spec.auth_mode == "token" and token_path is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    return env


def run_on_ray_cluster(function: Callable[..., Any], args: tuple, spec: RaySpec, rank: int) -> Any:
    """Call on every task of the job; returns `function(*args)` on rank 0 and None elsewhere."""
    if rank == 0:
        return _run_head(function, args, spec)
    _run_worker(spec, rank)
    return None


def _run_head(function: Callable[..., Any], args: tuple, spec: RaySpec) -> Any:
    spec.rendezvous.mkdir(parents=True, exist_ok=True)
    token_path = None
    if spec.auth_mode == "token":
        token_path = spec.rendezvous / "auth_token"
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    env = auth_env(spec, token_path)
    ip, port = node_ip(spec.hosts), free_port()
    process = _start(head_command(spec, ip, port), env, spec.rendezvous / "ray-head.log")
    try:
        address = f"{ip}:{port}"
        _wait_port(ip, port, process, spec)
        _publish(spec.rendezvous / "head.json", {"address": address, "token_path": str(token_path or "")})
        os.environ.update(env | {"RAY_ADDRESS": address})
        wait_for_nodes(address, spec.num_nodes, process, spec)
        return _while_head_lives(function, args, process, spec.rendezvous / "ray-head.log")
    finally:
        (spec.rendezvous / "done").touch()
        _wait_workers_stopped(spec)
        _stop(process)
        shutil.rmtree(spec.temp_dir, ignore_errors=True)


def _while_head_lives(function: Callable[..., Any], args: tuple, head: subprocess.Popen, log: Path) -> Any:
    """`function(*args)`, ended when the Ray head exits under it: a driver whose GCS is gone retries it
    forever, so the head's death stops this process's other children (the driver) and is the error raised."""
    stop, died = threading.Event(), []

    def watch() -> None:
        while not stop.wait(POLL_S):
            if head.poll() is not None:
                died.append(f"the Ray head exited with {head.returncode} while the job ran; the end of {log}:\n"
                            f"{_tail(log)}")
                for child in psutil.Process().children():
                    if child.pid != head.pid:
                        child.terminate()
                return

    watcher = threading.Thread(target=watch, name="tbx-ray-head-watch", daemon=True)
    watcher.start()
    try:
        return function(*args)
    except Exception:
        if died:
            raise InfraError(died[0]) from None
        raise
    finally:
        stop.set()
        watcher.join()


def _run_worker(spec: RaySpec, rank: int) -> None:
    head = _wait_head(spec)
    if head is None:  # the head gave up before publishing
        (spec.rendezvous / f"stopped{rank}").touch()
        return
    env = auth_env(spec, Path(head["token_path"]) if head["token_path"] else None)
    log_path = spec.rendezvous / f"ray-worker{rank}.log"
    process = _start(worker_command(spec, head["address"], node_ip(spec.hosts)), env, log_path)
    try:
        while not (spec.rendezvous / "done").exists():
            if process.poll() is not None:
                message = f"the Ray worker of rank {rank} exited with {process.returncode}:\n{_tail(log_path)}"
                (spec.rendezvous / f"failed{rank}").write_text(message)  # the head stops waiting for it
                raise InfraError(message)
            time.sleep(POLL_S)
    finally:
        _stop(process)
        (spec.rendezvous / f"stopped{rank}").touch()


def _wait_workers_stopped(spec: RaySpec, grace_s: float = 60.0) -> None:
    """Workers stop before the head, so that no raylet loses its GCS while still running."""
    deadline = time.monotonic() + grace_s
    markers = [spec.rendezvous / f"stopped{rank}" for rank in range(1, spec.num_nodes)]
    while time.monotonic() < deadline and not all(m.exists() for m in markers):
        time.sleep(POLL_S)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(command, env=os.environ | env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to `ray start --block` (it stops the daemons it started), SIGKILL to the group after."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # daemons that ignored the shutdown
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _wait_port(ip: str, port: int, process: subprocess.Popen, spec: RaySpec) -> None:
    deadline = time.monotonic() + spec.timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InfraError(f"ray start --head exited with {process.returncode}:\n"
                             f"{_tail(spec.rendezvous / 'ray-head.log')}")
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((ip, port)) == 0:
                return
        time.sleep(POLL_S)
    raise InfraError(f"the Ray head did not listen on {ip}:{port} within {spec.timeout_s:.0f} s")


def wait_for_nodes(address: str, expected: int, process: subprocess.Popen, spec: RaySpec) -> None:
    """Block until `expected` nodes are alive; the driver connection is closed again afterwards."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    try:
        deadline = time.monotonic() + spec.timeout_s
        while True:
            alive = sum(1 for node in ray.nodes() if node["Alive"])
            if alive >= expected:
                return
            failed = sorted(spec.rendezvous.glob("failed*"))
            if failed:
                raise InfraError(failed[0].read_text())
            if process.poll() is not None or time.monotonic() > deadline:
                raise InfraError(f"{alive} of {expected} Ray nodes joined within {spec.timeout_s:.0f} s; "
                                 f"logs in {spec.rendezvous}")
            time.sleep(POLL_S)
    finally:
        ray.shutdown()


def _publish(path: Path, payload: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(path)  # readers never see half a file


def _wait_head(spec: RaySpec) -> dict[str, str] | None:
    path, deadline = spec.rendezvous / "head.json", time.monotonic() + spec.timeout_s
    while not path.exists():
        if (spec.rendezvous / "done").exists():
            return None
        if time.monotonic() > deadline:
            raise InfraError(f"no Ray head address in {path} after {spec.timeout_s:.0f} s")
        time.sleep(POLL_S)
    return json.loads(path.read_text())


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
