"""examples/verifiers_vllm.py stores its run where every tbx run goes, `<out_root>/serve-...-verifiers-.../`
(`outputs/` by default), with vf-eval's own results inside it; here vLLM and vf-eval are stand-ins (the whole
command against the served model is tests/envs/test_verifiers_vllm.py)."""

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.envs


def test_verifiers_example_stores_its_run_under_outputs(tmp_path, monkeypatch, capsys):
    import tbx.policies.vllm
    import tbx.vllm.server
    from examples import verifiers_vllm
    from tbx.envs.episodes import TaskSet

    ran, run = [], subprocess.run

    def vf_eval(command, *args, **kwargs):  # what vf-eval does first: load the task set it was given
        if command[0] != str(verifiers_vllm.VF_EVAL):
            return run(command, *args, **kwargs)
        ran.append((command, Path(kwargs["cwd"])))
        overrides = json.loads(command[command.index("--env.taskset.overrides") + 1])
        TaskSet.load("verifiers", *overrides).close()
        return subprocess.CompletedProcess(command, 0)

    server = SimpleNamespace(base_url="http://127.0.0.1:9/v1", spec=SimpleNamespace(served_name="smollm2_135m"),
                             engine=lambda: {"name": "stand-in"})
    monkeypatch.setattr(tbx.policies.vllm, "serve", lambda model: SimpleNamespace(server=server))
    monkeypatch.setattr(tbx.vllm.server, "stop_shared", lambda: None)
    monkeypatch.setattr(verifiers_vllm.subprocess, "run", vf_eval)
    monkeypatch.chdir(tmp_path)  # the command's working folder: its outputs/ is tmp_path/outputs

    assert verifiers_vllm.main(["tasks=mock", f"backend.workdir={tmp_path}/db"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    run_dir, vf_dir = Path(summary["run_dir"]), Path(summary["vf_dir"])
    assert run_dir.parent == tmp_path / "outputs" and run_dir.name.startswith("serve-mock-verifiers-")
    assert (run_dir / "results.sqlite").is_file() and (run_dir / "run.json").is_file()
    (command, cwd), = ran
    assert vf_dir.parent == run_dir and cwd == vf_dir and command[command.index("-o") + 1] == str(vf_dir)
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == [run_dir.name]  # one run, nothing beside it
