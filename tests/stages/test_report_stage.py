"""stage=report on stored runs as users run it: a served agent is labelled by its own name, and runs of
different k are refused in one line (exit 2) after a report per k is written."""

import asyncio
from pathlib import Path

import mcp

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tests.helpers.stage import launch, make_cfg, run
from tests.serve.agents import play_reference
from tests.serve.served import ROOT, serve_args


def test_a_served_agent_is_labelled_by_its_name(tmp_path):
    (task,) = resolve_tasks(TasksConfig(name="mock", domains=["mock"], limit=1))
    command = serve_args(tmp_path, "tasks=mock", "tasks.limit=1", "serve.agent_name=my_agent", "serve.transport=stdio")

    async def play():
        async with mcp.Client(mcp.StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))) as c:
            await play_reference(c, task)

    asyncio.run(play())
    (served,) = (tmp_path / "outputs").glob("serve-mock-my_agent-*")
    null = run(make_cfg(tmp_path, "tasks=mock", "tasks.limit=1", "policy=null_agent"))
    report = run(make_cfg(tmp_path, "stage=report", f"runs=[{null.run_dir},{served}]"))
    text = Path(report.markdown).read_text()
    assert "Table 1. Before/after: null (base) vs my_agent" in text
    assert "| my_agent | my_agent | 1 | 1 |" in text  # the run list: name and agent
    assert "smollm2_135m" not in text  # the model group's default, which a served run never used
    assert report.tables[1].rows[1][:2] == ("my_agent", "my_agent")


def test_runs_of_different_k_get_a_report_per_k_then_one_line_and_exit_2(tmp_path):
    common = ("stage=eval", "tasks=mock", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db")
    dirs = []
    for policy, attempts in (("null", 1), ("oracle", 1), ("oracle", 2)):
        out = launch(*common, f"policy={policy}", f"eval.attempts={attempts}")
        assert out.returncode == 0, out.stderr
        assert "look at the episodes: python launch.py stage=view 'runs=[" in out.stdout.splitlines()[-1]
        dirs.append(out.stdout.split("-> ")[1].split()[0])
    out = launch("stage=report", f"runs=[{','.join(dirs)}]", "report.names=[base,oracle1,oracle2]",
                 f"out_root={tmp_path}")
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "different k (attempts per task: base k=1, oracle1 k=1, oracle2 k=2)" in errors[0]
    (report_dir,) = Path(tmp_path).glob("report-3runs-*")
    k1, k2 = (report_dir / "k1" / "report.md").read_text(), (report_dir / "k2" / "report.md").read_text()
    assert "Table 1. Before/after: base (base) vs oracle1" in k1
    assert "Table 1. oracle2 (no second run to compare)" in k2
    assert not (report_dir / "report.md").exists()


def test_the_same_runs_make_the_same_report_however_their_paths_are_written(tmp_path, monkeypatch):
    null = run(make_cfg(tmp_path, "tasks=mock", "tasks.limit=1", "policy=null_agent"))
    oracle = run(make_cfg(tmp_path, "tasks=mock", "tasks.limit=1", "policy=oracle"))
    first = run(make_cfg(tmp_path, "stage=report", f"runs=[{null.run_dir},{oracle.run_dir}]"))
    monkeypatch.chdir(tmp_path)
    relative = [str(Path(d).relative_to(tmp_path)) for d in (null.run_dir, oracle.run_dir)]
    again = run(make_cfg(tmp_path, "stage=report", f"runs=[./{relative[0]}/,{relative[1]}/]"))
    assert again.run_dir == first.run_dir
    swapped = run(make_cfg(tmp_path, "stage=report", f"runs=[{oracle.run_dir},{null.run_dir}]"))
    assert swapped.run_dir != first.run_dir  # another base is another comparison
    assert sorted(p.name for p in (tmp_path / "outputs").glob("report-*")) == sorted(
        {Path(first.run_dir).name, Path(swapped.run_dir).name})
