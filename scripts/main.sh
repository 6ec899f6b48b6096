#!/usr/bin/env bash
# The main job on the embedded default: `python launch.py` with no stage runs the whole pipeline
# (experiment=embedded_pipeline): probe the easy training sample with SmolLM2-135M on CPU, select
# the pool, train a few native GRPO steps, evaluate the base and the trained model on a benchmark
# sample, write the report. SQLite, the scripted user, bundled tasks. Extra arguments are passed
# on (e.g. `bash scripts/main.sh seed=1`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python launch.py "$@"
