"""Lifecycle of a `vllm serve` process for cluster jobs: start, wait until ready, always stop.

A job that evaluates or trains with a served policy starts vLLM next to itself on 127.0.0.1,
points an `EndpointConfig` at it, and must never leave it running: `VLLMServer` is a context
manager that stops the server (SIGTERM to its whole process group, SIGKILL after a grace period)
on exit, on an exception in the body, and when start-up fails. Start-up fails fast when the
process exits, with the tail of its log in the error.

vLLM needs a GPU; the executable is a parameter so tests drive the lifecycle with a stand-in that
speaks the same HTTP API (`tests/fakes/fake_vllm.py`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import httpx

from tbx.config import EndpointConfig, ModelConfig
from tbx.errors import ConfigError, InfraError

HOST = "127.0.0.1"
LOG_TAIL_LINES = 40


def served_model_name(model: ModelConfig) -> str:
    """The name clients send as `model`: the endpoint's model name, else the config's name."""
    return model.endpoint.model or model.name


def build_vllm_command(model: ModelConfig, port: int, executable: Sequence[str] = ("vllm",)) -> list[str]:
    """The `vllm serve` command line for `model` (pure)."""
    if not model.path:
        raise ConfigError("config", "model.path", "is not set; vLLM needs a model directory or hub id",
                          "set model.path=/path/to/model (a Hugging Face model folder)")
    if model.tensor_parallel_size < 1:
        raise ConfigError("config", "model.tensor_parallel_size", f"is {model.tensor_parallel_size}",
                          "set it to the number of GPUs per replica (>= 1)")
    return [
        *executable, "serve", model.path,
        "--host", HOST,
        "--port", str(port),
        "--served-model-name", served_model_name(model),
        "--tensor-parallel-size", str(model.tensor_parallel_size),
        "--max-model-len", str(model.context_length),
        "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes",
    ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class VLLMServer:
    """A `vllm serve` subprocess in its own process group.

    `with VLLMServer(cfg.model) as server:` returns once `/health` answers 200 and `/v1/models`
    lists the served name; `server.endpoint()` is the config to give the policy.
    """

    def __init__(
        self,
        model: ModelConfig,
        *,
        port: int = 0,
        executable: Sequence[str] = ("vllm",),
        log_path: str | Path | None = None,
        ready_timeout_s: float = 1800.0,  # loading a large model from a network file system is slow
        poll_interval_s: float = 2.0,
        stop_grace_s: float = 30.0,
        env: dict[str, str] | None = None,
    ):
        self.model = model
        self.port = port or free_port()
        self.command = build_vllm_command(model, self.port, executable)
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"vllm-{self.port}.log"
        self.ready_timeout_s = ready_timeout_s
        self.poll_interval_s = poll_interval_s
        self.stop_grace_s = stop_grace_s
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def endpoint(self) -> EndpointConfig:
        """The model's endpoint config pointed at this server."""
        return dataclasses.replace(self.model.endpoint, base_url=self.base_url, model=served_model_name(self.model))

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this VLLMServer was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.process = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, env=self.env)
        except OSError as error:
            self._close_log()
            raise InfraError(f"could not start vLLM ({self.command[0]}): {error}") from error

    def wait_ready(self) -> None:
        """Poll until the server answers; raise `InfraError` if it exits or the timeout passes."""
        assert self.process is not None, "call start() first"
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=max(self.poll_interval_s, 1.0)) as http:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise InfraError(f"vLLM exited with code {code} before it was ready "
                                     f"(command: {' '.join(self.command)}). Last log lines "
                                     f"({self.log_path}):\n{self.log_tail()}")
                if self._is_ready(http):
                    return
                if time.monotonic() > deadline:
                    raise InfraError(f"vLLM was not ready after {self.ready_timeout_s:g} s on port {self.port}. "
                                     f"Last log lines ({self.log_path}):\n{self.log_tail()}")
                time.sleep(self.poll_interval_s)

    def _is_ready(self, http: httpx.Client) -> bool:
        root = f"http://{HOST}:{self.port}"
        try:
            if http.get(f"{root}/health").status_code != 200:
                return False
            models = http.get(f"{root}/v1/models")
        except httpx.HTTPError:
            return False
        try:
            served = [entry.get("id") for entry in models.json().get("data", [])] if models.status_code == 200 else None
        except (ValueError, AttributeError):
            served = None
        if served is None:
            return False
        if served_model_name(self.model) not in served:
            raise InfraError(f"vLLM on port {self.port} serves {served}, not {served_model_name(self.model)!r}")
        return True

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period; idempotent."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # workers that outlived the main process
        _wait_group_gone(process.pid, timeout_s=min(self.stop_grace_s, 5.0))
        self._close_log()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait (bounded) until no process of the group is left, so the GPU memory is free on return.

    A killed worker that nobody has reaped yet still counts; the wait simply ends at the timeout.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
