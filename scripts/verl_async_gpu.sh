#!/usr/bin/env bash
# verl's asynchronous trainer on tbx episodes on a CUDA machine (docs/training.md, "verl's asynchronous mode").
#
# 1. One GPU: the run the CPU test makes (tests/verl_bridge/test_verl_async_cpu.py), `grpo.max_staleness=1`:
#    verl's V1 trainer in colocate_async (trainer and vLLM on the GPU; at a weight sync the requests in flight
#    are aborted and resumed on the new weights), 4 steps of 2 groups x 8 episodes on the embedded default's pool.
# 2. Two GPUs or more: the same run's verl command again in separate_async, vLLM on a rollout GPU of its own
#    (generating while the trainer updates), weights synced by verl's NCCL checkpoint engine, into a second run
#    folder. This layout cannot run on a CPU machine: verl's separate_async refuses the colocated ("naive")
#    weight sync and its NCCL, NIXL and Mooncake engines need CUDA (cupy) or RDMA.
#
# Not run on the development machines (they have no GPU). Usage: bash scripts/verl_async_gpu.sh [extra overrides
# for the training stage]. Needs the GPU venv of scripts/verl_gpu.sh (vLLM's CUDA build, verl 0.9.1) and, for
# part 2, cupy for CUDA (`pip install cupy-cuda12x`, or cupy-cuda13x on a CUDA 13 driver).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-outputs/verl-async-gpu}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no $PY: run scripts/verl_gpu.sh once (it builds the GPU venv)"; exit 2; }
export HF_HUB_OFFLINE=1
T0=$(date +%s)
if [ ! -f "$OUT/pool.json" ]; then
  "$PY" launch.py stage=probe tasks=train_sample eval.attempts=8 policy=model out_root="$OUT" logger=none
  PROBE=$(ls -d "$OUT"/probe-train_sample-* | head -1)
  "$PY" launch.py stage=select select.probe_run="$PROBE" out_root="$OUT" logger=none "select.manifest_path=$OUT/pool.json"
fi
# 1. colocate_async on one GPU: what grpo.max_staleness=1 maps to
"$PY" launch.py stage=train grpo.trainer=verl grpo.max_staleness=1 train.pool="$OUT/pool.json" grpo=cpu_small \
  grpo.groups_per_step=2 grpo.group_size=8 grpo.steps=4 grpo.max_prompt_tokens=2048 grpo.max_response_tokens=2048 \
  eval.max_turns=6 hardware=local_gpu out_root="$OUT" logger=none "$@"
TRAIN=$(ls -d "$OUT"/train-* | head -1)
echo "verl colocate_async on one GPU: $TRAIN ($(( $(date +%s) - T0 )) s so far)"
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -lt 2 ]; then
  echo "one GPU: separate_async (a rollout GPU of its own) needs two"; exit 0
fi
# 2. separate_async: the trainer on GPU 0, vLLM on GPU 1; verl's command of run 1 with the layout's keys last
# (Hydra takes the last value of a key), its checkpoints, metrics and rollout dump in a folder of its own
SEP="$TRAIN/separate_async"
mkdir -p "$SEP"
T1=$(date +%s)
(cd "$TRAIN" && eval "$(tail -1 verl/command.sh)" \
  trainer.v1.trainer_mode=separate_async trainer.v1.separate_async.parameter_sync_step=1 \
  trainer.v1.separate_async.num_warmup_batches=1 actor_rollout_ref.hybrid_engine=False \
  trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.nnodes=1 actor_rollout_ref.rollout.n_gpus_per_node=1 \
  actor_rollout_ref.rollout.checkpoint_engine.backend=nccl \
  trainer.default_local_dir="$SEP/checkpoints" trainer.rollout_data_dir="$SEP/rollouts" \
  ++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH="$SEP/metrics.jsonl" \
  2>&1 | tee "$SEP/main_ppo.log")
echo "verl separate_async on 2 GPUs: $SEP in $(( $(date +%s) - T1 )) s"
