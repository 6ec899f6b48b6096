"""stage=serve_model: start the model's vLLM once and keep it, so later commands skip vLLM's start.

    python launch.py stage=serve_model                          # the embedded SmolLM2; prints the URL
    python launch.py stage=eval tasks=travel tasks.limit=5 eval.attempts=3   # uses it
    python launch.py stage=serve_model serve_model.stop=true    # stops every kept server

The server is started exactly as a command would start it for the same `model` settings and seed
(so its flags match theirs), detached, and recorded in `model.server.kept_dir`; tbx/vllm/kept.py
says how commands find it, check its weights and take turns. Running the command again while the
server runs prints its URL and starts nothing.
"""

from __future__ import annotations

import sys

from tbx.config import Config
from tbx.errors import ConfigError
from tbx.runs.results import ServeModelResult
from tbx.vllm.kept import flags_hash, keep, read_record, record_path, records, stop


def run_serve_model(cfg: Config) -> ServeModelResult:
    from tbx.policies.hf_model import model_directory, resolve_config_path

    kept_dir = resolve_config_path(cfg.model.server.kept_dir)
    if cfg.serve_model.stop:
        return stop_kept(kept_dir)
    if cfg.model.kind != "vllm" or cfg.model.endpoint.base_url:
        raise ConfigError("conf/model", "model.kind", f"is {cfg.model.kind} with endpoint "
                          f"{cfg.model.endpoint.base_url}: stage=serve_model keeps a vLLM tbx starts",
                          "choose a model of kind vllm without model.endpoint.base_url")
    from tbx.policies.vllm import folder_version
    from tbx.vllm.server import VLLMServer
    from tbx.vllm.spec import spec_for
    from tbx.vllm.weights import serving_folder

    directory = model_directory(cfg.model)[0]
    version = folder_version(cfg.model.name, directory)
    served = serving_folder(directory, resolve_config_path(cfg.model.cache_dir) / "served", version)
    spec = spec_for(cfg.model, served, seed=cfg.seed)  # what `tbx.policies.vllm.serve` would start
    running = read_record(record_path(kept_dir, spec))
    if running is not None:
        print(f"a kept vLLM with these flags already runs at {running.url}/v1 (pid {running.pid}); nothing started")
        return ServeModelResult(url=f"{running.url}/v1", pid=running.pid, started=False)
    kept_dir.mkdir(parents=True, exist_ok=True)
    server = VLLMServer(spec, port=cfg.serve_model.port, log_path=kept_dir / f"{flags_hash(spec)}.log",
                        ready_timeout_s=cfg.model.server.ready_timeout_s, detached=True)
    print(f"starting vLLM for {spec.served_name} ({spec.directory}); log: {server.log_path}", file=sys.stderr,
          flush=True)
    with server.keeping():
        server.label_weights(version)
        record = keep(server, kept_dir, version)
    print(f"vLLM ready in {server.ready_seconds:.0f} s at {server.base_url} (pid {record.pid}), serving {version}; "
          "commands with the same model settings use it. Stop it with: "
          "python launch.py stage=serve_model serve_model.stop=true", flush=True)
    return ServeModelResult(url=server.base_url, pid=record.pid, started=True, ready_s=round(server.ready_seconds, 1))


def stop_kept(kept_dir) -> ServeModelResult:  # a Path
    found = records(kept_dir)
    for path, record in found:
        stop(path, record)
        print(f"stopped the kept vLLM at {record.url}/v1 (pid {record.pid})", flush=True)
    if not found:
        print(f"no kept vLLM runs (none recorded in {kept_dir})", flush=True)
    return ServeModelResult(stopped=tuple(record.url for _, record in found))
