"""The layers of tbx are its import-linter contracts (pyproject.toml `[tool.importlinter]`): imports run
downward only, function-local imports included; no module of a package imports a sibling that imports it
back; only the verl bridge and the launcher import verl, vLLM's package, Ray or submitit. docs/architecture.md
draws the same layers."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_contracts_hold():
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]' installs it)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"Contracts: {len(contracts())} kept, 0 broken." in out.stdout


def test_every_package_and_loose_module_of_tbx_has_a_layer():
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    present = {f"tbx.{p.stem}" for p in (ROOT / "tbx").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert present == named, f"without a layer: {sorted(present - named)}; no such module: {sorted(named - present)}"


def test_the_architecture_page_draws_the_contract_layers():
    text = (ROOT / "docs/architecture.md").read_text()
    block = re.search(r"## Layers\n.*?```\n(.*?)```", text, re.S).group(1)
    drawn = [re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines() if line.strip()]
    assert drawn == next(c for c in contracts() if c["type"] == "layers")["layers"]


def test_no_test_module_imports_another_or_the_entry_script():
    """Shared test code lives in helper modules (tests/helpers/, a folder's non-test modules, conftest fixtures);
    only tests/test_compose_all.py, which tests the entry script itself, imports launch.py."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*from tests(\.\w+)*\.test_\w+ import|\s*import tests(\.\w+)*\.test_", line):
                found.append(f"{path.relative_to(root)}:{number}")
            elif re.match(r"\s*(import launch\b|from launch import)", line) and path.name != "test_compose_all.py":
                found.append(f"{path.relative_to(root)}:{number}")
    assert not found
