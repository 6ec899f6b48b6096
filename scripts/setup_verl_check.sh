#!/usr/bin/env bash
# Build .venv-verl and check that tbx.rl's GRPO math gives verl's numbers (tests/rl/test_verl_parity.py).
#
# verl cannot live in .venv: it pins transformers<5.11, which breaks the local model path. So this
# venv holds only CPU torch, verl 0.9.1 without its (GPU/cluster-sized) dependency tree, and the
# few packages that `import verl.trainer.ppo.core_algos` really needs (found by importing until it
# stopped failing): packaging, numpy, ray, tensordict, omegaconf, transformers, codetiming, orjson.
# tbx goes in editable and without dependencies: tbx.rl imports only torch and numpy.
#
# Idempotent (a stamp of this script's hash). Extra arguments go to pytest. SETUP_ONLY=1 skips the run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-verl
if [ ! -x "$VENV/bin/python" ]; then
  echo "[verl-check] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
  echo "*" > "$VENV/.gitignore"  # keep git blind to it whatever the repo's .gitignore says
fi
STAMP="$VENV/.setup-$(sha256sum "$0" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  pip_q() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
  T0=$(date +%s)
  pip_q "torch==2.13.0"  # pinned: the CPU build; unpinned would pull a multi-GB CUDA build
  pip_q --no-deps "verl==0.9.1"
  # Ranges are verl 0.9.1's own Requires-Dist (omegaconf as hydra-core 1.3 pins it).
  pip_q "packaging>=20" "numpy>=2" "ray>=2.41" "tensordict>=0.8,<=0.10,!=0.9.0" "omegaconf>=2.3,<2.4" \
        "transformers>=5.5.3,<5.11,!=5.6.0" codetiming orjson "pytest>=8"
  pip_q --no-deps -e .
  "$VENV/bin/python" -c "import verl.trainer.ppo.core_algos, verl.workers.config, tbx.rl" \
    || { echo "[verl-check] import check failed" >&2; exit 1; }
  rm -f "$VENV"/.setup-*
  touch "$STAMP"
  echo "[verl-check] set up in $(( $(date +%s) - T0 ))s"
fi
if [ "${SETUP_ONLY:-0}" = "1" ]; then
  exit 0
fi
# --noconftest: tests/conftest.py imports the database backends, which this venv does not carry.
exec "$VENV/bin/python" -m pytest tests/rl/test_verl_parity.py --noconftest -q -p no:cacheprovider "$@"
