#!/usr/bin/env bash
# Set up, lint, and run the whole test suite (it starts PostgreSQL and Slurm itself). Extra arguments
# go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
#
# Two interpreters, one suite: tbx's .venv runs everything but the tests marked `verl`, which need
# verl's trainer and run in .venv-vllm (vLLM's CPU build + verl 0.9.1, scripts/setup_vllm.sh): the
# GRPO parity with verl's core_algos, the agent loop inside verl's workers, and verl's real trainer
# on tbx episodes. With arguments, only the .venv suite runs them unless TBX_VERL_TESTS=1;
# TBX_VERL_TESTS=0 (or TBX_SKIP_VLLM=1) skips the verl suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check tbx tests launch.py benchmarks
VERL_TESTS=${TBX_VERL_TESTS:-$([ $# -eq 0 ] && echo 1 || echo 0)}
if [ "${TBX_SKIP_VLLM:-0}" = 1 ]; then
  VERL_TESTS=0
fi
status=0
# Two test processes (pytest-xdist; TBX_TEST_WORKERS=0 runs them in this one), each test file whole in one of
# them: on 2 cores the suite waits on subprocesses and services most of the time, and one long process slows
# down as its heap grows (its garbage collections walk every object the earlier tests left).
WORKERS=${TBX_TEST_WORKERS:-2}
.venv/bin/python -m pytest -m "not verl" -n "$WORKERS" --dist loadfile --durations=15 "$@" || status=$?  # the 15 slowest, for the time budget
# The adapters of tbx.envs against TRL, verifiers and OpenEnv, in .venv-envs (tests/envs, marker `envs`; in
# .venv they skip). Run with the whole suite, but for the slow ones (vf-eval runs, one against tbx's vLLM; 2 TRL GRPO
# steps on mock and on the training sample: .venv-envs/bin/python -m pytest -m envs tests/envs; times in
# docs/environments.md). TBX_SKIP_ENVS=1 skips them. They are light (under a minute), so they run beside the verl
# suite, whose real training run mostly waits on its own processes; their output follows the verl suite's.
ENVS_PID=""
if [ "${TBX_SKIP_ENVS:-0}" != 1 ] && [ $# -eq 0 ]; then
  ENVS_LOG=$(mktemp)
  .venv-envs/bin/python -m pytest -m "envs and not slow" tests/envs -q -p no:cacheprovider > "$ENVS_LOG" 2>&1 &
  ENVS_PID=$!
fi
if [ "$VERL_TESTS" = 1 ]; then
  echo "[test] the verl suite in .venv-vllm"
  .venv-vllm/bin/python -m pytest -m verl -p no:cacheprovider --durations=5 "$@" || status=$?
fi
if [ -n "$ENVS_PID" ]; then
  echo "[test] the envs suite in .venv-envs (run beside the verl suite)"
  wait "$ENVS_PID" || status=$?
  cat "$ENVS_LOG"
  rm -f "$ENVS_LOG"
fi
exit $status
