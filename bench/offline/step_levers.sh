#!/bin/bash
# On the GPU machine, from the repository root, once bench/offline/setup.sh's parts have all arrived (the GGUF
# too: the random-weight model takes the embedded tokenizer): `[STEPS=3] [SEEDS="1 2 3"] [ALL=1] bash
# bench/offline/step_levers.sh` measures the GRPO step's update levers in one call, each against this tree's
# defaults on the same machine: the update's forward and backward at a new shape each repeat with cuDNN
# attention allowed and off (bench/grpo_update.py), then whole steps with --cudnn-attention against the default, one run of
# each per seed (bench/grpo_step.py --against-flags= --seeds), and with ALL=1 also with no recompute and four
# micro-batches on top. About 70 s a run on an H100. Results land in $OUT (update.json, step-*.json, log).
source bench/offline/setup.sh .offline
STEPS=${STEPS:-3}; SEEDS=${SEEDS:-1 2 3}
set -o pipefail
{
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  python3 bench/grpo_update.py --device cuda --rows 16 --length 2048 --repeats 4 > "$OUT/update.json" && cat "$OUT/update.json"
  python3 bench/grpo_step.py --device cuda --steps "$STEPS" --seeds $SEEDS --against-flags=--cudnn-attention \
    --flags= --json "$OUT/step-cudnn.json" | grep -E "median|speedup"
  [ -n "$ALL" ] && python3 bench/grpo_step.py --device cuda --steps "$STEPS" --seeds $SEEDS --against-flags= \
    "--flags=--no-gradient-checkpointing --update-micro-batches 4" \
    --json "$OUT/step-all.json" | grep -E "median|speedup"
} 2>&1 | tee "$OUT/log"
