#!/usr/bin/env bash
# The main job on the embedded default: evaluate the bundled travel tasks with the oracle and
# the null policy (SQLite, scripted user, CPU) and print the summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python launch.py -m stage=eval tasks=travel policy=oracle,null "$@"
