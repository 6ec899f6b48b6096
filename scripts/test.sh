#!/usr/bin/env bash
# Set up, lint, and run the whole test suite (it starts PostgreSQL itself). Extra arguments go
# to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check tbx tests launch.py benchmarks
exec .venv/bin/python -m pytest "$@"
