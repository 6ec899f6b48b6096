"""Secrets never reach a file or a log: the W&B key and the endpoints' keys are read from the
environment and nowhere else.

A real `launch.py stage=eval` runs with W&B offline, an LLM agent and an LLM user served by
scripted servers that demand their keys (`tests/fakes/responding.py`'s RespondingServer; the
agent's server rejects the first keyed request with a body that echoes the key, as some servers do,
so an error message carrying it is stored too). Then every file the run left (run folder, results
store, Hydra's folder, the offline W&B run, W&B's home folders) and the captured stdout and stderr
are searched for the key values: none may appear, while the servers did receive the keys.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.fakes.openai_server import Scripted
from tests.fakes.responding import RespondingServer, agent_responder, llm_overrides, user_reply

ROOT = Path(__file__).resolve().parents[2]


def files_holding(folder: Path, needles: dict[str, bytes]) -> tuple[list[str], int, list[tuple[str, str]]]:
    """(files scanned, bytes scanned, [(file, needle name)]) over every file under `folder`."""
    files, scanned, hits = [], 0, []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        files.append(path.relative_to(folder).as_posix())
        scanned += len(data)
        hits += [(files[-1], name) for name, needle in needles.items() if needle in data]
    return files, scanned, hits


def key_needles(keys: dict[str, str]) -> dict[str, bytes]:
    """What a scan looks for: every key, raw and base64-encoded."""
    return {f"{name} {form}": value for name, key in keys.items()
            for form, value in (("raw", key.encode()), ("base64", base64.b64encode(key.encode())[:-4]))}


def eval_with_keys(tmp_path: Path, keys: dict[str, str], agent: RespondingServer,
                   user: RespondingServer) -> subprocess.CompletedProcess:
    """A real `launch.py stage=eval` of tasks=mock with W&B offline, the agent and the user served by `agent`
    and `user` (their keys in TBX_TEST_AGENT_KEY and TBX_TEST_USER_KEY), everything under tmp_path."""
    home = tmp_path / "home"
    env = {**os.environ, **keys, "HOME": str(home), "TMPDIR": str(tmp_path / "tmp"),
           "WANDB_CONFIG_DIR": str(home / "wandb-config"), "WANDB_CACHE_DIR": str(home / "wandb-cache"),
           "WANDB_DATA_DIR": str(home / "wandb-data")}
    (tmp_path / "tmp").mkdir()
    with agent, user:
        overrides = llm_overrides(agent.base_url, user.base_url, "TBX_TEST_AGENT_KEY", "TBX_TEST_USER_KEY")
        return subprocess.run(
            [sys.executable, str(ROOT / "launch.py"), "stage=eval", "tasks=mock", "logger=wandb_offline",
             "eval.concurrency=1", *overrides, f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db"],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def new_keys() -> dict[str, str]:
    return {"WANDB_API_KEY": uuid.uuid4().hex + "wandbk", "TBX_TEST_AGENT_KEY": "sk-agent-" + uuid.uuid4().hex,
            "TBX_TEST_USER_KEY": "sk-user-" + uuid.uuid4().hex}


def test_keys_reach_the_servers_and_no_file_or_log(tmp_path):
    from tbx.domains import get_domain

    keys = new_keys()
    needles = key_needles(keys)
    tasks = get_domain("mock").generate_tasks(0)
    agent = RespondingServer(agent_responder(tasks), api_key=keys["TBX_TEST_AGENT_KEY"], reject_first=True)
    user = RespondingServer(user_reply, api_key=keys["TBX_TEST_USER_KEY"])
    out = eval_with_keys(tmp_path, keys, agent, user)
    assert out.returncode == 0, out.stderr[-3000:]
    # not vacuous: every request carried its key, the first agent request was refused, the run is complete
    assert agent.chat_requests and user.chat_requests
    assert {r.headers.get("authorization") for r in agent.chat_requests} == {f"Bearer {keys['TBX_TEST_AGENT_KEY']}"}
    assert {r.headers.get("authorization") for r in user.chat_requests} == {f"Bearer {keys['TBX_TEST_USER_KEY']}"}
    run_dir = next((tmp_path / "out").glob("eval-mock-openai_endpoint-*"))
    from tbx.store.results import read_records

    records = read_records(run_dir)
    assert [r.outcome for r in records].count("success") == 3
    refused = [r for r in records if r.outcome == "infra_error"]
    assert len(refused) == 1 and "key rejected: Bearer ***" in refused[0].cause
    wandb_run = next((run_dir / "wandb").glob("offline-run-*/run-*.wandb")).read_bytes()  # config + history
    assert b'api_key_env":"TBX_TEST_AGENT_KEY"' in wandb_run  # the config went to W&B: the variable's name only
    files, scanned, hits = files_holding(tmp_path, needles)
    logs = [name for name, needle in needles.items() if needle.decode() in out.stdout + out.stderr]
    print(f"secrets: {len(files)} files ({scanned} bytes) and {len(out.stdout) + len(out.stderr)} characters of "
          f"stdout/stderr scanned for {len(needles)} key forms; hits = {len(hits) + len(logs)}")
    scanned_kinds = {"config.yaml", "run.json", "results.sqlite", "tasks.jsonl", "summary.json", ".hydra/config.yaml",
                     ".hydra/overrides.yaml", "launch.log", "debug.log", "debug-internal.log", ".wandb"}
    assert {kind for kind in scanned_kinds if any(f.endswith(kind) for f in files)} == scanned_kinds
    assert hits == [] and logs == []
    (tmp_path / "out" / "planted.log").write_text(f"oops {keys['TBX_TEST_USER_KEY']}")  # the scan can fail
    assert files_holding(tmp_path, needles)[2] == [("out/planted.log", "TBX_TEST_USER_KEY raw")]


def test_a_key_written_into_the_config_is_refused_before_anything_is_saved(tmp_path):
    key = "sk-" + uuid.uuid4().hex
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=eval", "tasks=mock", "policy=oracle",
                          "logger=none", f"+extra.api_key={key}", f"out_root={tmp_path}/out"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: command line: field 'extra.api_key': holds a secret; the config is saved "
                                  "with the run and sent to W&B. Fix: remove it, put the key in an environment "
                                  "variable and name that variable (e.g. model.endpoint.api_key_env=MY_KEY_VAR)")
    assert key not in out.stdout + out.stderr and not (tmp_path / "out").exists()  # no config.yaml, no .hydra/


def test_wandb_gets_secret_looking_keys_redacted():
    from tbx.config import Config
    from tbx.runs.sinks import safe_config

    config = safe_config(Config(extra={"service": {"api_key": "sk-x", "token": "t", "api_key_env": "VAR"}}))
    assert config["extra"]["service"] == {"api_key": "<redacted>", "token": "<redacted>", "api_key_env": "VAR"}
    assert config["model"]["endpoint"]["api_key_env"] is None  # names of variables are kept, as they are


def echoing(respond, key: str):
    """`respond` as a hostile provider plays it: every reply repeats the caller's key, in its text (beside a
    tool call too) and in its reasoning."""
    def reply(body: dict) -> Scripted:
        scripted = respond(body)
        message = scripted.body["choices"][0]["message"]
        message["content"] = f"{message.get('content') or ''} (my key: {key})"
        message["reasoning_content"] = f"the caller's key is {key}"
        return scripted
    return reply


def test_a_provider_that_echoes_the_key_leaves_it_in_no_file_or_log(tmp_path):
    """The agent's and the user's endpoints repeat their keys in every reply: tbx knows the values (it read
    them from model/user.endpoint.api_key_env) and masks them in what it keeps, so no file of the run, of
    W&B's offline run or of its logs, and no line of output, holds one; the run itself is unharmed."""
    from tbx.domains import get_domain
    from tbx.store.results import read_records

    keys = new_keys()
    tasks = get_domain("mock").generate_tasks(0)
    agent = RespondingServer(echoing(agent_responder(tasks), keys["TBX_TEST_AGENT_KEY"]),
                             api_key=keys["TBX_TEST_AGENT_KEY"])
    user = RespondingServer(echoing(user_reply, keys["TBX_TEST_USER_KEY"]), api_key=keys["TBX_TEST_USER_KEY"])
    out = eval_with_keys(tmp_path, keys, agent, user)
    assert out.returncode == 0, out.stderr[-3000:]
    records = read_records(next((tmp_path / "out").glob("eval-mock-openai_endpoint-*")))
    texts = [m.content for r in records for m in r.transcript]
    # not vacuous: the replies carried the keys and reached the transcripts, masked
    assert any("(my key: ***)" in t for t in texts)
    assert any("(my key: ***)" in m.content and m.tool_calls for r in records for m in r.transcript)
    assert [r.outcome for r in records].count("success") == 3
    files, scanned, hits = files_holding(tmp_path, key_needles(keys))
    logs = [name for name, needle in key_needles(keys).items() if needle.decode() in out.stdout + out.stderr]
    print(f"echoed keys: {len(files)} files ({scanned} bytes) scanned; hits = {len(hits) + len(logs)}")
    assert any(f.endswith(".wandb") for f in files) and any(f.endswith("results.sqlite") for f in files)
    assert hits == [] and logs == []
