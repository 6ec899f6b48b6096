"""stage=validate admits valid tasks and rejects each kind of invalid one, with the reason."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tbx.domains import get_domain
from tests.helpers.stage import ROOT, make_cfg, run


def mock_tasks():
    good, transfer20, nickname = (dict(t) for t in get_domain("mock").generate_tasks(0))
    blind = dict(transfer20, id="bad/blind-to-nicknames")
    blind["checks"] = {"volatile": ["accounts.nickname"]}  # an extra write to a nickname goes unseen
    readonly = dict(nickname, id="bad/changes-nothing",
                    reference=[{"tool": "get_account", "arguments": {"account_id": 2}}, {"say": "Done."}])
    broken = dict(good, id="bad/no-user")
    broken.pop("user")
    return [good, blind, readonly, broken]


def test_gate_admits_good_and_names_why_others_are_rejected(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": mock_tasks()}))
    summary = run(make_cfg(tmp_path, "stage=validate", "tasks=files", f"tasks.path={path}",
                           f"summary_path={tmp_path}/gate.json"))
    assert summary.n_tasks == 4 and summary.admitted == 1 and summary.exit_code == 1
    reasons = {item.id: " ".join(item.reasons) for item in summary.rejected}
    assert "mutation passes (extra set_nickname" in reasons["bad/blind-to-nicknames"]
    assert "changes nothing" in reasons["bad/changes-nothing"]
    assert "field 'user': missing" in reasons["bad/no-user"]
    stored = json.loads((tmp_path / "gate.json").read_text())
    assert stored["admitted"] == 1 and len(stored["rejected"]) == 3


def test_gate_cli_on_bundled_mock_domain(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=validate", "tasks=mock",
                          f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "all" in out.stdout and " 3         3         0" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("tasks", "sample", "every"), [("bench", 100, 512), ("train", 60, 252)])
def test_the_gate_admits_the_bundled_tasks(tmp_path, tasks, sample, every):
    """Bundled tasks: the reference passes, the null agent fails, and every single-fault mutation of the
    reference fails (or leaves the reference's exact state: "equivalent", not a miss). The test command gates
    the first two tasks of every family (each family is one generator); TBX_GATE_ALL=1 gates every task, as
    `python launch.py stage=validate tasks=bench` does."""
    everything = os.environ.get("TBX_GATE_ALL") == "1"
    overrides = [] if everything else ["tasks.per_family=2"]
    summary = run(make_cfg(tmp_path, "stage=validate", f"tasks={tasks}", *overrides, f"summary_path={tmp_path}/gate.json"))
    count = every if everything else sample
    assert summary.n_tasks == count
    assert summary.rejected == () and summary.admitted == count
