"""The vLLM server's command line and the lifecycle paths a real server cannot be made to show (a worker
that ignores SIGTERM, a start that hangs), driven with a stand-in (tests/fakes/fake_vllm.py). The real
server's life is tested in tests/vllm/."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path

import pytest

from tbx.config import EndpointConfig, ModelConfig, ServerConfig
from tbx.errors import ConfigError, InfraError
from tbx.vllm.server import VLLMServer
from tbx.vllm.spec import ENTRY, ServeSpec, build_vllm_command, spec_for, vllm_python

FAKE_VLLM = (sys.executable, str(Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm.py"))
SPEC = ServeSpec(directory="/models/qwen", served_name="qwen-served", dtype="bfloat16", context_length=8192,
                 tensor_parallel_size=4, python="/venv/bin/python")
MODEL = ModelConfig(name="qwen-test", kind="vllm", path="/models/qwen",
                    endpoint=EndpointConfig(model="qwen-served", timeout_s=2.0, max_retries=0))


def server(tmp_path: Path, **changes) -> VLLMServer:
    fake_env = changes.pop("fake_env", {})
    options = {"launcher": FAKE_VLLM, "log_path": tmp_path / "vllm.log", "ready_timeout_s": 10.0,
               "poll_interval_s": 0.05, "stop_grace_s": 2.0, "env": os.environ | fake_env}
    return VLLMServer(SPEC, **(options | changes))


def is_alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped (a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_command_line_from_the_serve_spec():
    assert build_vllm_command(SPEC, 8123, ("/venv/bin/python", *ENTRY)) == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/qwen",
        "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "qwen-served", "--dtype", "bfloat16",
        "--max-model-len", "8192", "--tensor-parallel-size", "4", "--max-num-seqs", "64",
        "--gpu-memory-utilization", "0.9", "--seed", "0", "--enable-scale-out",
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--enforce-eager",
    ]
    replicas = build_vllm_command(dataclasses.replace(SPEC, data_parallel_size=2), 1, ("py",))
    assert replicas[replicas.index("--data-parallel-size") + 1] == "2"
    lora = dataclasses.replace(SPEC, lora_rank=16, enforce_eager=False, extra_args=("--quantization", "fp8"))
    assert build_vllm_command(lora, 1, ("py",))[-7:] == ["--enable-lora", "--max-lora-rank", "16", "--max-loras", "1",
                                                         "--quantization", "fp8"]
    with pytest.raises(ConfigError, match="model.tensor_parallel_size"):
        build_vllm_command(dataclasses.replace(SPEC, tensor_parallel_size=0), 1, ("py",))
    # servers share a process when only the weights (and the name) differ
    trained = dataclasses.replace(SPEC, directory="/models/qwen-trained", served_name="qwen-grpo")
    assert trained.key == SPEC.key != lora.key


def test_replicas_follow_the_gpus_this_job_sees(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    model = dataclasses.replace(MODEL, tensor_parallel_size=2, server=ServerConfig(python=sys.executable))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert spec_for(model, tmp_path).data_parallel_size == 4  # 8 GPUs / 2 per replica
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert spec_for(model, tmp_path).data_parallel_size == 1  # none: one replica on CPU
    pinned = dataclasses.replace(model, server=ServerConfig(python=sys.executable, data_parallel_size=3))
    assert spec_for(pinned, tmp_path).data_parallel_size == 3


def test_no_vllm_installed_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("TBX_VLLM_PYTHON", raising=False)
    with pytest.raises(ConfigError, match="does not exist"):
        vllm_python(ServerConfig(python=str(tmp_path / "nope")))
    monkeypatch.setattr("tbx.vllm.spec.Path.is_file", lambda self: False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="setup.sh"):
        vllm_python(ServerConfig())


def test_stops_when_the_body_raises_and_kills_workers(tmp_path):
    pidfile = tmp_path / "worker.pid"  # the stand-in's worker ignores SIGTERM, like a stuck TP worker
    try:
        with pytest.raises(RuntimeError, match="episode loop crashed"):
            with server(tmp_path, fake_env={"FAKE_VLLM_CHILD_PIDFILE": str(pidfile)}) as vllm:
                worker = int(pidfile.read_text())
                assert is_alive(worker)
                raise RuntimeError("episode loop crashed")
        assert not is_alive(vllm.process.pid) and not is_alive(worker)
    finally:
        if pidfile.exists() and is_alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # never leave it behind when the test fails


def test_sigkill_after_the_grace_period(tmp_path):
    vllm = server(tmp_path, stop_grace_s=0.3, fake_env={"FAKE_VLLM_IGNORE_SIGTERM": "1"})
    with vllm:
        pass
    assert vllm.process.returncode == -9 and not is_alive(vllm.process.pid)


def test_ready_timeout_stops_the_process(tmp_path):
    vllm = server(tmp_path, ready_timeout_s=0.5, fake_env={"FAKE_VLLM_STARTUP_S": "30"})
    with pytest.raises(InfraError, match="not ready after 0.5 s"):
        with vllm:
            pytest.fail("the body must not run")
    assert vllm.process.returncode is not None and not is_alive(vllm.process.pid)
