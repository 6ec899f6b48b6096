#!/usr/bin/env bash
# Set up, lint, and run the whole test suite (it starts PostgreSQL itself). Extra arguments go
# to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check tbx tests launch.py benchmarks
# GRPO math against verl's own core_algos, in .venv-verl (verl pins an older transformers than
# tbx's local model needs, so it cannot share .venv). TBX_SKIP_VERL_CHECK=1 skips it.
if [ "${TBX_SKIP_VERL_CHECK:-0}" != 1 ]; then
  bash scripts/setup_verl_check.sh -q
fi
# The adapters of tbx.envs against TRL, verifiers and OpenEnv, in .venv-envs (tests/envs, marker `envs`; in
# .venv they skip). TBX_SKIP_ENVS=1 skips them.
if [ "${TBX_SKIP_ENVS:-0}" != 1 ]; then
  .venv-envs/bin/python -m pytest -m envs tests/envs -q -p no:cacheprovider
fi
exec .venv/bin/python -m pytest "$@"
