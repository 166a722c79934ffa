#!/bin/bash
# On the GPU machine, once the GGUF has arrived (bench/offline/setup.sh): the short experiment's GRPO stage in
# several arms from one SFT stage, each arm a copy of the file with [grpo] keys outside the settings digest, so
# they differ in how the update and rollouts run and in nothing they compute. Each call of the device runs at most
# 10 minutes, so an arm's --minutes is what is left of LIMIT_S (default 560) seconds of this call:
#   SFT=1 ARMS="new:compile_decode = true" bash bench/offline/grpo_arms.sh     # the SFT stage, then arm "new"
#   ARMS="old:fused_dora = false|fused:" bash bench/offline/grpo_arms.sh       # more arms, the same SFT stage
# Brings back each arm's steps.jsonl and log as ARM-... in $OUT (and a traced step's table where one is asked).
source bench/offline/setup.sh .offline > /dev/null
left() { python3 -c "print(max(0.5, round(($LIMIT_S - $SECONDS) / 60 - 0.4, 2)))"; }
LIMIT_S=${LIMIT_S:-560}
if [ -n "$SFT" ] && [ ! -e /tmp/sft0 ]; then
  PARTS=4 UNTIL=sft RUN=/tmp/sft0 TAG=sft- MINUTES=$(left) bash bench/offline/decode_levers.sh | grep -v "^total\|^d\|^-"
fi
IFS='|' read -ra arms <<< "$ARMS"
for arm in "${arms[@]}"; do
  name=${arm%%:*}; keys=${arm#*:}
  PARTS=4 FROM=/tmp/sft0 RUN=/tmp/arm-$name TAG=$name- MINUTES=$(left) GRPO_KEYS="$keys" \
    bash bench/offline/decode_levers.sh | grep -v "^total\|^d\|^-"
  python3 - "$OUT/$name-grpo_steps.jsonl" "$name" <<'PY'
import json, statistics, sys
try:
    rows = [json.loads(line) for line in open(sys.argv[1])]
except OSError:
    sys.exit(print(sys.argv[2], "no steps.jsonl"))
keys = [k for k in rows[0] if k.endswith(("_s", "_seconds", "step_time"))]
print(sys.argv[2], len(rows), "steps;", {k: round(statistics.median(r[k] for r in rows if k in r), 3) for k in keys})
PY
done
