"""The code keeps the shape STYLE.md asks for: no module of tbx/ over 400 lines and no function over 60
(counted from its `def` line to its last line, decorators excluded). When one grows past a limit, split it
by meaning (a group of a config, a family of task builders, a well-named helper), never by squeezing lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted((ROOT / "tbx").rglob("*.py"))
MODULE_LINES, FUNCTION_LINES = 400, 60


def test_the_package_is_found():
    assert len(MODULES) > 100


def test_no_module_is_over_400_lines():
    long = {str(path.relative_to(ROOT)): lines for path in MODULES
            if (lines := len(path.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines, split them by meaning: {long}"


def test_no_function_is_over_60_lines():
    long = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {FUNCTION_LINES} lines, split them into well-named helpers: {long}"
