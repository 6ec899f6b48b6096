"""Run identity covers the code and text that decide a verdict or what the agent or the user sees
(tbx/runs/identity.py CODE_PARTS): each part is edited in a copy of the project, and the same command there names
another run than here, so it cannot resume this tree's verdicts.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbx.runs.identity import run_name
from tests.launch import compose_cfg

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ("stage=eval", "tasks=mock", "policy=model")
NAME = """
import sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tbx.config import register_configs
from tbx.runs.identity import run_name
register_configs()
with initialize_config_dir(sys.argv[1], version_base="1.3"):
    print(run_name(OmegaConf.to_object(compose("config", overrides=["logger=none", *sys.argv[2:]]))))
"""
# (part, file under tbx/, an edit that changes what that part does or says)
EDITS = [
    ("domain policy text", "domains/mock/policy.md", lambda text: text + "\nRefunds need a manager.\n"),
    ("scripted user: patience", "users/scripted.py", lambda text: text.replace("PATIENCE = ", "PATIENCE = 1 + ", 1)),
    ("scripted user: lexicon", "users/lexicon.py", lambda text: text + "\nEXTRA_WORDS = ('kindly',)\n"),
    ("LLM user", "users/llm.py", lambda text: text + "\nPROMPT_NOTE = 'be curt'\n"),
    ("prompt renderer", "policies/prompting.py", lambda text: text + "\nPREAMBLE = 'You are terse.'\n"),
    ("prompt parser", "llm/parsing.py", lambda text: text + "\nTOOL_TAG = '<call>'\n"),
    ("judges", "grading/judge_llm.py", lambda text: text + "\nRUBRIC_NOTE = 'be strict'\n"),
    ("tools", "tools/declare.py", lambda text: text + "\nNOTE = 'schema'\n"),
    ("domain tools", "domains/mock/tools.py", lambda text: text.replace('"""', '"""Edited. ', 1)),
    ("domain kit", "domains/kit.py", lambda text: text.replace("MONEY_DIGITS = 15", "MONEY_DIGITS = 12", 1)),
    ("grader", "grading/verdict.py", lambda text: text + "\nLOOSE = False\n"),
]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("project")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "tbx", target / "tbx", ignore=ignore)
    shutil.copytree(ROOT / "conf", target / "conf", ignore=ignore)
    return target


def name_in(project: Path) -> str:
    out = subprocess.run([sys.executable, "-c", NAME, str(project / "conf"), *COMMAND], cwd=project,
                         capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(project), "PATH": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("part", "name", "edit"), EDITS, ids=[part for part, _, _ in EDITS])
def test_an_edited_part_is_a_new_run(copy, part, name, edit):
    here = run_name(compose_cfg(*COMMAND))
    file = copy / "tbx" / name
    original = file.read_text()
    assert edit(original) != original, f"the edit of {part} changes nothing"
    file.write_text(edit(original))
    try:
        assert name_in(copy) != here, f"an edited {part} ({name}) keeps the run {here}"
    finally:
        file.write_text(original)


def test_an_unedited_copy_names_the_same_run(copy):
    """Paths do not count, so the edit alone makes the difference above."""
    assert name_in(copy) == run_name(compose_cfg(*COMMAND))
