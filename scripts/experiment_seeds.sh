#!/usr/bin/env bash
# The training experiment of the README: SmolLM2-135M trained with native GRPO on an easy training
# pool, pool pass@1 before and after on fresh attempts, for several training seeds.
#
#   bash scripts/experiment_seeds.sh [OUT] [SEEDS...]      # defaults: outputs/experiment-seeds 0 1 2
#
# 1. probe the easy training sample (8 attempts per task), select the full-parameter pool;
# 2. for each seed: evaluate the base model on the pool (fresh attempts: their own seed), train
#    `grpo=cpu_small` with that seed, evaluate the trained model the same way;
# 3. print pass@1 before/after per seed and the mean and spread (results.json).
# STALENESS=1 trains with grpo.max_staleness=1 (asynchronous GRPO, docs/training.md) into train-s1/ and
# after-s1/ beside the synchronous runs, sharing the probe, pool and "before" evaluations; results-s1.json.
# Each seed's row also has the training's step timings from its train.json (mean seconds a step, the
# trainer's and the rollouts' idle fractions).
# Every step is an ordinary launch.py stage with a fixed run folder, so a killed experiment
# resumes where it stopped when run again with the same arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/experiment-seeds}")
if [ $# -gt 1 ]; then SEEDS=("${@:2}"); else SEEDS=(0 1 2); fi
PY=.venv/bin/python
COMMON=(logger=none model=smollm2_135m policy=model eval.max_turns=3 model.max_new_tokens=48 eval.concurrency=16
        "backend.workdir=$OUT/db")
ATTEMPTS=${ATTEMPTS:-8}
STEPS=${STEPS:-6}
STALENESS=${STALENESS:-0}
TAG=$([ "$STALENESS" = 0 ] && echo "" || echo "-s$STALENESS")

$PY launch.py stage=probe tasks=train_sample probe.attempts=8 probe.adaptive=false "${COMMON[@]}" \
    "run_dir=$OUT/probe"
$PY launch.py stage=select "select.probe_run=$OUT/probe" "select.manifest_path=$OUT/pool.json" "${COMMON[@]}" \
    "run_dir=$OUT/select"
for seed in "${SEEDS[@]}"; do
  EVAL=(stage=eval tasks=train_sample "tasks.pool=$OUT/pool.json" "eval.attempts=$ATTEMPTS" "seed=$((1000 + seed))")
  $PY launch.py "${EVAL[@]}" "${COMMON[@]}" "run_dir=$OUT/seed$seed/before" "summary_path=$OUT/seed$seed/before.json"
  $PY launch.py stage=train grpo=cpu_small "grpo.steps=$STEPS" "grpo.max_staleness=$STALENESS" \
      "train.pool=$OUT/pool.json" "seed=$seed" "${COMMON[@]}" "run_dir=$OUT/seed$seed/train$TAG"
  $PY launch.py "${EVAL[@]}" "${COMMON[@]}" "model.path=$OUT/seed$seed/train$TAG/final_model" \
      model.name=smollm2_135m-grpo "run_dir=$OUT/seed$seed/after$TAG" "summary_path=$OUT/seed$seed/after$TAG.json"
done
$PY - "$OUT" "$TAG" "${SEEDS[@]}" <<'EOF'
import json, statistics, sys
out, tag, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for seed in seeds:
    before, after = (json.load(open(f"{out}/seed{seed}/{name}.json")) for name in ("before", f"after{tag}"))
    history = json.load(open(f"{out}/seed{seed}/train{tag}/train.json"))["history"]
    timing = {key: statistics.mean(h.get(f"train/{key}", float("nan")) for h in history)
              for key in ("step_seconds", "update_seconds", "trainer_idle_fraction", "rollout_idle_fraction")}
    rows.append({"seed": int(seed), "before": before["pass_at_1"], "after": after["pass_at_1"],
                 "tasks": before["n_tasks"], "episodes": before["episodes"], "steps": len(history), **timing})
    print(f"seed {seed}: pool pass@1 {before['pass_at_1']:.3f} -> {after['pass_at_1']:.3f} "
          f"({before['n_tasks']} tasks, {before['episodes']} episodes each); a step {timing['step_seconds']:.0f} s "
          f"(update {timing['update_seconds']:.0f} s), trainer idle {timing['trainer_idle_fraction']:.2f}, "
          f"rollouts idle {timing['rollout_idle_fraction']:.2f}")
deltas = [row["after"] - row["before"] for row in rows]
spread = statistics.stdev(deltas) if len(deltas) > 1 else 0.0
print(f"mean change {statistics.mean(deltas):+.3f} (sd {spread:.3f} over {len(rows)} seeds)")
json.dump({"rows": rows, "mean_change": statistics.mean(deltas), "sd_change": spread},
          open(f"{out}/results{tag}.json", "w"), indent=2)
EOF
