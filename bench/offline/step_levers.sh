#!/bin/bash
# On the GPU machine, from the repository root, once bench/offline/setup.sh's parts have all arrived (the GGUF
# too: the random-weight model takes the embedded tokenizer): `bash bench/offline/step_levers.sh [STEPS]`
# measures the GRPO step's update levers in one call, each against this tree's defaults on the same machine:
# the update's forward and backward at a new shape each repeat with cuDNN attention allowed and off
# (bench/grpo_update.py), then whole steps with --no-cudnn-attention, and with it, no recompute and four
# micro-batches (bench/grpo_step.py --against-flags=). Results land in $OUT (update.json, step-*.json, log).
source bench/offline/setup.sh .offline
STEPS=${1:-4}
set -o pipefail
{
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  python3 bench/grpo_update.py --device cuda --rows 32 --length 3000 --repeats 4 > "$OUT/update.json" && cat "$OUT/update.json"
  python3 bench/grpo_step.py --device cuda --steps "$STEPS" --against-flags= --flags=--no-cudnn-attention \
    --json "$OUT/step-cudnn.json" | grep -E "median|x$"
  python3 bench/grpo_step.py --device cuda --steps "$STEPS" --against-flags= \
    "--flags=--no-cudnn-attention --no-gradient-checkpointing --update-micro-batches 4" \
    --json "$OUT/step-all.json" | grep -E "median|x$"
} 2>&1 | tee "$OUT/log"
