"""The user's guide stays a guide: the README is at most 20 KB, and every relative link in it and in
docs/ names a file that exists (and, with an anchor, a heading of that file)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def test_the_readme_is_at_most_20_kb():
    assert (ROOT / "README.md").stat().st_size <= 20_000


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_manual_vllm_command_in_models_md_is_the_one_tbx_runs():
    """docs/models.md's command for serving SmolLM2 yourself has every flag and variable tbx starts it with
    (without VLLM_CPU_KVCACHE_SPACE vLLM's CPU build dies at start)."""
    import shlex

    import yaml

    from tbx.config import ModelConfig, ServerConfig
    from tbx.vllm.spec import ENTRY, ServeSpec, build_vllm_command, server_environment

    text = (ROOT / "docs" / "models.md").read_text()
    block = text.split("### A vLLM you start yourself", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block.split("\n.venv/bin/python launch.py")[0].replace("\\\n", " "))
    variables = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
    command = [word for word in words if word.split("=", 1)[0] not in variables]
    smollm2 = yaml.safe_load((ROOT / "conf" / "model" / "smollm2_135m.yaml").read_text())
    model, server = ModelConfig(), ServerConfig()
    spec = ServeSpec(directory=command[4], served_name=smollm2["name"], dtype=model.dtype,
                     context_length=smollm2["context_length"], kv_cache_gib=server.kv_cache_gib,
                     max_num_seqs=server.max_num_seqs)
    assert command == build_vllm_command(spec, 8000, (".venv-vllm/bin/python", *ENTRY))
    assert command[4] == "~/.cache/tbx/models/smollm2_135m--SmolLM2-135M-Instruct.Q4_1--*"
    tbx_sets = server_environment(spec)
    assert {name: tbx_sets[name] for name in variables} == variables
    assert {"VLLM_SERVER_DEV_MODE", "VLLM_CPU_KVCACHE_SPACE"} <= set(variables)


def test_the_code_cites_no_document_outside_the_repository():
    """Docstrings state a rule or point at docs/: the reference system's spec and the peer notes are not shipped."""
    cited = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "tbx").rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"SPEC §|SPEC\.md|peer-benchmarks §", line)]
    assert not cited
