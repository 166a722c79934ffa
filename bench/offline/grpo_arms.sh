#!/bin/bash
# On the GPU machine, once the GGUF has arrived (bench/offline/setup.sh): the short experiment's GRPO stage in
# several arms from one SFT stage, each arm a copy of the file with [grpo] keys outside the settings digest, so
# they differ in how the update and rollouts run and in nothing they compute. Each call of the device runs at most
# 10 minutes, so an arm's --minutes is what is left of LIMIT_S (default 560) seconds of this call:
#   SFT=1 ARMS="new:compile_decode = true" bash bench/offline/grpo_arms.sh     # the SFT stage, then arm "new"
#   ARMS="old:fused_dora = false|fused:" bash bench/offline/grpo_arms.sh       # more arms, the same SFT stage
#   SFT=1 SEEDS="1 2" ARMS="new:" bash bench/offline/grpo_arms.sh              # two more training seeds' SFT, one
#                                                                               # after another, then the arm from each
# Brings back each arm's files (steps.jsonl, report, log, a traced step's table, the py-spy recording) in one
# archive, $OUT/ARM-files.tgz, the SFT stage's as sft-files.tgz: a call brings back at most 8 files, and two arms'
# loose files were more than that (the seventh session lost the second arm's steps.jsonl to it).
# ARM_MINUTES caps each arm (default: what is left of the call), so that two arms fit one call alike.
source bench/offline/setup.sh .offline > /dev/null
left() { python3 -c "print(max(0.5, round(min(($LIMIT_S - $SECONDS) / 60 - 0.4, ${1:-1e9}), 2)))"; }
bundle() {  # every file of $OUT named TAG-..., into $OUT/TAG-files.tgz
  local names; names=$(cd "$OUT" && ls -d "$1"-* 2>/dev/null | grep -v -- "-files.tgz$")
  [ -n "$names" ] && tar -C "$OUT" -czf "$OUT/$1-files.tgz" $names && (cd "$OUT" && rm -f $names)
}
LIMIT_S=${LIMIT_S:-560}
# SEEDS="0 1 2": the SFT stages of those training seeds one after another (each its own folder /tmp/sftN; three
# side by side ran an 80 GB H100 out of memory), each resumed by the next call where a call's time ended it (the
# machine's /tmp lasts while it stays warm), then every arm from each finished seed's folder, one at a time (a
# quiet card for the timed GRPO steps); files come back as sN-ARM-...; without SEEDS, the file's own seed in
# /tmp/sft0, as before.
seeds=${SEEDS:-}
sft_done() {  # whether /tmp/sft$1 holds a finished SFT stage (its experiment.json lists the stage)
  python3 -c "import glob, json, sys; f = glob.glob('/tmp/sft$1/**/experiment.json', recursive=True)
sys.exit(0 if f and 'sft' in json.load(open(f[0])).get('stages', {}) else 1)"
}
if [ -n "$SFT" ]; then
  for s in ${seeds:-0}; do
    sft_done $s && continue
    PARTS=4 UNTIL=sft RUN=/tmp/sft$s TAG=${seeds:+s$s-}sft- SEED=${seeds:+$s} MINUTES=$(left) \
      bash bench/offline/decode_levers.sh | grep -v "^total\|^d\|^-"
    bundle "${seeds:+s$s-}sft"
  done
fi
IFS='|' read -ra arms <<< "$ARMS"
for s in ${seeds:-0}; do
  sft_done $s || { echo "seed $s: no finished SFT stage in /tmp/sft$s (SFT=1 runs or resumes it)"; continue; }
  for arm in "${arms[@]}"; do
    name=${arm%%:*}; keys=${arm#*:}; tag=${seeds:+s$s-}$name
    PARTS=4 FROM=/tmp/sft$s RUN=/tmp/arm-$tag TAG=$tag- SEED=${seeds:+$s} MINUTES=$(left "$ARM_MINUTES") GRPO_KEYS="$keys" \
      bash bench/offline/decode_levers.sh | grep -v "^total\|^d\|^-"
    python3 - "$tag" <<'PY'
import glob, json, os, statistics, sys
files = glob.glob(os.path.join(os.environ["OUT"], sys.argv[1] + "-*grpo_steps.jsonl"))
try:
    rows = [json.loads(line) for line in open(files[0])]
except (IndexError, OSError):
    sys.exit(print(sys.argv[1], "no steps.jsonl"))
keys = [k for k in rows[0] if k.endswith(("_s", "_seconds", "step_time"))]
later = rows[1:] or rows  # the first step pays the process's compiles and captures
print(sys.argv[1], len(rows), "steps; medians of steps 2 on:",
      {k: round(statistics.median(r[k] for r in later if k in r), 3) for k in keys})
PY
    head -8 "$OUT/$tag-gil-summary.txt" 2>/dev/null | cut -c1-160
    bundle "$tag"
  done
done
