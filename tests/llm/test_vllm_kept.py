"""Kept vLLM servers (stage=serve_model, tbx/vllm/kept.py) with the stand-in executable
(tests/fakes/fake_vllm.py): the server outlives the command that started it, later commands with the
same flags attach to it and load their own weights when it answers with others, a busy or dead
one is not used, and one command stops it. The real server: tests/vllm/test_kept.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tbx.config import EndpointConfig, ModelConfig, ServerConfig
from tbx.policies.vllm import folder_version, serve
from tbx.process.owner import host_tag
from tbx.vllm.kept import KeptRecord, keep, read_record, record_path, records, stop, take
from tbx.vllm.server import VLLMServer, stop_shared
from tbx.vllm.spec import spec_for

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "fake_vllm.py"


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """A model folder (untied: served as it is), a `python` that runs the stand-in for
    `python -m vllm.entrypoints.openai.api_server ...`, and a folder for the records."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama", "tie_word_embeddings": False}))
    (model_dir / "model.safetensors").write_bytes(os.urandom(4096))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {FAKE} \"$@\"\n")
    python.chmod(0o755)
    monkeypatch.setenv("TBX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "0.1")
    s = {"model_dir": model_dir, "python": python, "kept": tmp_path / "kept", "out": tmp_path / "out"}
    yield s
    stop_shared()
    for path, record in records(s["kept"]):  # never leave a server behind when a test fails
        stop(path, record, grace_s=2)


def launch_args(s: dict, *more: str) -> list[str]:
    return [sys.executable, "launch.py", "stage=serve_model", f"model.path={s['model_dir']}",
            f"model.server.python={s['python']}", f"model.server.kept_dir={s['kept']}", f"out_root={s['out']}", *more]


def model_of(s: dict, **server: object) -> ModelConfig:
    return ModelConfig(name="m", path=str(s["model_dir"]), endpoint=EndpointConfig(model="m"),
                       server=ServerConfig(python=str(s["python"]), kept_dir=str(s["kept"]), **server))


def start_kept(s: dict, model: ModelConfig, seed: int = 0) -> KeptRecord:
    """What stage=serve_model leaves, started in this process (quicker than launch.py)."""
    spec = spec_for(model, s["model_dir"], seed=seed)
    server = VLLMServer(spec, log_path=s["kept"] / "fake.log", ready_timeout_s=10, poll_interval_s=0.05, detached=True)
    with server.keeping():
        server.label_weights(folder_version(model.name, s["model_dir"]))
        return keep(server, s["kept"], folder_version(model.name, s["model_dir"]))


def running(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_serve_model_keeps_a_server_after_it_exits_and_stop_is_one_command(setup):
    first = subprocess.run(launch_args(setup), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    [path] = setup["kept"].glob("*.json")
    record = read_record(path)
    assert record is not None and f"{record.url}/v1" in first.stdout and "serve_model.stop=true" in first.stdout
    assert running(record.pid)  # the command is gone, the server is not
    assert httpx.get(f"{record.url}/weight_info").json()["weight_version"] == folder_version("smollm2_135m",
                                                                                              setup["model_dir"])
    again = subprocess.run(launch_args(setup), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already runs" in again.stdout and list(setup["kept"].glob("*.json")) == [path]
    stopped = subprocess.run(launch_args(setup, "serve_model.stop=true"), cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert stopped.returncode == 0 and f"stopped the kept vLLM at {record.url}" in stopped.stdout
    assert not running(record.pid) and not path.exists()


def test_a_command_attaches_and_reloads_weights_a_trainer_left(setup):
    model = model_of(setup)
    record = start_kept(setup, model)
    log = Path(record.log)
    served = serve(model, tokenizer=object())
    assert served.server.process is None and served.server.root_url == record.url  # attached: nothing started
    assert served.version == record.weights and "reload_weights" not in log.read_text()  # its own weights
    served.server.label_weights("train-run:step_1")  # what a training run leaves in it
    stop_shared()  # the command ends: its lease is released, the server runs on
    assert running(record.pid)
    again = serve(model, tokenizer=object())
    assert again.server.root_url == record.url and again.server.weight_version() == record.weights
    assert f"reload_weights {setup['model_dir']}" in log.read_text()  # the label differed: reloaded in place


def test_a_busy_or_dead_kept_server_or_other_flags_are_not_used(setup, capsys):
    model = model_of(setup)
    record = start_kept(setup, model)
    spec = spec_for(model, setup["model_dir"])
    lease = take(setup["kept"], spec)
    assert lease is not None and take(setup["kept"], spec) is None  # one command at a time
    assert "in use by another command" in capsys.readouterr().err
    lease.release()
    assert take(setup["kept"], spec_for(model, setup["model_dir"], seed=1)) is None
    assert "other flags (seed 0 (here 1))" in capsys.readouterr().err
    os.killpg(record.pid, 9)  # the server dies; its record stays behind
    path = record_path(setup["kept"], spec)
    deadline = time.monotonic() + 10
    while running(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert take(setup["kept"], spec) is None and not path.exists()
    assert "no longer runs" in capsys.readouterr().err


def test_a_record_of_another_host_is_neither_used_nor_removed(setup):
    """A kept_dir on a file system several machines share: 127.0.0.1 in another machine's record is not this one."""
    import dataclasses

    model = model_of(setup)
    record = start_kept(setup, model)
    spec = spec_for(model, setup["model_dir"])
    path = record_path(setup["kept"], spec)
    elsewhere = dataclasses.replace(record, owner=record.owner.replace(host_tag(), "000000" if host_tag() != "000000"
                                                                       else "111111", 1))
    path.write_text(json.dumps(dataclasses.asdict(elsewhere)))
    assert take(setup["kept"], spec) is None and path.exists()
    assert records(setup["kept"]) == []  # nor stopped by serve_model.stop=true here
    path.write_text(json.dumps(dataclasses.asdict(record)))  # the fixture stops it
